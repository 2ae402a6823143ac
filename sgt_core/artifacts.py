"""Stage artifacts: cache keys, atomic writes, checksums and lookups under `<root>/<stage>/<key>/` in a folder
(`sgt_core.object_store` holds the same in an object store, `sgt_core.code_version` the code part of the keys)."""

from __future__ import annotations

import hashlib
import json
import logging
import os
import shutil
import socket
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TypeVar

import xxhash

from sgt_core.errors import SGTError

log = logging.getLogger(__name__)

METRICS_FILE = "metrics.json"
MANIFEST_FILE = "manifest.json"
# Private folders beside the results: a result being written, and a replaced one being deleted.
STAGING_PREFIX = ".tmp-"
RETIRED_PREFIX = ".old-"
# A damaged result moved aside, kept for inspection (never read, never deleted by SGT).
CORRUPT_PREFIX = ".corrupt-"
# A file being written beside its final name (`atomic_path`).
PARTIAL_PREFIX = ".partial-"
_BLOCK = 8 << 20  # bytes read at a time when checksumming

T = TypeVar("T")


class ArtifactError(SGTError):
    """A cached artifact exists but cannot be read; the message names the file and how to rebuild it."""


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


def checksum(path: Path) -> str:
    """xxh3-64 of a file's bytes: ~10 GB/s, so verifying a large artifact costs about as much as reading it."""
    digest = xxhash.xxh3_64()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(_BLOCK), b""):
            digest.update(block)
    return digest.hexdigest()


def file_records(folder: Path) -> dict[str, dict]:
    """Size and checksum of every file below `folder` (but the manifest), by path relative to it."""
    return {
        path.relative_to(folder).as_posix(): {"size": path.stat().st_size, "xxh3": checksum(path)}
        for path in sorted(folder.rglob("*"))
        if path.is_file() and path.name != MANIFEST_FILE
    }


def read_upstream(folder: Path, stage: str, name: str, reader: Callable[[Path], T]) -> T:
    """`reader(folder / name)` for a stage's input; a failure names the file and the override rebuilding it.

    The store verifies checksums before a stage reads its upstream, so this catches what a checksum cannot:
    a file that was written whole but unreadable, or a manifest from before checksums were recorded.
    """
    path = folder / name
    try:
        return reader(path)
    except Exception as error:
        first_line = str(error).strip().splitlines()[0] if str(error).strip() else ""
        problem = first_line if isinstance(error, SGTError) else f"{type(error).__name__}: {first_line}"
        raise ArtifactError(
            f"{path}: cannot be read ({problem}); rebuild it with `sgt run stage={stage}` (and the same overrides)"
        ) from error


