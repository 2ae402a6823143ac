"""`train.ema_decay`: the moving average follows its recursion, leaves training alone, and is what the stage keeps."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from sgt_core.seeding import seed_everything
from sgt_core.train.stage import WideNetworkTraining, _read_inputs, run_train
from tests.stage_runner import run_stages

DECAY = 0.8
EPOCHS = 3
OVERRIDES = ["train.batch_size=16", f"train.epochs={EPOCHS}"]  # 72 training nodes: 5 optimiser steps an epoch


@pytest.fixture(scope="module")
def upstream(tmp_path_factory) -> tuple[dict, dict[str, Path]]:
    cfg, outputs, _ = run_stages(tmp_path_factory.mktemp("averaging"), OVERRIDES, until="export")
    return cfg, {name: outputs[name] for name in ("preprocess", "export")}


def _train(cfg: dict, inputs: dict[str, Path], decay: float | None) -> tuple[WideNetworkTraining, list[dict]]:
    """The stage's set-up trained for EPOCHS epochs, with the weights and buffers after every optimiser step."""
    seed_everything(cfg["seed"])
    graph, scores = _read_inputs(cfg, inputs)
    training = WideNetworkTraining.build(cfg, graph, scores, torch.device("cpu"))
    if decay is not None:
        training.average_weights(decay)
    after_each_step, step = [], training.optimizer.step

    def recording_step():
        step()
        after_each_step.append({key: value.clone() for key, value in training.model.state_dict().items()})

    training.optimizer.step = recording_step
    train_nodes = graph.train_mask.nonzero().flatten()
    for _ in range(EPOCHS):
        training.train_epoch(train_nodes)
    return training, after_each_step


def test_the_average_follows_its_recursion_over_every_step_and_leaves_training_alone(upstream):
    cfg, inputs = upstream
    averaged, states = _train(cfg, inputs, DECAY)
    plain, plain_states = _train(cfg, inputs, None)
    assert len(states) == EPOCHS * 5
    # Training is the same arithmetic with or without the average: every step's weights, bit for bit.
    for state, plain_state in zip(states, plain_states, strict=True):
        for key, value in state.items():
            assert torch.equal(value, plain_state[key]), key

    expected = dict(states[0])  # the first step's weights as they are, then the recursion
    for state in states[1:]:
        expected = {key: DECAY * expected[key] + (1 - DECAY) * value if value.is_floating_point() else value
                    for key, value in state.items()}
    average = averaged.evaluated.state_dict()
    assert average.keys() == expected.keys()
    moved = 0.0
    for key, value in expected.items():
        if value.is_floating_point():  # weights and batch norm's running statistics
            torch.testing.assert_close(average[key], value, rtol=1e-5, atol=1e-6, msg=key)
            moved = max(moved, float((average[key] - states[-1][key]).abs().max()))
    assert moved > 1e-3  # the average is not the last weights
    assert averaged.evaluated is not averaged.model and plain.evaluated is plain.model


def test_the_stage_chooses_by_and_checkpoints_the_averaged_weights(upstream, tmp_path):
    """Its reported validation metric is the checkpoint's, evaluated again with every neighbour kept."""
    cfg, inputs = upstream
    graph, scores = _read_inputs(cfg, inputs)
    every_neighbour = int(graph.ptr.diff().max())  # sampling keeps all: evaluation is deterministic
    model = {**cfg["model"], "degrees": [every_neighbour] * cfg["model"]["num_layers"]}
    runs = {}
    for decay in (None, DECAY):
        out = tmp_path / str(decay)
        out.mkdir()
        metrics = run_train({**cfg, "model": model, "train": {**cfg["train"], "ema_decay": decay}}, inputs, out)
        runs[decay] = (metrics, json.loads((out / "history.json").read_text()), out / "model.pt")

    metrics, history, checkpoint = runs[DECAY]
    _, plain_history, _ = runs[None]
    assert [row["loss"] for row in history] == [row["loss"] for row in plain_history]  # the same training
    assert [row["val_roc_auc"] for row in history] != [row["val_roc_auc"] for row in plain_history]
    assert metrics["val_roc_auc"] == history[metrics["best_epoch"]]["val_roc_auc"] == max(
        row["val_roc_auc"] for row in history)

    training = WideNetworkTraining.build({**cfg, "model": model}, graph, scores, torch.device("cpu"))
    training.model.load_state_dict(torch.load(checkpoint, weights_only=True)["state_dict"])
    training.model.eval()
    val_nodes = graph.val_mask.nonzero().flatten()
    with torch.no_grad():
        logits = training.predict(val_nodes)
    assert graph.task_spec().value("roc_auc", logits, graph.y[val_nodes]) == pytest.approx(metrics["val_roc_auc"], abs=1e-6)


def test_one_graph_refuses_batches_with_full_attention_whatever_the_config_knew(upstream):
    """The config refuses sampler=full with batches on the loaders it knows are one graph; the training set-up
    refuses them on any one graph (a loader the config's list would miss)."""
    from sgt_core.errors import ConfigError

    cfg, inputs = upstream
    graph, scores = _read_inputs(cfg, inputs)
    cfg = {**cfg, "sampler": {**cfg["sampler"], "method": "full"}}
    with pytest.raises(ConfigError, match="train.batch_size: must be null with sampler=full on one graph"):
        WideNetworkTraining.build(cfg, graph, scores, torch.device("cpu"))


def test_precise_batch_norm_on_one_graph_averages_its_training_batches(upstream):
    from tests.train.test_graph_set_training import recalibrated_against_its_batches

    cfg, inputs = upstream
    graph, scores = _read_inputs(cfg, inputs)
    training = WideNetworkTraining.build(cfg, graph, scores, torch.device("cpu"))
    train_nodes = graph.train_mask.nonzero().flatten()
    training.train_epoch(train_nodes)
    recalibrated_against_its_batches(training, training.model, train_nodes, 3)


def test_the_stage_evaluates_after_precise_batch_norm(upstream, tmp_path):
    """With precise batch norm the evaluations differ, training up to the first one does not, and the
    checkpoint holds the recalibrated statistics its metrics were computed with."""
    cfg, inputs = upstream
    runs = {}
    for batches in (None, 2):
        out = tmp_path / str(batches)
        out.mkdir()
        metrics = run_train({**cfg, "train": {**cfg["train"], "precise_bn_batches": batches}}, inputs, out)
        runs[batches] = (metrics, json.loads((out / "history.json").read_text()))
    (_, plain), (metrics, precise) = runs[None], runs[2]
    assert plain[0]["loss"] == precise[0]["loss"]
    assert [row["val_loss"] for row in plain] != [row["val_loss"] for row in precise]

