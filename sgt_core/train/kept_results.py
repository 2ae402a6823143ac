"""The results the train stage keeps in the artifact store beside the stages' folders, described for the tools
that list the store (`sgt stages`), so that they need not know what the results are."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from sgt_core.train.outputs import PROPAGATION, ROWS_FILE


@dataclass(frozen=True)
class KeptResult:
    """A result the train stage keeps in the artifact store outside its own folder, at
    `<paths.artifacts>/<folder>/<key>/`, shared by every train stage that needs the same one. Its key is
    known once the preprocess stage's result is there to read."""

    name: str  # its entry in `sgt stages --json`
    description: str  # what `sgt stages` calls it
    folder: str
    files: tuple[str, ...]  # its main files, as glob patterns inside its folder
    needed: Callable[[dict], bool]  # whether the configuration's train stage uses it
    key: Callable[[dict, Path], str]  # its key, from the configuration and the preprocess stage's folder


def kept_results() -> tuple[KeptResult, ...]:
    """Every result the train stage may keep beside the stages' folders."""
    return (KeptResult("propagation_rows", "the train stage's top-k propagation rows (model.local_top_k)",
                       PROPAGATION, (ROWS_FILE,), _uses_top_k_rows, _top_k_rows_key),)


def _uses_top_k_rows(cfg: dict) -> bool:
    return cfg["model"]["local_top_k"] is not None


def _top_k_rows_key(cfg: dict, preprocess_dir: Path) -> str:
    from sgt_core.train.propagation_rows import stored_key  # torch: only once a key is asked for

    return stored_key(cfg, preprocess_dir)
