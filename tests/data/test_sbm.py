"""The PATTERN and CLUSTER generators: the benchmark's sizes, edge probabilities, labels, splits and seeding."""

import numpy as np
import pytest
import torch
from torch_geometric.utils import to_undirected

from sgt_core.config import compose_config
from sgt_core.data import load_dataset
from sgt_core.data.sbm import (
    NUM_PATTERNS,
    PATTERN_COMMUNITIES,
    draw_pattern,
    split_counts,
)
from sgt_core.errors import ConfigError

PATTERN_GRAPHS = 700  # 500 / 100 / 100: five graphs of each pattern in training
CLUSTER_GRAPHS = 600  # 500 / 50 / 50
# With ~10^6 pairs of each kind the standard error of a measured probability is ~5e-4: 0.005 is ~9 of them.
TOLERANCE = 0.005


def pattern(seed: int = 0, **changes):
    return load_dataset({"name": "sbm_pattern", "num_graphs": PATTERN_GRAPHS, "generator_seed": 0, **changes},
                        seed=seed)


def cluster(seed: int = 0, **changes):
    return load_dataset({"name": "sbm_cluster", "num_graphs": CLUSTER_GRAPHS, "generator_seed": 0, **changes},
                        seed=seed)


@pytest.fixture(scope="module")
def pattern_set():
    return pattern()


@pytest.fixture(scope="module")
def cluster_set():
    return cluster()


@pytest.fixture(scope="module")
def pattern_drawn():
    return draw_pattern(split_counts(PATTERN_GRAPHS, (10_000, 2_000, 2_000), "sbm_pattern"), 0)


def graph_of_node(graph_ptr) -> np.ndarray:
    graph_ptr = np.asarray(graph_ptr)
    return np.repeat(np.arange(graph_ptr.size - 1), np.diff(graph_ptr))


def block_sizes(graph_ptr, blocks, num_blocks: int) -> np.ndarray:
    """[G, K] nodes of each block in each graph."""
    graphs = graph_of_node(graph_ptr)
    return np.bincount(graphs * num_blocks + np.asarray(blocks), minlength=graphs.max() * num_blocks + num_blocks
                       ).reshape(-1, num_blocks)


def measured_probabilities(graph_ptr, blocks, edges, num_blocks: int) -> np.ndarray:
    """[K, K] edges between blocks a and b over the node pairs between them, summed over all graphs."""
    sizes = block_sizes(graph_ptr, blocks, num_blocks).astype(np.float64)  # [G, K]
    pairs = np.einsum("ga,gb->ab", sizes, sizes)
    pairs[np.diag_indices(num_blocks)] = (sizes * (sizes - 1) / 2).sum(axis=0)
    edges = np.asarray(edges)
    low, high = np.asarray(blocks)[edges.min(axis=0)], np.asarray(blocks)[edges.max(axis=0)]
    ends = np.sort(np.stack([low, high]), axis=0)
    found = np.bincount(ends[0] * num_blocks + ends[1], minlength=num_blocks**2).reshape(num_blocks, num_blocks)
    found = found + found.T - np.diag(np.diag(found))
    return found / pairs


def undirected(edge_index) -> np.ndarray:
    """[2, E/2] each undirected edge of a both-ways edge_index once, low end first."""
    edges = np.asarray(edge_index)
    return edges[:, edges[0] < edges[1]]


def graphs_in(mask, graph_ptr) -> int:
    return int(np.asarray(mask)[np.asarray(graph_ptr)[:-1]].sum())


def test_pattern_is_a_valid_node_task_on_graphs_of_the_benchmarks_sizes(pattern_set):
    assert pattern_set.task == "node_classification" and pattern_set.metric == "weighted_accuracy"
    assert pattern_set.num_classes == 2 and pattern_set.x_cat_sizes == [3]
    assert pattern_set.x.shape == (pattern_set.x_cat.shape[0], 0)
    assert set(pattern_set.x_cat.unique().tolist()) == {0, 1, 2}
    sizes = torch.diff(pattern_set.graph_ptr)
    # 5 communities and one pattern, each of 5-34 nodes
    assert int(sizes.min()) >= 6 * 5 and int(sizes.max()) <= 6 * 34


def test_pattern_communities_and_patterns_have_5_to_34_nodes(pattern_drawn):
    sizes = block_sizes(pattern_drawn.graph_ptr, pattern_drawn.blocks, PATTERN_COMMUNITIES + 1)  # [G, 6]
    assert sizes.min() >= 5 and sizes.max() <= 34
    assert sizes.min() == 5 and sizes.max() == 34  # the whole range is drawn
    assert 18.5 < sizes.mean() < 20.5  # uniform over 5..34: mean 19.5


