"""The train stage (`run_train`) on the tiny grid: the epoch it keeps, the files it writes, the checkpoint.

The degrees are larger than any node's candidates in the interaction graph (grid edges, expander degree 4
and a self-loop), so that every layer keeps every candidate: evaluation samples nothing at random, and the
checkpoint's predictions can be compared with the metrics the stage reported.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
import torch

from sgt_core.train.outputs import HISTORY_FILE, MODEL_FILE, SAMPLED_DEGREES_FILE
from sgt_core.train.stage import WideNetworkTraining, _read_inputs, run_train
from tests.stage_runner import run_stages

EPOCHS = 5
OVERRIDES = ["model.degrees=[16,16]", f"train.epochs={EPOCHS}", "train.eval_every=1"]


@pytest.fixture(scope="module")
def trained(tmp_path_factory) -> tuple[dict, dict[str, Path], Path, dict]:
    root = tmp_path_factory.mktemp("train_stage")
    cfg, outputs, _ = run_stages(root, OVERRIDES, until="export")
    inputs = {name: outputs[name] for name in ("preprocess", "export")}
    out_dir = root / "train"
    out_dir.mkdir()
    return cfg, inputs, out_dir, run_train(cfg, inputs, out_dir)


def test_every_candidate_is_kept(trained):
    cfg, inputs, _, _ = trained
    graph, _ = _read_inputs(cfg, inputs)
    in_degree = torch.bincount(graph.edge_index[1].long(), minlength=graph.num_nodes)
    assert int(in_degree.max()) <= min(cfg["model"]["degrees"])


def test_the_best_epoch_is_chosen_on_validation(trained):
    cfg, inputs, out_dir, metrics = trained
    history = json.loads((out_dir / HISTORY_FILE).read_text())
    assert [row["epoch"] for row in history] == list(range(EPOCHS))
    assert all(math.isfinite(row["loss"]) for row in history)
    graph, _ = _read_inputs(cfg, inputs)
    task = graph.task_spec(cfg["train"]["regression_loss"])
    column = metrics["selected_by"]
    assert column == f"val_{task.metric}"
    values = [row[column] for row in history]
    best = max(values) if task.maximise else min(values)
    assert metrics["best_epoch"] == values.index(best)  # the first epoch reaching it
    assert metrics[column] == pytest.approx(best)
    assert f"test_{task.metric}" in metrics


def test_the_checkpoint_is_the_best_epoch_and_predicts_what_was_reported(trained):
    cfg, inputs, out_dir, metrics = trained
    checkpoint = torch.load(out_dir / MODEL_FILE, weights_only=False)
    assert checkpoint["epoch"] == metrics["best_epoch"]
    assert checkpoint["config"] == {group: cfg[group] for group in ("model", "sampler", "optimizer", "train")}

    graph, scores = _read_inputs(cfg, inputs)
    training = WideNetworkTraining.build(cfg, graph, scores, torch.device("cpu"))
    val_nodes = graph.val_mask.nonzero().flatten()
    training.model.eval()
    with torch.no_grad():
        untrained = training.predict(val_nodes, training.model)
    training.model.load_state_dict(checkpoint["state_dict"])
    with torch.no_grad():
        reloaded = training.predict(val_nodes, training.model)
    task = graph.task_spec(cfg["train"]["regression_loss"])
    targets = graph.y[val_nodes]
    assert task.value(task.metric, reloaded, targets) == pytest.approx(metrics[f"val_{task.metric}"], abs=1e-6)
    assert not torch.allclose(untrained, reloaded)


def test_the_sampled_degrees_are_written_per_layer(trained):
    cfg, _, out_dir, _ = trained
    histograms = json.loads((out_dir / SAMPLED_DEGREES_FILE).read_text())
    assert len(histograms) == cfg["model"]["num_layers"]
