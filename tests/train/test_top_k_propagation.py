"""`model.local_top_k`: the gcn branch's K propagation steps train in Algorithm 2's batches, repeatably."""

from __future__ import annotations

import json

from sgt_core.train.outputs import HISTORY_FILE
from sgt_core.train.stage import run_train
from tests.stage_runner import run_stages
from tests.train.test_distributed import _distributed

# ten APPNP steps in batches of 16 targets (72 training nodes: 5 optimiser steps an epoch)
TOP_K = ["model.local=gcn", "model.local_steps=10", "model.local_teleport=0.1", "model.local_top_k=8",
         "train.batch_size=16", "train.epochs=6"]


def test_propagation_steps_train_in_batches_through_their_top_k_rows(tmp_path):
    _, outputs, metrics = run_stages(tmp_path / "first", TOP_K)
    history = json.loads((outputs["train"] / HISTORY_FILE).read_text())
    losses = [row["loss"] for row in history]
    assert len(losses) == 6 and losses[-1] < losses[0]
    assert 0.0 <= metrics["train"]["test_roc_auc"] <= 1.0  # 6 epochs on a 12 x 12 grid: a number, not a score
    # the same config and seed: the same rows, batches and model, so the same history
    _, again, _ = run_stages(tmp_path / "again", TOP_K)
    assert json.loads((again["train"] / HISTORY_FILE).read_text()) == history


def test_propagation_rows_train_under_ddp_through_torchrun(tmp_path):
    """Two ranks (torchrun, gloo): each rank's batches carry their targets' rows, as one process's do."""
    cfg, outputs, _ = run_stages(tmp_path / "upstream", TOP_K, until="export")
    (tmp_path / "ddp").mkdir()
    metrics = run_train(_distributed(cfg), {name: outputs[name] for name in ("preprocess", "export")},
                        tmp_path / "ddp")
    history = json.loads((tmp_path / "ddp" / HISTORY_FILE).read_text())
    assert [row["epoch"] for row in history] == list(range(6)) and history[-1]["loss"] < history[0]["loss"]
    assert 0.0 <= metrics["test_roc_auc"] <= 1.0