def test_pattern_edge_probabilities_match_the_benchmark(pattern_set, pattern_drawn):
    edges = undirected(pattern_set.edge_index)
    drawn = np.sort(pattern_drawn.edges, axis=0)
    assert edges.shape == drawn.shape  # the returned graph is the drawn one
    np.testing.assert_array_equal(edges[:, np.lexsort(edges[::-1])], drawn[:, np.lexsort(drawn[::-1])])
    measured = measured_probabilities(pattern_drawn.graph_ptr, pattern_drawn.blocks, edges, 6)
    communities = measured[:5, :5]
    assert np.abs(np.diag(communities) - 0.5).max() < TOLERANCE * 3  # p per community: fewer pairs each
    within = np.diag(communities).mean()
    assert abs(within - 0.5) < TOLERANCE
    across = communities[~np.eye(5, dtype=bool)]
    assert np.abs(across - 0.35).max() < TOLERANCE * 2 and abs(across.mean() - 0.35) < TOLERANCE
    assert np.abs(measured[5, :5] - 0.5).max() < TOLERANCE * 3  # pattern to graph
    # inside the patterns: drawn once per pattern, 100 patterns of ~218 pairs each
    assert abs(measured[5, 5] - 0.5) < 0.03


def test_pattern_labels_are_the_patterns_nodes_and_each_pattern_is_fixed(pattern_set, pattern_drawn):
    labels = pattern_set.y.numpy()
    np.testing.assert_array_equal(labels, pattern_drawn.blocks == PATTERN_COMMUNITIES)
    graph_ptr = pattern_set.graph_ptr.numpy()
    graphs = graph_of_node(graph_ptr)
    positives = np.bincount(graphs, weights=labels)  # [G] pattern size of each graph
    assert positives.min() >= 5 and positives.max() <= 34
    share = labels.mean()
    assert 0.13 < share < 0.21, share  # 19.5 of ~117 nodes in expectation: 0.167
    # Two graphs of one pattern hold the same pattern: its node features and its internal degrees.
    features, edges = pattern_set.x_cat[:, 0].numpy(), undirected(pattern_set.edge_index)
    inside = labels[edges[0]].astype(bool) & labels[edges[1]].astype(bool)
    internal_degree = np.bincount(edges[:, inside].ravel(), minlength=labels.size)

    def signature(graph: int) -> list[tuple[int, int]]:
        nodes = np.arange(graph_ptr[graph], graph_ptr[graph + 1])
        nodes = nodes[labels[nodes] == 1]
        return sorted(zip(features[nodes].tolist(), internal_degree[nodes].tolist()))

    for graph_pattern in (0, 7, 99):
        holders = np.flatnonzero(pattern_drawn.pattern_of_graph == graph_pattern)
        assert holders.size == 7  # five train, one val, one test
        assert all(signature(graph) == signature(holders[0]) for graph in holders)
    assert signature(0) != signature(1)
    # Shuffled: the pattern's nodes are not a block at the end of each graph.
    assert not all(labels[graph_ptr[graph + 1] - 1] == 1 for graph in range(20))


def test_pattern_splits_hold_every_pattern_in_the_benchmarks_proportions(pattern_set, pattern_drawn):
    ptr = pattern_set.graph_ptr
    assert [graphs_in(pattern_set[f"{name}_mask"], ptr) for name in ("train", "val", "test")] == [500, 100, 100]
    for name in ("train", "val", "test"):
        mask = pattern_set[f"{name}_mask"].numpy()
        starts = mask[ptr[:-1].numpy()]
        assert (mask == np.repeat(starts, torch.diff(ptr).numpy())).all()  # a graph is wholly in one split
        assert set(pattern_drawn.pattern_of_graph[starts].tolist()) == set(range(NUM_PATTERNS))


def test_num_graphs_scales_the_splits_in_proportion():
    assert split_counts(14_000, (10_000, 2_000, 2_000), "p").tolist() == [10_000, 2_000, 2_000]
    assert split_counts(1_000, (10_000, 2_000, 2_000), "p").tolist() == [714, 143, 143]
    assert split_counts(7, (10_000, 2_000, 2_000), "p").tolist() == [5, 1, 1]
    assert split_counts(1_200, (10_000, 1_000, 1_000), "c").tolist() == [1_000, 100, 100]
    assert split_counts(13, (10_000, 1_000, 1_000), "c").tolist() == [11, 1, 1]
    with pytest.raises(ConfigError, match="must be at least 12 so that"):
        split_counts(11, (10_000, 1_000, 1_000), "c")
    small = pattern(num_graphs=70)
    assert [graphs_in(small[f"{name}_mask"], small.graph_ptr) for name in ("train", "val", "test")] == [50, 10, 10]


