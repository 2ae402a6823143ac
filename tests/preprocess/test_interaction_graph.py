"""The typed interaction graph: counts per edge type, CSR order, no duplicate pairs, round trip."""

from __future__ import annotations

import torch
from torch_geometric.data import Data

from sgt_core.config.preprocess import ExpanderConfig
from sgt_core.preprocess.builder import build_interaction_graph
from sgt_core.preprocess.interaction_graph import EDGE_TYPES, InteractionGraph


def path_graph(num_nodes: int) -> Data:
    """0 - 1 - ... - (n-1), both directions, with a two-class label and a split."""
    src = torch.arange(num_nodes - 1)
    edge_index = torch.cat([torch.stack([src, src + 1]), torch.stack([src + 1, src])], dim=1)
    mask = torch.zeros(num_nodes, dtype=torch.bool)
    return Data(
        x=torch.randn(num_nodes, 3),
        y=torch.arange(num_nodes) % 2,
        edge_index=edge_index,
        train_mask=mask.clone().index_fill_(0, torch.arange(0, num_nodes, 3), True),
        val_mask=mask.clone().index_fill_(0, torch.arange(1, num_nodes, 3), True),
        test_mask=mask.clone().index_fill_(0, torch.arange(2, num_nodes, 3), True),
        num_classes=2,
    )


def build(graph: Data, **overrides) -> InteractionGraph:
    options = {"self_loops": True, "expander": ExpanderConfig(degree=4, ramanujan_slack=0.5, max_tries=50),
               "virtual_nodes": 2, "seed": 0}
    options.update(overrides)
    return build_interaction_graph(graph, **options)


def test_edge_type_counts():
    n, degree, virtual = 30, 4, 2
    interaction_graph = build(path_graph(n), expander=ExpanderConfig(degree=degree, ramanujan_slack=0.5, max_tries=50),
                              virtual_nodes=virtual)
    assert interaction_graph.num_nodes == n + virtual
    assert interaction_graph.edge_type_counts() == {
        "graph": 2 * (n - 1),
        "self": n + virtual,
        "expander": n * degree,
        "virtual": 2 * n * virtual,
        "anchor": 0,
        "khop": 0,
        "substructure": 0,
    }


def test_components_switch_off():
    interaction_graph = build(path_graph(10), self_loops=False, expander=None, virtual_nodes=0)
    assert interaction_graph.edge_type_counts() == {
        "graph": 18, "self": 0, "expander": 0, "virtual": 0, "anchor": 0, "khop": 0, "substructure": 0
    }


def test_sorted_by_destination_without_duplicate_pairs():
    interaction_graph = build(path_graph(40))
    src, dst = interaction_graph.edge_index
    order_key = dst * interaction_graph.num_nodes + src
    assert torch.all(order_key[1:] > order_key[:-1])  # strictly increasing: sorted and no (dst, src) twice
    ptr = interaction_graph.ptr
    assert ptr[-1] == interaction_graph.num_edges
    assert torch.equal(torch.repeat_interleave(torch.arange(interaction_graph.num_nodes), ptr.diff()), dst)


def test_each_type_is_where_it_should_be():
    n = 20
    interaction_graph = build(path_graph(n), virtual_nodes=1)
    src, dst = interaction_graph.edge_index
    kind = interaction_graph.edge_type
    self_edges = kind == EDGE_TYPES.index("self")
    assert torch.equal(src[self_edges], dst[self_edges])
    virtual_edges = kind == EDGE_TYPES.index("virtual")
    assert torch.all((src[virtual_edges] == n) ^ (dst[virtual_edges] == n))  # exactly one end is virtual
    expander_edges = kind == EDGE_TYPES.index("expander")
    assert torch.all(src[expander_edges] < n) and torch.all(dst[expander_edges] < n)
    assert torch.bincount(dst[expander_edges], minlength=n).eq(4).all()  # still 4-regular
    # added nodes carry no label and are in no split
    assert interaction_graph.y[n:].eq(-1).all() and not interaction_graph.train_mask[n:].any()


def test_save_load_round_trip(tmp_path):
    interaction_graph = build(path_graph(15))
    path = tmp_path / "graph.pt"
    interaction_graph.save(path)
    loaded = InteractionGraph.load(path)  # weights_only=True inside
    assert torch.equal(loaded.edge_index, interaction_graph.edge_index)
    assert torch.equal(loaded.edge_type, interaction_graph.edge_type)
    assert loaded.num_real_nodes == 15 and loaded.stats == interaction_graph.stats
