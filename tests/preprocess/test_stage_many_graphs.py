"""The preprocess stage on a dataset of many graphs: the size limits read the largest graph, tokens are sampled
per graph, and the saved interaction graph keeps every edge inside its graph."""

from __future__ import annotations

import pytest
import torch

from sgt_core.config import compose_config
from sgt_core.errors import ConfigError
from sgt_core.preprocess import stage
from sgt_core.preprocess.interaction_graph import InteractionGraph
from sgt_core.preprocess.outputs import INTERACTION_GRAPH_FILE
from sgt_core.preprocess.substructure_tokens import SUBSTRUCTURES_FILE
from tests.preprocess.many_graphs.graph_sets import random_graph_set

ALL_ON = ["preprocess.expander.degree=4", "preprocess.virtual_nodes=1", "preprocess.anchors.enabled=true",
          "preprocess.anchors.max_anchors_per_node=4", "preprocess.substructures.enabled=true",
          "preprocess.lpe.enabled=true"]


@pytest.fixture
def graph_set(monkeypatch):
    data = random_graph_set(40, seed=7, max_nodes=30)
    monkeypatch.setattr(stage, "load_dataset", lambda cfg, seed: data)
    return data


def test_limits_apply_to_the_largest_graph(graph_set, tmp_path):
    largest = int(graph_set.graph_ptr.diff().max())
    cfg = compose_config([*ALL_ON, f"preprocess.lpe.max_nodes={largest - 1}"])
    with pytest.raises(ConfigError, match=rf"refused on the largest graph of this dataset of {largest} nodes"):
        stage.run_preprocess(cfg, {}, tmp_path)
    assert graph_set.num_nodes > largest  # the union is far larger than what the limit reads
    cfg = compose_config([*ALL_ON, f"preprocess.lpe.max_nodes={largest}", f"preprocess.anchors.max_nodes={largest}",
                          f"preprocess.substructures.max_nodes={largest}"])
    metrics = stage.run_preprocess(cfg, {}, tmp_path)
    graph = InteractionGraph.load(tmp_path / INTERACTION_GRAPH_FILE)
    assert (tmp_path / SUBSTRUCTURES_FILE).is_file() and metrics["num_tokens"] == graph.num_tokens > 0
    src, dst = graph.edge_index
    assert torch.equal(graph.node_graph[src], graph.node_graph[dst])
    assert graph.num_graphs == graph_set.graph_ptr.numel() - 1
    assert metrics["num_virtual_nodes"] == graph.num_graphs
