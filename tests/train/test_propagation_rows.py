"""`model.local_top_k`: the appnp branch's K propagation steps train in Algorithm 2's batches, repeatably,
from rows computed once per graph and setting and then read from the artifact store."""

from __future__ import annotations

import json
import logging

import pytest
import torch

from sgt_core.artifacts import CORRUPT_PREFIX, MANIFEST_FILE
from sgt_core.preprocess.interaction_graph import GRAPH_EDGE_TYPE, InteractionGraph
from sgt_core.preprocess.outputs import INTERACTION_GRAPH_FILE
from sgt_core.sampling.propagation import appnp_top_k
from sgt_core.train import propagation_rows as rows_module
from sgt_core.train.outputs import HISTORY_FILE
from sgt_core.train.propagation_rows import PROPAGATION, ROWS_FILE, ensure_propagation_rows, propagation_rows
from sgt_core.train.stage import run_train
from tests.stage_runner import run_stages
from tests.train.test_distributed import _distributed

# ten APPNP steps in batches of 16 targets (72 training nodes: 5 optimiser steps an epoch)
TOP_K = ["model.local=appnp", "model.local_steps=10", "model.local_teleport=0.1", "model.local_top_k=8",
         "train.batch_size=16", "train.epochs=6"]
ROWS_LOGGER = rows_module.__name__


def _messages(caplog, verb: str) -> list[str]:
    return [record.getMessage() for record in caplog.records
            if record.name == ROWS_LOGGER and verb in record.getMessage()]


def _kept(artifacts_dir) -> list[str]:
    """The names in the store's rows folder: complete results and any moved-aside or staging folders."""
    folder = artifacts_dir / PROPAGATION
    return sorted(path.name for path in folder.iterdir()) if folder.is_dir() else []


def _load(preprocess_dir) -> InteractionGraph:
    return InteractionGraph.load(preprocess_dir / INTERACTION_GRAPH_FILE, compact=True)


def _no_computing(*args, **kwargs):
    raise AssertionError("the rows were computed again, not read from the store")


def test_propagation_steps_train_in_batches_through_their_top_k_rows(artifacts_dir, caplog, monkeypatch):
    caplog.set_level(logging.INFO, logger=ROWS_LOGGER)
    _, outputs, metrics = run_stages(artifacts_dir / "first", TOP_K)
    history = json.loads((outputs["train"] / HISTORY_FILE).read_text())
    losses = [row["loss"] for row in history]
    assert len(losses) == 6 and losses[-1] < losses[0]
    assert 0.0 <= metrics["train"]["test_roc_auc"] <= 1.0  # 6 epochs on a 12 x 12 grid: a number, not a score
    assert len(_messages(caplog, "computed")) == 1 and len(_kept(artifacts_dir)) == 1
    # the same config and seed: the same rows (now read from the store), batches and model, so the same history
    monkeypatch.setattr(rows_module, "appnp_top_k", _no_computing)
    _, again, _ = run_stages(artifacts_dir / "again", TOP_K)
    assert json.loads((again["train"] / HISTORY_FILE).read_text()) == history
    assert len(_messages(caplog, "read from")) == 1