@pytest.mark.parametrize("changes, message", [
    ({"num_graphs": 6}, r"^dataset\.num_graphs: must be at least 7 so that train, val and test each get a graph"),
    ({"num_graphs": 100.0}, r"^dataset\.num_graphs: must be an integer >= 7 \(sbm_pattern\), found 100\.0"),
    ({"generator_seed": -1}, r"^dataset\.generator_seed: must be an integer >= 0, found -1"),
])
def test_bad_values_are_named(changes, message):
    with pytest.raises(ConfigError, match=message):
        pattern(**changes)


def test_the_generator_seed_not_the_run_seed_decides_the_graphs(pattern_set, cluster_set):
    for make, graphs in ((pattern, pattern_set), (cluster, cluster_set)):
        again = make(seed=5)  # another model seed: the same graphs
        for key in ("x_cat", "y", "edge_index", "graph_ptr", "train_mask", "val_mask", "test_mask"):
            assert torch.equal(graphs[key], again[key]), key
        other = make(generator_seed=1)
        assert not torch.equal(graphs.graph_ptr, other.graph_ptr)
        assert graphs.edge_index.shape != other.edge_index.shape or not torch.equal(graphs.edge_index,
                                                                                    other.edge_index)


@pytest.mark.parametrize("name", ["pattern", "cluster"])
def test_no_edge_joins_two_graphs_and_none_is_a_self_loop(name, pattern_set, cluster_set):
    graphs = {"pattern": pattern_set, "cluster": cluster_set}[name]
    graph = graph_of_node(graphs.graph_ptr)
    source, target = graphs.edge_index.numpy()
    assert (graph[source] == graph[target]).all()
    assert (source != target).all()
    assert source.size % 2 == 0 and undirected(graphs.edge_index).shape[1] == source.size // 2


def test_cluster_is_a_six_class_node_task_with_communities_of_5_to_34_nodes(cluster_set):
    assert cluster_set.task == "node_classification" and cluster_set.metric == "weighted_accuracy"
    assert cluster_set.num_classes == 6 and cluster_set.x_cat_sizes == [7]
    ptr = cluster_set.graph_ptr
    assert [graphs_in(cluster_set[f"{name}_mask"], ptr) for name in ("train", "val", "test")] == [500, 50, 50]
    sizes = block_sizes(ptr, cluster_set.y, 6)  # [G, 6]: the label is the community
    assert sizes.min() >= 5 and sizes.max() <= 34 and sizes.min() == 5 and sizes.max() == 34


def test_cluster_seeds_one_node_per_community_with_its_id(cluster_set):
    features, labels = cluster_set.x_cat[:, 0].numpy(), cluster_set.y.numpy()
    graphs = graph_of_node(cluster_set.graph_ptr)
    seeded = features > 0
    assert (features[seeded] == labels[seeded] + 1).all()
    per_community = np.bincount(graphs[seeded] * 6 + labels[seeded], minlength=graphs.max() * 6 + 6)
    assert (per_community == 1).all()  # exactly one seeded node in every community of every graph


def test_cluster_edge_probabilities_match_the_benchmark(cluster_set):
    measured = measured_probabilities(cluster_set.graph_ptr, cluster_set.y, undirected(cluster_set.edge_index), 6)
    assert abs(np.diag(measured).mean() - 0.55) < TOLERANCE
    assert np.abs(np.diag(measured) - 0.55).max() < TOLERANCE * 3
    across = measured[~np.eye(6, dtype=bool)]
    assert abs(across.mean() - 0.25) < TOLERANCE and np.abs(across - 0.25).max() < TOLERANCE * 2


def test_the_shipped_configs_load():
    for name, graphs in (("sbm_pattern", 14), ("sbm_cluster", 24)):
        dataset = compose_config([f"dataset={name}", f"dataset.num_graphs={graphs}"])["dataset"]
        assert dataset["generator_seed"] == 0
        assert load_dataset(dataset, seed=0).graph_ptr.numel() == graphs + 1


@pytest.mark.slow
def test_the_full_sets_have_the_benchmarks_graphs():
    for make, splits in ((pattern, [10_000, 2_000, 2_000]), (cluster, [10_000, 1_000, 1_000])):
        graphs = make(num_graphs=sum(splits))
        assert [graphs_in(graphs[f"{name}_mask"], graphs.graph_ptr) for name in ("train", "val", "test")] == splits
        del graphs


@pytest.mark.parametrize("name", ["pattern", "cluster"])
def test_the_edges_are_coalesced_as_pyg_would_make_them(name, pattern_set, cluster_set):
    graphs = {"pattern": pattern_set, "cluster": cluster_set}[name]
    num_nodes = int(graphs.graph_ptr[-1])
    assert torch.equal(graphs.edge_index, to_undirected(graphs.edge_index, num_nodes=num_nodes))