class ArtifactStore:
    """Stage outputs under `root/<stage>/<key>/`; a directory exists there only once it is complete."""

    def __init__(self, root: Path) -> None:
        self.root = Path(root)

    def path(self, stage: str, key: str) -> Path:
        return self.root / stage / key

    def location(self, stage: str | None = None, key: str | None = None) -> str:
        """Where a result (or, without arguments, the root) lives, as shown to people: an absolute path."""
        return str((self.path(stage, key) if stage else self.root).resolve())

    def local(self, stage: str, key: str) -> Path:
        """A local folder holding the complete result at the key, for stages and plots to read."""
        return self.path(stage, key)

    def damage(self, stage: str, key: str, checksums: bool = False) -> str | None:
        """What is wrong with the folder at the key, or None when it is whole or absent.

        Whole means: a readable manifest that records every file's size and checksum, and every recorded
        file present with that size (and, with `checksums`, that checksum).
        """
        folder = self.path(stage, key)
        if not folder.exists():
            return None
        try:
            manifest = json.loads((folder / MANIFEST_FILE).read_text())
        except FileNotFoundError:
            return f"no {MANIFEST_FILE} (an incomplete folder)"
        except (OSError, ValueError) as error:
            return f"{MANIFEST_FILE} cannot be read ({error})"
        files = manifest.get("files") if isinstance(manifest, dict) else None
        if not isinstance(files, dict) or METRICS_FILE not in files:
            return f"{MANIFEST_FILE} records no file sizes and checksums (written by an older SGT)"
        for name, record in files.items():
            path = folder / name
            if not path.is_file():
                return f"{name} is missing"
            size = path.stat().st_size
            if size != record["size"]:
                return f"{name} has {size} bytes, the manifest records {record['size']}"
            if checksums and checksum(path) != record["xxh3"]:
                return f"{name}'s checksum differs from the manifest's"
        return None

    def is_complete(self, stage: str, key: str, checksums: bool = False) -> bool:
        """Whether a whole result is at the key (sizes checked; checksums too if asked). Reads only."""
        return self.path(stage, key).exists() and self.damage(stage, key, checksums) is None

    def reuse(self, stage: str, key: str, checksums: bool = False) -> bool:
        """Whether a whole result is at the key; a damaged one is moved aside so that the stage recomputes."""
        problem = self.damage(stage, key, checksums)
        if problem is None:
            return self.path(stage, key).exists()
        aside = self.quarantine(stage, key)
        if aside is not None:
            log.warning("%s: the cached result %s is damaged (%s); moved it to %s and recomputing",
                        stage, self.path(stage, key), problem, aside)
        return False

    def quarantine(self, stage: str, key: str) -> Path | None:
        """Moves the folder at the key to `.corrupt-<key>-…` beside it; None if it was already gone."""
        stamp = f"{time.strftime('%Y%m%dT%H%M%S')}-{uuid.uuid4().hex[:6]}"
        aside = self.path(stage, key).parent / f"{CORRUPT_PREFIX}{key}-{stamp}"
        try:
            os.rename(self.path(stage, key), aside)
        except FileNotFoundError:  # a concurrent run moved or replaced it first
            return None
        return aside

    def metrics(self, stage: str, key: str) -> dict:
        return read_upstream(self.path(stage, key), stage, METRICS_FILE, lambda path: json.loads(path.read_text()))

    def manifest(self, stage: str, key: str) -> dict:
        return read_upstream(self.path(stage, key), stage, MANIFEST_FILE, lambda path: json.loads(path.read_text()))

    @contextmanager
    def writing(self, stage: str, key: str, replace: bool = False) -> Iterator[Path]:
        """Yields a private temporary directory; on success it is renamed into place in one step.

        An error removes the temporary directory; a killed run leaves it behind as a `.tmp-*` folder,
        which no lookup takes as a result and the next write to the same stage deletes. So a directory
        under its key is always complete. With `replace` (a forced re-run) an existing result is moved
        aside first; otherwise, if a concurrent run with the same key finished first, its result is kept
        and ours is discarded. An incomplete or damaged folder found at the key is moved to `.corrupt-*`.
        """
        final = self.path(stage, key)
        with staging_folder(final) as staging:
            yield staging
            if replace:
                retired = final.parent / private_name(RETIRED_PREFIX, key)
                try:
                    os.rename(final, retired)
                except FileNotFoundError:  # nothing to replace, or a concurrent forced run moved it
                    pass
                else:
                    shutil.rmtree(retired, ignore_errors=True)
            try:
                os.rename(staging, final)
            except OSError:  # a folder is at the key: a concurrent run's result, or a damaged one
                if self.is_complete(stage, key):  # a concurrent run with the same key finished first
                    shutil.rmtree(staging)
                else:
                    aside = self.quarantine(stage, key)
                    if aside is not None:
                        log.warning("%s: replaced the damaged folder %s (moved to %s)", stage, final, aside)
                    os.rename(staging, final)

    @staticmethod
    def _remove_abandoned(folder: Path) -> None:
        """Deletes the private folders that killed writers on this machine left in a stage's folder."""
        for entry in folder.iterdir():
            if entry.name.startswith((STAGING_PREFIX, RETIRED_PREFIX)) and _writer_is_gone(entry.name):
                shutil.rmtree(entry, ignore_errors=True)

    @staticmethod
    def finish(staging: Path, metrics: dict, manifest: dict) -> None:
        """Writes the metrics and, last, the manifest that marks the directory complete.

        The manifest records each file's size and checksum; it is written under another name and renamed,
        so a manifest that exists is whole.
        """
        (staging / METRICS_FILE).write_text(json.dumps(metrics, indent=2))
        records = file_records(staging)
        with atomic_path(staging / MANIFEST_FILE) as partial:
            partial.write_text(json.dumps({**manifest, "files": records}, indent=2))


@contextmanager
def atomic_path(path: Path) -> Iterator[Path]:
    """Yields a temporary path beside `path` to write; once the block succeeds it is renamed over `path`.

    So `path` is absent, or holds the old or the new content whole, never half of it. The temporary file
    sits in the same folder (a rename within one file system is atomic) and keeps the name's ending
    (`.partial-scale.png`), so that writers that infer the format from the suffix (matplotlib) still
    do; being hidden, it matches no `layer_*.parquet`-style pattern. An error removes it.
    """
    path = Path(path)
    partial = path.with_name(PARTIAL_PREFIX + path.name)
    try:
        yield partial
        os.replace(partial, path)
    except BaseException:
        partial.unlink(missing_ok=True)
        raise


@contextmanager
def staging_folder(folder: Path) -> Iterator[Path]:
    """Yields a new private folder beside `folder` (its stage's folder first cleared of abandoned ones).

    What the caller does with it (rename, upload) happens inside the block; an error removes the folder.
    """
    folder.parent.mkdir(parents=True, exist_ok=True)
    ArtifactStore._remove_abandoned(folder.parent)
    staging = folder.parent / private_name(STAGING_PREFIX, folder.name)
    staging.mkdir()
    try:
        yield staging
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise


def private_name(prefix: str, key: str) -> str:
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


def is_url(location: str | Path) -> bool:
    """Whether an artifacts root is an object-store URL (`s3://bucket/prefix`) rather than a folder."""
    return "://" in str(location)