def test_the_rows_are_kept_per_graph_and_setting_and_recomputed_when_damaged(artifacts_dir, monkeypatch):
    cfg, outputs, _ = run_stages(artifacts_dir / "upstream", TOP_K, until="export")
    graph = _load(outputs["preprocess"])
    is_graph = graph.edge_type == GRAPH_EDGE_TYPE
    expected = appnp_top_k(graph.edge_index[0][is_graph], graph.edge_index[1][is_graph], graph.num_nodes, 10, 0.1, 8)

    first = propagation_rows(cfg, graph)  # computed
    assert torch.equal(first.neighbours, expected.neighbours) and torch.equal(first.weights, expected.weights)
    (key,) = _kept(artifacts_dir)
    stored = artifacts_dir / PROPAGATION / key
    assert json.loads((stored / MANIFEST_FILE).read_text())["local_top_k"] == 8

    computing = rows_module.appnp_top_k
    monkeypatch.setattr(rows_module, "appnp_top_k", _no_computing)
    read = propagation_rows(cfg, graph)
    assert read.neighbours.dtype == torch.long  # stored as int32, read back as the layers' int64
    assert torch.equal(read.neighbours, expected.neighbours) and torch.equal(read.weights, expected.weights)
    # another seed draws another expander: another interaction graph, the same graph edges, the same rows
    _, reseeded, _ = run_stages(artifacts_dir / "reseeded", [*TOP_K, "seed=1"], until="preprocess")
    assert (reseeded["preprocess"] / INTERACTION_GRAPH_FILE).read_bytes() != (
        outputs["preprocess"] / INTERACTION_GRAPH_FILE).read_bytes()
    ensure_propagation_rows(cfg, reseeded["preprocess"])
    assert torch.equal(propagation_rows(cfg, _load(reseeded["preprocess"])).weights, expected.weights)

    # another k or teleport is another result, and so is another graph
    monkeypatch.setattr(rows_module, "appnp_top_k", computing)
    wider = propagation_rows({**cfg, "model": {**cfg["model"], "local_top_k": 12}}, graph)
    assert wider.neighbours.shape == (graph.num_nodes, 12)
    propagation_rows({**cfg, "model": {**cfg["model"], "local_teleport": 0.2}}, graph)
    _, larger, _ = run_stages(artifacts_dir / "larger", [*TOP_K, "dataset.height=13"], until="preprocess")
    ensure_propagation_rows(cfg, larger["preprocess"])
    assert len(_kept(artifacts_dir)) == 4

    # a damaged copy (same size, other bytes) fails its checksum: moved aside and computed again
    rows_file = stored / ROWS_FILE
    damaged = bytearray(rows_file.read_bytes())
    damaged[-8:] = bytes(8) if damaged[-8:] != bytes(8) else b"\xff" * 8
    rows_file.write_bytes(bytes(damaged))
    again = propagation_rows(cfg, graph)
    assert torch.equal(again.neighbours, expected.neighbours) and torch.equal(again.weights, expected.weights)
    assert any(name.startswith(CORRUPT_PREFIX + key) for name in _kept(artifacts_dir))
    assert (stored / ROWS_FILE).read_bytes() != bytes(damaged)


def test_without_local_top_k_nothing_is_computed_or_kept(artifacts_dir):
    cfg, outputs, _ = run_stages(artifacts_dir / "upstream", [], until="preprocess")
    assert cfg["model"]["local_top_k"] is None
    ensure_propagation_rows(cfg, outputs["preprocess"])
    assert propagation_rows(cfg, _load(outputs["preprocess"])) is None and _kept(artifacts_dir) == []


@pytest.mark.parametrize("given", [True, False])
def test_the_training_set_up_refuses_rows_that_do_not_match_the_config(artifacts_dir, given):
    from sgt_core.train.stage import WideNetworkTraining, _read_inputs

    cfg, outputs, _ = run_stages(artifacts_dir / "upstream", TOP_K, until="export")
    inputs = {name: outputs[name] for name in ("preprocess", "export")}
    graph, scores = _read_inputs(cfg, inputs)
    rows = propagation_rows(cfg, graph)
    if given:  # rows for a model without top-k rows
        cfg = {**cfg, "model": {**cfg["model"], "local_top_k": None}}
    with pytest.raises(ValueError, match="propagation rows were"):
        WideNetworkTraining.build(cfg, graph, scores, torch.device("cpu"), rows if given else None)


@pytest.mark.e2e  # torchrun again; make test keeps the rows in one process and DDP without them
def test_propagation_rows_train_under_ddp_through_torchrun(artifacts_dir, caplog):
    """Two ranks (torchrun, gloo): the stage computes the rows once, before they start, and rank 0 reads
    them from the store; each rank's batches carry their targets' rows, as one process's do."""
    cfg, outputs, _ = run_stages(artifacts_dir / "upstream", TOP_K, until="export")
    (artifacts_dir / "ddp").mkdir()
    caplog.set_level(logging.INFO, logger=ROWS_LOGGER)
    metrics = run_train(_distributed(cfg), {name: outputs[name] for name in ("preprocess", "export")},
                        artifacts_dir / "ddp")
    history = json.loads((artifacts_dir / "ddp" / HISTORY_FILE).read_text())
    assert [row["epoch"] for row in history] == list(range(6)) and history[-1]["loss"] < history[0]["loss"]
    assert 0.0 <= metrics["test_roc_auc"] <= 1.0
    assert len(_messages(caplog, "computed")) == 1 and len(_messages(caplog, "read from")) == 1  # rank 0's
    assert len(_kept(artifacts_dir)) == 1
