"""The estimate, export and train stages on graphs with continuous edge features (ogbn-proteins' form: one
graph, multi-label node targets with unknown labels, 8 confidence scores per edge): both networks read them."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from sgt_core.config import compose_config
from sgt_core.config.estimator import EstimatorConfig
from sgt_core.config.preprocess import ExpanderConfig
from sgt_core.data.many_graphs import build_graph_set
from sgt_core.estimate.outputs import ESTIMATOR_FILE
from sgt_core.export.outputs import SCORES_DIR
from sgt_core.export.scores import read_attention_scores
from sgt_core.models import AttentionScoreEstimator, NodeExtras
from sgt_core.pipeline import STAGE_BY_NAME
from sgt_core.preprocess.builder import build_interaction_graph
from sgt_core.preprocess.interaction_graph import GRAPH_EDGE_TYPE, NODE_KINDS, InteractionGraph
from sgt_core.preprocess.outputs import INTERACTION_GRAPH_FILE
from sgt_core.train.outputs import MODEL_FILE
from sgt_core.train.training import WideNetworkTraining
from tests.conftest import TINY_MODEL

NUM_FEATURES, NUM_TASKS = 8, 5


def proteins_like(num_nodes: int = 160, graphs: int = 1, seed: int = 0):
    """A random graph (or `graphs` of them) whose node labels depend on the node's features and on its edges':
    node n's task t is positive when x[n, t % 4] plus the mean of edge feature t over n's edges is high (so
    that the networks improve on their first epoch within a few). About 10% of the labels are unknown."""
    rng = np.random.default_rng(seed)
    ptr = np.linspace(0, num_nodes, graphs + 1).astype(np.int64)
    graph_of = np.repeat(np.arange(graphs), np.diff(ptr))
    src = np.repeat(np.arange(num_nodes), 4)
    size = np.diff(ptr)[graph_of[src]]
    dst = ptr[graph_of[src]] + (src - ptr[graph_of[src]] + 1 + rng.integers(0, size - 1)) % size  # no self-loops
    edge_attr = rng.random((src.size, NUM_FEATURES)).astype(np.float32)
    totals = np.zeros((num_nodes, NUM_FEATURES))
    np.add.at(totals, src, edge_attr)
    np.add.at(totals, dst, edge_attr)
    counts = np.bincount(np.concatenate([src, dst]), minlength=num_nodes)[:, None]
    strength = totals[:, :NUM_TASKS] / counts - 0.5  # [N, T]
    x = rng.normal(size=(num_nodes, 4)).astype(np.float32)
    y = (x[:, np.arange(NUM_TASKS) % 4] + 4 * strength > 0).astype(np.float32)
    y[rng.random(y.shape) < 0.1] = np.nan
    split = rng.random(num_nodes)
    masks = {"train_mask": split < 0.6, "val_mask": (split >= 0.6) & (split < 0.8), "test_mask": split >= 0.8}
    return build_graph_set("proteins-like", task="node_multilabel", graph_ptr=ptr, edge_index=np.stack([src, dst]),
                           y=y, x=x, edge_attr=edge_attr, **masks)


def run_stages(tmp_path, graph: InteractionGraph, overrides: list[str]) -> tuple[dict, dict]:
    for name in ("preprocess", "estimate", "export", "train"):
        (tmp_path / name).mkdir()
    graph.save(tmp_path / "preprocess" / INTERACTION_GRAPH_FILE)
    cfg = compose_config([*TINY_MODEL, *overrides])
    metrics = {}
    for name in ("estimate", "export", "train"):
        stage = STAGE_BY_NAME[name]
        metrics[name] = stage.run(cfg, {upstream: tmp_path / upstream for upstream in stage.upstream}, tmp_path / name)
    return cfg, metrics


def test_one_multilabel_graph_with_edge_features_through_the_stages(tmp_path):
    data = proteins_like()
    graph = build_interaction_graph(data, self_loops=True, virtual_nodes=0, seed=0, compact=True,
                                    expander=ExpanderConfig(degree=4, ramanujan_slack=1.0, max_tries=50))
    assert graph.edge_features.shape == (graph.num_edges, NUM_FEATURES)
    assert not graph.edge_features[graph.edge_type != GRAPH_EDGE_TYPE].any()  # added edges have none
    cfg, metrics = run_stages(tmp_path, graph, ["model.local=gine", "estimator.epochs=8", "train.epochs=3"])
    for name in ("estimate", "train"):
        assert metrics[name]["selected_by"] == "val_roc_auc"
        assert math.isfinite(metrics[name]["val_roc_auc"]) and math.isfinite(metrics[name]["test_roc_auc"])

    graph = InteractionGraph.load(tmp_path / "preprocess" / INTERACTION_GRAPH_FILE)
    zeroed = torch.zeros_like(graph.edge_features)
    # The estimator: its best epoch's weights, over the graph's features and over none.
    estimator_cfg = EstimatorConfig.from_dict(cfg["estimator"])
    estimator = AttentionScoreEstimator(**graph.model_input_sizes(), **{**estimator_cfg.network_arguments(),
                                                                        "readout": None})
    estimator.load_state_dict(torch.load(tmp_path / "estimate" / ESTIMATOR_FILE)["state_dict"])
    assert all(layer.attention.feature_scale.abs().sum() > 0 for layer in estimator.layers)  # learnt from zero
    extras = NodeExtras.from_graph(graph, NODE_KINDS.index("substructure"))
    with torch.no_grad():
        outputs = [estimator(graph.x, graph.node_kind, estimator.prepare(graph.edge_index, graph.edge_type, None,
                                                                         graph.num_nodes, None, features), 1.0, extras)
                   for features in (graph.edge_features, zeroed)]
    assert not torch.allclose(outputs[0][0], outputs[1][0], atol=1e-4)  # outputs
    assert not torch.allclose(outputs[0][1][0], outputs[1][1][0], atol=1e-5)  # scores

    # The wide network: its best epoch's weights, the same sample, the graph's features and none.
    scores = read_attention_scores(tmp_path / "export" / SCORES_DIR, graph.edge_index, graph.ptr)
    training = WideNetworkTraining.build(cfg, graph, scores, torch.device("cpu"))
    training.model.load_state_dict(torch.load(tmp_path / "train" / MODEL_FILE)["state_dict"])
    training.model.eval()
    predictions = []
    for features in (graph.edge_features, zeroed):
        training.sampler.edge_features = features
        training.generator.manual_seed(0)
        with torch.no_grad():
            predictions.append(training.predict(torch.arange(graph.num_real_nodes)))
    assert torch.isfinite(predictions[0]).all()
    assert not torch.allclose(predictions[0], predictions[1], atol=1e-4)


# sampler=full over batches of 4 whole graphs, or over the whole union as one full layer (batch null)
@pytest.mark.parametrize(("sampler", "batch"), [("reservoir", 4), ("full", "null"), ("full", 4)])
def test_many_graphs_with_edge_features_through_the_stages(tmp_path, sampler, batch):
    """Graph batches in both stages: the estimator's induced subgraphs and the full layers keep their features."""
    graph = build_interaction_graph(proteins_like(num_nodes=240, graphs=12), self_loops=True, expander=None,
                                    virtual_nodes=0, seed=0, compact=True)
    # the config's dataset a set of many graphs, as the graph given is (sampler=full then takes batches)
    _cfg, metrics = run_stages(tmp_path, graph, ["dataset=synthetic_multilabel", "estimator.batch_size=4",
                                                 f"train.batch_size={batch}", "estimator.epochs=3", "train.epochs=2",
                                                 f"sampler={sampler}"])
    for name in ("estimate", "train"):
        assert math.isfinite(metrics[name]["test_roc_auc"])
