"""The benchmarks' stage runner (benchmarks/run.py): everything a run keeps lands in the benchmark's own store."""

from __future__ import annotations

import pytest

from benchmarks.run import run_stage
from sgt_core.artifacts import ArtifactStore
from sgt_core.config import compose_config
from sgt_core.pipeline import STAGES, stage_keys
from sgt_core.train.propagation_rows import PROPAGATION, ROWS_FILE
from tests.conftest import TINY_OVERRIDES

TOP_K = ["model.local=appnp", "model.local_steps=3", "model.local_teleport=0.1", "model.local_top_k=4"]


@pytest.mark.e2e  # four stages through the benchmark's runner, in processes of their own
def test_the_top_k_rows_of_a_benchmark_run_land_in_its_store_not_the_default_artifacts(tmp_path, monkeypatch):
    default_artifacts = tmp_path / "default-artifacts"
    monkeypatch.setenv("SGT_ARTIFACTS", str(default_artifacts))  # where the composed config points by default
    cfg = compose_config([*TINY_OVERRIDES, *TOP_K])
    assert cfg["paths"]["artifacts"] == str(default_artifacts)
    store = ArtifactStore(tmp_path / "bench-cache")
    keys = stage_keys(cfg)
    for stage in STAGES:
        run_stage(store, stage, cfg, keys)
    rows = list((store.root / PROPAGATION).glob(f"*/{ROWS_FILE}"))
    assert len(rows) == 1, "the train stage keeps its rows in the benchmark's store"
    assert not default_artifacts.exists(), "nothing of the run is written to the default artifacts folder"
    assert cfg["paths"]["artifacts"] == str(default_artifacts), "the caller's config is left as it was"
