"""The artifact store in an object store (s3://, gs://, ... through fsspec), with a local copy of what stages read."""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import os
import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from sgt_core.artifacts import (
    MANIFEST_FILE,
    METRICS_FILE,
    RETIRED_PREFIX,
    ArtifactError,
    ArtifactStore,
    checksum,
    is_url,
    private_name,
    read_upstream,
    staging_folder,
)
from sgt_core.errors import SGTError

log = logging.getLogger(__name__)


def open_store(root: str | Path) -> ArtifactStore:
    """The artifact store at `root`: a folder (local or a shared file system) or an fsspec URL (`s3://bucket/prefix`)."""
    if is_url(root):
        return ObjectArtifactStore(str(root))
    return ArtifactStore(Path(root))


def object_cache_root() -> Path:
    """Where results read from or written to an object store are kept locally: `$SGT_OBJECT_CACHE`, else
    `~/.cache/sgt/objects`. Deleting it is safe: results are downloaded again when needed."""
    return Path(os.environ.get("SGT_OBJECT_CACHE", Path.home() / ".cache" / "sgt" / "objects"))


class ObjectArtifactStore(ArtifactStore):
    """Stage outputs under `<url>/<stage>/<key>/` in an object store, through fsspec (s3://, gs://, ...).

    Object stores have no atomic rename, so the rule "complete only with its manifest" is kept by order:
    a result is written locally, then every file is uploaded, then `manifest.json` last; a writer killed
    midway leaves objects without a manifest, which no lookup takes as a result and the next write replaces.
    A forced re-run deletes the old manifest before anything else. Stages read and write local folders: a
    result is downloaded (checksums verified) into a local cache keyed by the root URL, once.
    Credentials and endpoints come from the usual variables (AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY,
    AWS_ENDPOINT_URL for an S3-compatible server such as MinIO) or fsspec's configuration.
    """

    def __init__(self, url: str) -> None:
        import fsspec
        from fsspec.core import split_protocol

        self.url = url.rstrip("/")
        protocol, path = split_protocol(self.url)
        try:
            self.fs = fsspec.filesystem(protocol)
        except (ImportError, ValueError) as error:
            raise SGTError(f"{self.url}: cannot open this object store ({error}); for s3:// install s3fs") from None
        self.base = path
        self.root = object_cache_root() / hashlib.sha256(self.url.encode()).hexdigest()[:16]
        self.cache = self.root

    def _key_path(self, stage: str, key: str) -> str:
        return f"{self.base}/{stage}/{key}"

    def location(self, stage: str | None = None, key: str | None = None) -> str:
        return f"{self.url}/{stage}/{key}" if stage else self.url

    def path(self, stage: str, key: str) -> Path:
        """The local copy's folder (it may not be there yet: `local` downloads it)."""
        return self.cache / stage / key

    def remote_manifest(self, stage: str, key: str) -> dict | None:
        """The manifest at the key as the store holds it, None if there is none."""
        try:
            return json.loads(self.fs.cat_file(f"{self._key_path(stage, key)}/{MANIFEST_FILE}"))
        except FileNotFoundError:
            return None

    def damage(self, stage: str, key: str, checksums: bool = False) -> str | None:
        """As for a folder: what is wrong with the objects at the key, or None when whole or absent.

        Sizes are those the store lists; checksums are verified on the local copy (downloading it).
        """
        prefix = self._key_path(stage, key)
        try:
            manifest = self.remote_manifest(stage, key)
        except (OSError, ValueError) as error:
            return f"{MANIFEST_FILE} cannot be read ({error})"
        if manifest is None:
            return f"no {MANIFEST_FILE} (an incomplete folder)" if self.fs.exists(prefix) else None
        files = manifest.get("files") if isinstance(manifest, dict) else None
        if not isinstance(files, dict) or METRICS_FILE not in files:
            return f"{MANIFEST_FILE} records no file sizes and checksums (written by an older SGT)"
        sizes = {name.removeprefix(prefix + "/"): info["size"]
                 for name, info in self.fs.find(prefix, detail=True).items()}
        for name, record in files.items():
            if name not in sizes:
                return f"{name} is missing"
            if sizes[name] != record["size"]:
                return f"{name} has {sizes[name]} bytes, the manifest records {record['size']}"
        if checksums:
            try:
                self.local(stage, key)
            except ArtifactError as error:
                return str(error)
        return None

    def is_complete(self, stage: str, key: str, checksums: bool = False) -> bool:
        return self.remote_manifest(stage, key) is not None and self.damage(stage, key, checksums) is None

    def reuse(self, stage: str, key: str, checksums: bool = False) -> bool:
        problem = self.damage(stage, key, checksums)
        if problem is None:
            return self.remote_manifest(stage, key) is not None
        log.warning("%s: the cached result %s is damaged (%s); recomputing", stage, self.location(stage, key), problem)
        return False

    def quarantine(self, stage: str, key: str) -> None:
        """Deletes the objects at the key (an object store cannot move them aside in one step)."""
        prefix = self._key_path(stage, key)
        if self.fs.exists(prefix):
            self.fs.rm(prefix, recursive=True)

    def metrics(self, stage: str, key: str) -> dict:
        return read_upstream(self.local(stage, key), stage, METRICS_FILE, lambda path: json.loads(path.read_text()))

    def manifest(self, stage: str, key: str) -> dict:
        return read_upstream(self.local(stage, key), stage, MANIFEST_FILE, lambda path: json.loads(path.read_text()))

    def local(self, stage: str, key: str) -> Path:
        """The local copy of the result at the key, downloaded and checksum-verified unless already there."""
        remote = self.remote_manifest(stage, key)
        folder = self.path(stage, key)
        if remote is None:
            raise ArtifactError(f"{self.location(stage, key)}: no complete result (no {MANIFEST_FILE}); "
                                f"rebuild it with `sgt run stage={stage}`")
        manifest_file = folder / MANIFEST_FILE
        if manifest_file.is_file() and json.loads(manifest_file.read_text()) == remote:
            return folder
        with staging_folder(folder) as staging:
            for name, record in remote["files"].items():
                target = staging / name
                target.parent.mkdir(parents=True, exist_ok=True)
                self.fs.get_file(f"{self._key_path(stage, key)}/{name}", str(target))
                if checksum(target) != record["xxh3"]:
                    raise ArtifactError(f"{self.location(stage, key)}/{name}: its checksum differs from the "
                                        f"manifest's; rebuild it with `sgt run stage={stage}`")
            (staging / MANIFEST_FILE).write_text(json.dumps(remote, indent=2))
            _replace_folder(staging, folder)
        return folder

    @contextmanager
    def writing(self, stage: str, key: str, replace: bool = False) -> Iterator[Path]:
        """Yields a private local folder; on success its files are uploaded, the manifest last.

        Without `replace`, a complete result that a concurrent run uploaded first is kept and ours dropped.
        The uploaded folder then serves as the local copy.
        """
        folder = self.path(stage, key)
        with staging_folder(folder) as staging:
            yield staging
            prefix = self._key_path(stage, key)
            if not replace and self.remote_manifest(stage, key) is not None and self.damage(stage, key) is None:
                shutil.rmtree(staging)  # a concurrent run with the same key finished first
                return
            manifest = staging / MANIFEST_FILE
            try:
                self.fs.rm_file(f"{prefix}/{MANIFEST_FILE}")  # first: the old result is incomplete from here on
            except FileNotFoundError:
                pass
            if self.fs.exists(prefix):  # an old result's or a killed writer's objects
                self.fs.rm(prefix, recursive=True)
            for path in sorted(staging.rglob("*")):
                if path.is_file() and path != manifest:
                    self.fs.put_file(str(path), f"{prefix}/{path.relative_to(staging).as_posix()}")
            self.fs.put_file(str(manifest), f"{prefix}/{MANIFEST_FILE}")  # last: now the result is complete
            _replace_folder(staging, folder)


def _replace_folder(staging: Path, folder: Path) -> None:
    """Renames `staging` to `folder`, replacing an old folder there (a stale local copy)."""
    if folder.exists():
        retired = folder.parent / private_name(RETIRED_PREFIX, folder.name)
        with contextlib.suppress(FileNotFoundError):  # a concurrent process retired it first
            os.rename(folder, retired)
        shutil.rmtree(retired, ignore_errors=True)
    try:
        os.rename(staging, folder)
    except OSError:  # a concurrent process put its verified copy there first: keep that one
        shutil.rmtree(staging, ignore_errors=True)
