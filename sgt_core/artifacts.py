"""Stage artifacts on disk: cache keys, atomic writes, and lookups under `artifacts/<stage>/<key>/`."""

from __future__ import annotations

import functools
import hashlib
import json
import os
import shutil
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

METRICS_FILE = "metrics.json"
MANIFEST_FILE = "manifest.json"


def fingerprint(value) -> str:
    """A stable short hash of any JSON-serialisable value."""
    return hashlib.sha256(json.dumps(value, sort_keys=True, default=str).encode()).hexdigest()[:16]


def file_fingerprint(path: Path) -> str:
    """Hash of a file's bytes, so an edited dataset file never hits a stale cache."""
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()[:16]


@functools.cache
def code_version(*packages: str) -> str:
    """Hash of the Python sources of `packages` (sub-packages of sgt_core), part of every cache key."""
    root = Path(__file__).resolve().parent
    digest = hashlib.sha256()
    for package in packages:
        target = root / package
        files = sorted(target.rglob("*.py")) if target.is_dir() else [target.with_suffix(".py")]
        for path in files:
            digest.update(str(path.relative_to(root)).encode())
            digest.update(path.read_bytes())
    return digest.hexdigest()[:16]


class ArtifactStore:
    """Stage outputs under `root/<stage>/<key>/`; a directory exists there only once it is complete."""

    def __init__(self, root: Path) -> None:
        self.root = Path(root)

    def path(self, stage: str, key: str) -> Path:
        return self.root / stage / key

    def is_complete(self, stage: str, key: str) -> bool:
        return (self.path(stage, key) / MANIFEST_FILE).is_file()

    def metrics(self, stage: str, key: str) -> dict:
        return json.loads((self.path(stage, key) / METRICS_FILE).read_text())

    def manifest(self, stage: str, key: str) -> dict:
        return json.loads((self.path(stage, key) / MANIFEST_FILE).read_text())

    @contextmanager
    def writing(self, stage: str, key: str, replace: bool = False) -> Iterator[Path]:
        """Yields a private temporary directory; on success it is renamed into place in one step.

        A crash or an error leaves only the temporary directory's removal (or, if killed, an ignored
        `.tmp-*` folder), never a directory a later run would take as complete. With `replace` (a forced
        re-run) an existing result is moved aside first; otherwise, if a concurrent run with the same key
        finished first, its result is kept and ours is discarded.
        """
        final = self.path(stage, key)
        token = uuid.uuid4().hex[:8]
        staging = final.parent / f".tmp-{key}-{token}"
        staging.mkdir(parents=True)
        try:
            yield staging
            if replace and final.exists():
                retired = final.parent / f".old-{key}-{token}"
                os.rename(final, retired)
                shutil.rmtree(retired, ignore_errors=True)
            try:
                os.rename(staging, final)
            except OSError:
                if not self.is_complete(stage, key):
                    raise
                shutil.rmtree(staging)
        except BaseException:
            shutil.rmtree(staging, ignore_errors=True)
            raise

    @staticmethod
    def finish(staging: Path, metrics: dict, manifest: dict) -> None:
        """Writes the metrics and, last, the manifest that marks the directory complete."""
        (staging / METRICS_FILE).write_text(json.dumps(metrics, indent=2))
        (staging / MANIFEST_FILE).write_text(json.dumps(manifest, indent=2))
