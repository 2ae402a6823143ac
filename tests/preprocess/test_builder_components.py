"""The switchable interaction-graph components: anchors/k-hop edges, substructure tokens, Laplacian PE."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from sgt_core.config.preprocess import AnchorsConfig, ExpanderConfig, LpeConfig, SubstructuresConfig
from sgt_core.preprocess.builder import build_interaction_graph
from sgt_core.preprocess.interaction_graph import EDGE_TYPES, NO_SPD, NODE_KINDS, InteractionGraph
from sgt_core.preprocess.substructure_tokens import SubstructureTokens, sample_substructure_tokens
from tests.preprocess.test_interaction_graph import path_graph

BASE = {"self_loops": True, "expander": ExpanderConfig(degree=4, ramanujan_slack=0.5, max_tries=50), "virtual_nodes": 2,
        "seed": 0}
# Small caps keep matching instant on the test graphs.
CAPS = {"path_4": 20, "path_5": 20, "star_2": 20, "hop2": None, "random_walk": None}


def tokens_of(graph, threshold: int = 2, max_size: int = 8) -> SubstructureTokens:
    options = SubstructuresConfig(threshold=threshold, max_size=max_size, types=CAPS)
    return sample_substructure_tokens(graph.edge_index.numpy(), graph.num_nodes, options, np.random.default_rng(0))


def build_all(graph, **overrides) -> InteractionGraph:
    options = dict(BASE, anchors=AnchorsConfig(k=2, max_khop_per_node=3, max_anchors_per_node=2, max_spd=5),
                   substructure_tokens=tokens_of(graph), lpe=LpeConfig(m=4))
    options.update(overrides)
    return build_interaction_graph(graph, **options)


def pairs(interaction_graph: InteractionGraph, name: str) -> set[tuple[int, int]]:
    src, dst = interaction_graph.edge_index[:, interaction_graph.edge_type == EDGE_TYPES.index(name)]
    return set(zip(dst.tolist(), src.tolist()))


def test_components_off_leave_the_graph_as_before():
    n = 30
    plain = build_interaction_graph(path_graph(n), **BASE)
    assert plain.edge_type_counts() == {"graph": 2 * (n - 1), "self": n + 2, "expander": 4 * n,
                                        "virtual": 2 * n * 2, "anchor": 0, "khop": 0, "substructure": 0}
    assert torch.all(plain.edge_spd == NO_SPD) and plain.num_spd_buckets == 0
    assert plain.num_tokens == 0 and plain.token_adjacency.shape == (0, 0)
    assert plain.eigenvalues.shape == (n + 2, 0) and plain.eigen_mask.shape == (n + 2, 0)
    assert plain.model_input_sizes()["lpe_eigenpairs"] == 0 and plain.model_input_sizes()["token_size"] == 0


@pytest.mark.parametrize("component", ["anchors", "substructure_tokens", "lpe"])
def test_each_component_leaves_the_existing_edge_types_untouched(component):
    graph = path_graph(30)
    plain = build_interaction_graph(graph, **BASE)
    on = {"anchors": AnchorsConfig(k=2), "substructure_tokens": tokens_of(graph), "lpe": LpeConfig(m=4)}[component]
    with_component = build_interaction_graph(graph, **BASE, **{component: on})
    for name in ("graph", "expander", "virtual"):
        assert pairs(with_component, name) == pairs(plain, name), name
    # self-loops: one per node, added tokens included
    assert len(pairs(with_component, "self")) == with_component.num_nodes
    assert torch.equal(with_component.x[: plain.num_nodes], plain.x)


def test_all_components_together():
    n = 40
    interaction_graph = build_all(path_graph(n))
    num_tokens = interaction_graph.num_tokens
    assert num_tokens > 0
    assert interaction_graph.num_nodes == n + 2 + num_tokens
    # node order: real, then virtual, then tokens
    expected_kind = [NODE_KINDS.index("real")] * n + [NODE_KINDS.index("virtual")] * 2
    expected_kind += [NODE_KINDS.index("substructure")] * num_tokens
    assert interaction_graph.node_kind.tolist() == expected_kind
    counts = interaction_graph.edge_type_counts()
    assert all(counts[name] > 0 for name in EDGE_TYPES), counts

    # sorted by (dst, src) with no pair twice, across all seven types
    src, dst = interaction_graph.edge_index
    key = dst * interaction_graph.num_nodes + src
    assert torch.all(key[1:] > key[:-1])
    # the expander takes precedence: it is still exactly 4-regular, and no anchor/k-hop pair repeats it
    expander = interaction_graph.edge_type == EDGE_TYPES.index("expander")
    assert torch.bincount(dst[expander], minlength=n)[:n].eq(4).all()

    # SPD buckets exactly on anchor and k-hop edges
    is_field = (interaction_graph.edge_type == EDGE_TYPES.index("anchor")) | (
        interaction_graph.edge_type == EDGE_TYPES.index("khop"))
    spd = interaction_graph.edge_spd
    assert torch.all(spd[~is_field] == NO_SPD)
    assert torch.all((spd[is_field] >= 2) & (spd[is_field] <= 5)) and interaction_graph.num_spd_buckets == 6
    # on a path, the SPD of (src, dst) is |src - dst|, capped at max_spd
    assert torch.equal(spd[is_field], (src[is_field] - dst[is_field]).abs().clamp_max(5))
    khop = interaction_graph.edge_type == EDGE_TYPES.index("khop")
    assert torch.bincount(dst[khop], minlength=n).max() <= 3
    anchor = interaction_graph.edge_type == EDGE_TYPES.index("anchor")
    assert torch.bincount(dst[anchor], minlength=n).max() <= 2


def test_token_edges_join_each_token_to_its_members_both_ways():
    graph = path_graph(25)
    tokens = tokens_of(graph)
    interaction_graph = build_all(graph, substructure_tokens=tokens)
    first_token = 25 + 2
    edges = pairs(interaction_graph, "substructure")
    expected = set()
    for t in range(tokens.num_tokens):
        for member in tokens.selection.instance(t).tolist():
            expected |= {(first_token + t, member), (member, first_token + t)}
    assert edges == expected
    assert torch.equal(interaction_graph.token_type, torch.from_numpy(tokens.selection.type_id))
    assert interaction_graph.token_adjacency.shape == (tokens.num_tokens, 64)
    assert interaction_graph.model_input_sizes()["token_size"] == 8
    # tokens: no label, in no split, no features; only their members, themselves and nothing else
    assert interaction_graph.y[first_token:].eq(-1).all() and not interaction_graph.test_mask[first_token:].any()
    assert interaction_graph.x[first_token:].eq(0).all()


def test_laplacian_rows_of_added_nodes_are_masked():
    n = 20
    interaction_graph = build_all(path_graph(n))
    assert interaction_graph.eigenvalues.shape == (interaction_graph.num_nodes, 4)
    assert interaction_graph.eigen_mask[:n].all() and not interaction_graph.eigen_mask[n:].any()
    assert interaction_graph.eigenvectors[n:].eq(0).all()
    # column 0 of a connected graph: eigenvalue 0
    assert torch.allclose(interaction_graph.eigenvalues[:n, 0], torch.zeros(n), atol=1e-5)


def test_save_load_round_trip_with_components(tmp_path):
    interaction_graph = build_all(path_graph(18))
    interaction_graph.save(tmp_path / "graph.pt")
    loaded = InteractionGraph.load(tmp_path / "graph.pt")  # weights_only=True inside
    for name in ("edge_spd", "token_adjacency", "token_type", "eigenvalues", "eigenvectors", "eigen_mask"):
        assert torch.equal(getattr(loaded, name), getattr(interaction_graph, name)), name
    assert loaded.num_spd_buckets == interaction_graph.num_spd_buckets


def test_substructure_tokens_round_trip(tmp_path):
    tokens = tokens_of(path_graph(20))
    tokens.save(tmp_path / "substructures.npz")
    loaded = SubstructureTokens.load(tmp_path / "substructures.npz")
    np.testing.assert_array_equal(loaded.selection.members, tokens.selection.members)
    np.testing.assert_array_equal(loaded.adjacency, tokens.adjacency)
    assert loaded.stats() == tokens.stats()
