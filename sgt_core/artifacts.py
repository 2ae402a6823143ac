"""Stage artifacts on disk: cache keys, atomic writes, and lookups under `artifacts/<stage>/<key>/`."""

from __future__ import annotations

import functools
import hashlib
import json
import os
import shutil
import socket
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

METRICS_FILE = "metrics.json"
MANIFEST_FILE = "manifest.json"
# Private folders beside the results: a result being written, and a replaced one being deleted.
STAGING_PREFIX = ".tmp-"
RETIRED_PREFIX = ".old-"


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
    """Hash of the Python and C sources of `packages` (sub-packages of sgt_core), part of every cache key."""
    root = Path(__file__).resolve().parent
    digest = hashlib.sha256()
    for package in packages:
        target = root / package
        if target.is_dir():
            files = sorted(path for path in target.rglob("*") if path.suffix in (".py", ".c"))
        else:
            files = [target.with_suffix(".py")]
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

        An error removes the temporary directory; a killed run leaves it behind as a `.tmp-*` folder,
        which no lookup takes as a result and the next write to the same stage deletes. So a directory
        under its key is always complete. With `replace` (a forced re-run) an existing result is moved
        aside first; otherwise, if a concurrent run with the same key finished first, its result is kept
        and ours is discarded.
        """
        final = self.path(stage, key)
        final.parent.mkdir(parents=True, exist_ok=True)
        self._remove_abandoned(final.parent)
        staging = final.parent / _private_name(STAGING_PREFIX, key)
        staging.mkdir()
        try:
            yield staging
            if replace:
                retired = final.parent / _private_name(RETIRED_PREFIX, key)
                try:
                    os.rename(final, retired)
                except FileNotFoundError:  # nothing to replace, or a concurrent forced run moved it
                    pass
                else:
                    shutil.rmtree(retired, ignore_errors=True)
            try:
                os.rename(staging, final)
            except OSError:  # a concurrent run with the same key renamed its result into place first
                if not self.is_complete(stage, key):
                    raise
                shutil.rmtree(staging)
        except BaseException:
            shutil.rmtree(staging, ignore_errors=True)
            raise

    @staticmethod
    def _remove_abandoned(folder: Path) -> None:
        """Deletes the private folders that killed writers on this machine left in a stage's folder."""
        for entry in folder.iterdir():
            if entry.name.startswith((STAGING_PREFIX, RETIRED_PREFIX)) and _writer_is_gone(entry.name):
                shutil.rmtree(entry, ignore_errors=True)

    @staticmethod
    def finish(staging: Path, metrics: dict, manifest: dict) -> None:
        """Writes the metrics and, last, the manifest that marks the directory complete."""
        (staging / METRICS_FILE).write_text(json.dumps(metrics, indent=2))
        (staging / MANIFEST_FILE).write_text(json.dumps(manifest, indent=2))


def _private_name(prefix: str, key: str) -> str:
    """`<prefix><key>-<random>-<pid>@<host>`: unique, and naming the process that writes it."""
    return f"{prefix}{key}-{uuid.uuid4().hex[:8]}-{os.getpid()}@{socket.gethostname()}"


def _writer_is_gone(name: str) -> bool:
    """Whether the process named in a private folder's name has ended (only decidable on its own host)."""
    owner, _, host = name.rpartition("@")
    pid = owner.rpartition("-")[2]
    if host != socket.gethostname() or not pid.isdigit():
        return False  # another machine's writer (a shared file system), or a name from an older version
    return not process_exists(int(pid))


def process_exists(pid: int) -> bool:
    """Whether a process with this id runs on this machine (signal 0 checks without signalling)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # exists, owned by another user
        return True
    return True
