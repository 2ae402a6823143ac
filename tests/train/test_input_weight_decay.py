"""`optimizer.input_weight_decay`: the first layer's weight (raw features -> width) decays on its own."""

from __future__ import annotations

import pytest
import torch

from sgt_core.train.stage import WideNetworkTraining, _read_inputs
from tests.stage_runner import run_stages


@pytest.fixture(scope="module")
def upstream(tmp_path_factory):
    cfg, outputs, _ = run_stages(tmp_path_factory.mktemp("input_decay"), until="export")
    return cfg, {name: outputs[name] for name in ("preprocess", "export")}


def test_the_input_projection_gets_its_own_decay_and_every_other_parameter_the_default(upstream):
    cfg, inputs = upstream
    graph, scores = _read_inputs(cfg, inputs)
    cfg = {**cfg, "optimizer": {**cfg["optimizer"], "weight_decay": 1e-3, "input_weight_decay": 5e-3}}
    training = WideNetworkTraining.build(cfg, graph, scores, torch.device("cpu"))
    projection = training.model.encoder.features.weight
    assert projection.shape[1] == graph.x.shape[1]  # the weight that reads the raw features
    decays = {id(p): decay for p, decay in zip(training.optimizer.parameters, training.optimizer.weight_decays)}
    assert len(decays) == len(training.optimizer.parameters) == len(list(training.model.parameters()))
    assert decays.pop(id(projection)) == 5e-3
    assert set(decays.values()) == {1e-3}


def test_without_it_every_parameter_decays_alike_in_the_model_s_order(upstream):
    cfg, inputs = upstream
    graph, scores = _read_inputs(cfg, inputs)
    assert cfg["optimizer"]["input_weight_decay"] is None
    training = WideNetworkTraining.build(cfg, graph, scores, torch.device("cpu"))
    assert [id(p) for p in training.optimizer.parameters] == [id(p) for p in training.model.parameters()]
    assert set(training.optimizer.weight_decays) == {cfg["optimizer"]["weight_decay"]}
