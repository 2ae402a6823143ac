"""Seeded, vectorised generators of Benchmarking GNNs' stochastic-block-model sets PATTERN and CLUSTER.

Both follow Dwivedi et al., "Benchmarking Graph Neural Networks" (JMLR 2023), section on the SBM datasets:
each graph is a stochastic block model of a few communities of uniform random size (5-34 nodes), an edge
joining two nodes of one community with probability p and of two communities with probability q.

- PATTERN (node classification, 2 classes): 5 communities, p = 0.5, q = 0.35, node features uniform over
  {0, 1, 2}. 100 random patterns (5-34 nodes, internal edges drawn once with probability 0.5, features
  drawn once) are planted: each graph holds one pattern, joined to every other node with probability 0.5,
  and its nodes are labelled 1, all others 0. 100 / 20 / 20 train / val / test graphs per pattern.
- CLUSTER (node classification, 6 classes): 6 communities, p = 0.55, q = 0.25; every node's feature is 0
  except one random node per community, whose feature is its community id + 1; the label is the community.
  10,000 / 1,000 / 1,000 graphs.

Nodes are shuffled inside each graph. The graphs are seeded by `generator_seed`, not by the run's seed, so
every model seed trains on the same graphs, as the benchmark's fixed files let it. Generation is vectorised:
graphs of one size are drawn together as a stack of their upper-triangle Bernoulli draws, in chunks.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from torch_geometric.data import Data

from sgt_core.config.dataset import SBM_SPLITS, generator_seed_problems, num_graphs_problems, raise_problems
from sgt_core.data.many_graphs import build_graph_set
from sgt_core.data.synthetic import undirected_edge_index

# Community (and pattern) sizes are drawn uniformly from this inclusive range, as the benchmark's
# randint(5, 35) draws them.
SIZE_RANGE = (5, 34)

PATTERN_COMMUNITIES = 5
PATTERN_P, PATTERN_Q = 0.5, 0.35
NUM_PATTERNS = 100
PATTERN_INTERNAL_P = 0.5  # an edge inside a pattern, drawn once per pattern
PATTERN_TO_GRAPH_P = 0.5  # an edge between a pattern node and another node, drawn per graph
PATTERN_VOCABULARY = 3
PATTERN_SPLIT = SBM_SPLITS["sbm_pattern"]  # 100 / 20 / 20 graphs per pattern

CLUSTER_COMMUNITIES = 6
CLUSTER_P, CLUSTER_Q = 0.55, 0.25
CLUSTER_VOCABULARY = CLUSTER_COMMUNITIES + 1  # 0, or the seeded node's community id + 1
CLUSTER_SPLIT = SBM_SPLITS["sbm_cluster"]

# Node pairs drawn at once (a float32 draw, its probability and int64 block codes per pair: ~0.5 GB a chunk):
# large enough that the per-chunk overhead vanishes, small enough that memory stays bounded at any num_graphs.
CHUNK_PAIRS = 1 << 24


def split_counts(num_graphs: object, full: tuple[int, int, int], generator: str) -> np.ndarray:
    """The train/val/test graph counts for `num_graphs`, in the full set's proportions.

    Each count is the floor of its exact share; the graphs left over go to the largest remainders
    (train first on ties), so the counts sum to `num_graphs`.

    Args:
        num_graphs: the configured `dataset.num_graphs`.
        full: the full set's (train, val, test) counts.
        generator: the dataset's name, for messages.

    Returns:
        int64 [3] counts, each >= 1.

    Raises:
        ConfigError: If `num_graphs` is not an integer, or below total / smallest split (7 for PATTERN, 12 for
            CLUSTER), where a split could get no graph.
    """
    raise_problems(num_graphs_problems(num_graphs, full, generator))
    total = sum(full)
    exact = np.asarray(full, dtype=np.float64) * num_graphs / total  # [3]
    counts = np.floor(exact).astype(np.int64)
    leftover = int(num_graphs - counts.sum())
    counts[np.argsort(counts - exact, kind="stable")[:leftover]] += 1
    return counts


def check_generator_seed(generator_seed: object) -> int:
    """The configured `dataset.generator_seed` as an int.

    Raises:
        ConfigError: If it is not an integer >= 0.
    """
    raise_problems(generator_seed_problems(generator_seed))
    return int(generator_seed)


def ragged_arange(counts: np.ndarray) -> np.ndarray:
    """0..counts[i]-1 for every i, concatenated: the position of each item inside its group.

    Args:
        counts: int [K] group sizes (>= 0).

    Returns:
        int64 [sum(counts)].
    """
    counts = np.asarray(counts, dtype=np.int64)
    starts = np.cumsum(counts) - counts  # [K]
    return np.arange(int(counts.sum()), dtype=np.int64) - np.repeat(starts, counts)


def block_model_edges(graph_ptr: np.ndarray, blocks: np.ndarray, probability: np.ndarray,
                      rng: np.random.Generator) -> np.ndarray:
    """Draws every graph's stochastic block model: each pair of its nodes joined with its blocks' probability.

    Graphs of one size are drawn together: their nodes' blocks form a [B, n] stack, and the n(n-1)/2 node
    pairs of all B graphs are drawn as one [B, n(n-1)/2] array of Bernoulli trials, in chunks of about
    `CHUNK_PAIRS` pairs. Sizes are visited in increasing order and graphs in index order, so one seed gives
    one graph set.

    Args:
        graph_ptr: int64 [G+1], graph g's nodes are graph_ptr[g]:graph_ptr[g+1].
        blocks: int [N] the block of each node, in [0, K).
        probability: float [K, K] symmetric, the probability of an edge between a node of block a and one
            of block b (0 where those pairs are drawn otherwise).
        rng: source of randomness.

    Returns:
        int64 [2, E] each drawn undirected edge once (lower node id first), never across graphs.
    """
    num_blocks = probability.shape[0]
    pair_probability = probability.astype(np.float32).ravel()  # [K*K], indexed by a * K + b
    sizes = np.diff(graph_ptr)  # [G]
    by_size = np.argsort(sizes, kind="stable")  # [G] graphs in increasing size, index order within a size
    distinct, first = np.unique(sizes[by_size], return_index=True)
    bounds = np.append(first, by_size.size)
    sources, targets = [], []
    for size, start, stop in zip(distinct.tolist(), bounds[:-1].tolist(), bounds[1:].tolist()):
        if size < 2:
            continue
        low, high = np.triu_indices(size, k=1)  # [P] the node pairs of one graph of this size
        per_chunk = max(1, CHUNK_PAIRS // low.size)
        for chunk_start in range(start, stop, per_chunk):
            graphs = by_size[chunk_start:min(stop, chunk_start + per_chunk)]  # [B]
            first_node = graph_ptr[graphs]  # [B]
            node_blocks = blocks[first_node[:, None] + np.arange(size)]  # [B, n]
            pair_blocks = node_blocks[:, low] * num_blocks + node_blocks[:, high]  # [B, P]
            drawn = rng.random(pair_blocks.shape, dtype=np.float32) < pair_probability[pair_blocks]  # [B, P]
            graph_row, pair = np.nonzero(drawn)  # [E_chunk] each
            sources.append(first_node[graph_row] + low[pair])
            targets.append(first_node[graph_row] + high[pair])
    if not sources:
        return np.zeros((2, 0), dtype=np.int64)
    return np.stack([np.concatenate(sources), np.concatenate(targets)])


def shuffle_within_graphs(graph_ptr: np.ndarray, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """A random permutation of each graph's nodes that keeps every graph's contiguous range.

    Returns:
        (order, position): int64 [N] each; new node i is old node order[i], old node j is new node position[j].
    """
    num_nodes = int(graph_ptr[-1])
    graph_of_node = np.repeat(np.arange(graph_ptr.size - 1), np.diff(graph_ptr))  # [N]
    order = np.lexsort((rng.random(num_nodes), graph_of_node))  # [N] by graph, randomly within it
    position = np.empty(num_nodes, dtype=np.int64)
    position[order] = np.arange(num_nodes)
    return order, position


def community_sizes(num_graphs: int, num_communities: int, rng: np.random.Generator) -> np.ndarray:
    """int64 [G, K] community sizes drawn uniformly from `SIZE_RANGE`."""
    return rng.integers(SIZE_RANGE[0], SIZE_RANGE[1] + 1, size=(num_graphs, num_communities), dtype=np.int64)


def graph_masks(counts: np.ndarray, graph_ptr: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Node masks of the train, val and test graphs: the first counts[0] graphs train, the next val, the rest test.

    Returns:
        bool [N] each.
    """
    split_of_graph = np.repeat(np.arange(3), counts)  # [G]
    split_of_node = np.repeat(split_of_graph, np.diff(graph_ptr))  # [N]
    return split_of_node == 0, split_of_node == 1, split_of_node == 2


def split_note(counts: np.ndarray, generator_seed: int) -> str:
    return (f"{counts[0]:,} / {counts[1]:,} / {counts[2]:,} train / val / test graphs regenerated with "
            f"generator_seed={generator_seed} by Benchmarking GNNs' procedure, not its published files")


@dataclass(frozen=True)
class BlockModelSet:
    """The drawn graphs before validation, with what the loaders do not return (the communities).

    Attributes:
        graph_ptr: int64 [G+1], graph g's nodes are graph_ptr[g]:graph_ptr[g+1].
        blocks: int64 [N] each node's community (PATTERN: block 5 is the planted pattern).
        edges: int64 [2, E] each undirected edge once.
        features: int64 [N] categorical node features.
        counts: int64 [3] train / val / test graphs, in that order.
        pattern_of_graph: int64 [G] the pattern each PATTERN graph holds (None for CLUSTER).
    """

    graph_ptr: np.ndarray
    blocks: np.ndarray
    edges: np.ndarray
    features: np.ndarray
    counts: np.ndarray
    pattern_of_graph: np.ndarray | None = None


def draw_pattern(counts: np.ndarray, generator_seed: int) -> BlockModelSet:
    """Draws PATTERN's graphs (see `generate_sbm_pattern`); `counts` are its train / val / test graphs."""
    rng = np.random.default_rng(generator_seed)
    num_graphs = int(counts.sum())
    pattern_sizes = rng.integers(SIZE_RANGE[0], SIZE_RANGE[1] + 1, size=NUM_PATTERNS, dtype=np.int64)  # [P]
    pattern_ptr = np.concatenate([[0], np.cumsum(pattern_sizes)])  # [P+1]
    # The patterns themselves: each one graph of one block, drawn by the same block model.
    pattern_edges = block_model_edges(pattern_ptr, np.zeros(pattern_ptr[-1], np.int64),
                                      np.array([[PATTERN_INTERNAL_P]]), rng)  # [2, Ep] ids over all patterns
    pattern_edges = pattern_edges[:, np.argsort(pattern_edges[0], kind="stable")]  # grouped by pattern
    pattern_of_edge = np.searchsorted(pattern_ptr, pattern_edges[0], side="right") - 1  # [Ep]
    pattern_edges -= pattern_ptr[pattern_of_edge]  # ids inside their pattern
    pattern_edge_ptr = np.searchsorted(pattern_of_edge, np.arange(NUM_PATTERNS + 1))  # [P+1]
    pattern_features = rng.integers(0, PATTERN_VOCABULARY, size=pattern_ptr[-1], dtype=np.int64)  # [sum sizes]

    pattern_of_graph = np.concatenate([np.arange(count) % NUM_PATTERNS for count in counts])  # [G]
    sizes = community_sizes(num_graphs, PATTERN_COMMUNITIES, rng)  # [G, K]
    block_sizes = np.concatenate([sizes, pattern_sizes[pattern_of_graph][:, None]], axis=1)  # [G, K+1]
    graph_ptr = np.concatenate([[0], np.cumsum(block_sizes.sum(axis=1))])  # [G+1]
    # Block K is the pattern, placed after the communities until the nodes are shuffled.
    blocks = np.repeat(np.tile(np.arange(PATTERN_COMMUNITIES + 1), num_graphs), block_sizes.ravel())  # [N]
    probability = np.full((PATTERN_COMMUNITIES + 1,) * 2, PATTERN_Q)
    np.fill_diagonal(probability, PATTERN_P)
    probability[-1, :] = probability[:, -1] = PATTERN_TO_GRAPH_P
    probability[-1, -1] = 0.0  # the pattern's own edges are its fixed ones, added below
    edges = block_model_edges(graph_ptr, blocks, probability, rng)  # [2, E]

    # Each graph's copy of its pattern: the pattern's edges and features, offset to its pattern block.
    pattern_start = graph_ptr[:-1] + sizes.sum(axis=1)  # [G] first pattern node of each graph
    edge_counts = np.diff(pattern_edge_ptr)[pattern_of_graph]  # [G]
    copied = np.repeat(pattern_edge_ptr[pattern_of_graph], edge_counts) + ragged_arange(edge_counts)  # [Ec]
    copied_edges = pattern_edges[:, copied] + np.repeat(pattern_start, edge_counts)  # [2, Ec]
    features = rng.integers(0, PATTERN_VOCABULARY, size=graph_ptr[-1], dtype=np.int64)  # [N]
    node_counts = pattern_sizes[pattern_of_graph]  # [G]
    pattern_nodes = np.repeat(pattern_start, node_counts) + ragged_arange(node_counts)  # [Np]
    features[pattern_nodes] = pattern_features[np.repeat(pattern_ptr[pattern_of_graph], node_counts)
                                               + ragged_arange(node_counts)]

    order, position = shuffle_within_graphs(graph_ptr, rng)
    edges = position[np.concatenate([edges, copied_edges], axis=1)]
    return BlockModelSet(graph_ptr, blocks[order], edges, features[order], counts, pattern_of_graph)


def draw_cluster(counts: np.ndarray, generator_seed: int) -> BlockModelSet:
    """Draws CLUSTER's graphs (see `generate_sbm_cluster`); `counts` are its train / val / test graphs."""
    rng = np.random.default_rng(generator_seed)
    num_graphs = int(counts.sum())
    sizes = community_sizes(num_graphs, CLUSTER_COMMUNITIES, rng)  # [G, K]
    graph_ptr = np.concatenate([[0], np.cumsum(sizes.sum(axis=1))])  # [G+1]
    blocks = np.repeat(np.tile(np.arange(CLUSTER_COMMUNITIES), num_graphs), sizes.ravel())  # [N]
    probability = np.full((CLUSTER_COMMUNITIES,) * 2, CLUSTER_Q)
    np.fill_diagonal(probability, CLUSTER_P)
    edges = block_model_edges(graph_ptr, blocks, probability, rng)  # [2, E]

    # One random node of each community (block) carries its community id + 1.
    block_start = np.cumsum(sizes.ravel()) - sizes.ravel()  # [G*K]
    seeded = block_start + (rng.random(sizes.size) * sizes.ravel()).astype(np.int64)  # [G*K]
    features = np.zeros(graph_ptr[-1], dtype=np.int64)
    features[seeded] = blocks[seeded] + 1

    order, position = shuffle_within_graphs(graph_ptr, rng)
    return BlockModelSet(graph_ptr, blocks[order], position[edges], features[order], counts)


def _graph_set(name: str, drawn: BlockModelSet, labels: np.ndarray, vocabulary: int, num_classes: int,
               generator_seed: int) -> Data:
    """The drawn graphs as the validated set: node classification scored by class-weighted accuracy."""
    train_mask, val_mask, test_mask = graph_masks(drawn.counts, drawn.graph_ptr)
    num_nodes = int(drawn.graph_ptr[-1])
    # Each undirected edge is drawn once and no pair twice, so its sorted keys low·N + high give both
    # directions in (source, target) order with NumPy's sorts, several times faster than PyG's coalescing.
    keys = np.minimum(drawn.edges[0], drawn.edges[1]) * num_nodes + np.maximum(drawn.edges[0], drawn.edges[1])
    keys.sort()
    return build_graph_set(
        f"{name} generator (num_graphs={int(drawn.counts.sum())}, generator_seed={generator_seed})",
        task="node_classification", graph_ptr=drawn.graph_ptr, edge_index=undirected_edge_index(keys, num_nodes),
        y=labels, train_mask=train_mask, val_mask=val_mask, test_mask=test_mask,
        x_cat=drawn.features[:, None], x_cat_sizes=[vocabulary], num_classes=num_classes,
        metric="weighted_accuracy", notes={"graphs": split_note(drawn.counts, generator_seed)}, coalesced=True,
    )


def generate_sbm_pattern(num_graphs: int = sum(PATTERN_SPLIT), generator_seed: int = 0, seed: int = 0) -> Data:
    """PATTERN: find the planted pattern's nodes in a stochastic block model (Benchmarking GNNs).

    Each graph: 5 communities of 5-34 nodes (p = 0.5, q = 0.35) with features uniform over {0, 1, 2},
    plus one of 100 patterns (5-34 nodes; its internal edges and features drawn once per pattern, with
    edge probability 0.5), each pattern node joined to each community node with probability 0.5; label 1
    on the pattern's nodes. Nodes are shuffled inside each graph. The first graphs train, then val, then
    test; graph i of a split holds pattern i mod 100, so each pattern is in all three splits.

    Args:
        num_graphs: graphs in all, split in the full set's proportions 10,000 / 2,000 / 2,000 (at least 7).
        generator_seed: seeds the graphs (and the patterns); the same value gives the same set.
        seed: the run's seed; not used, so that every model seed sees the same graphs.

    Returns:
        The validated set: x_cat int64 [N, 1] (vocabulary 3), y int64 [N] in {0, 1}, node masks by graph,
        graph_ptr [G+1], task node_classification, metric weighted_accuracy.

    Raises:
        ConfigError: If a value is invalid.
    """
    counts = split_counts(num_graphs, PATTERN_SPLIT, "sbm_pattern")
    generator_seed = check_generator_seed(generator_seed)
    drawn = draw_pattern(counts, generator_seed)
    labels = (drawn.blocks == PATTERN_COMMUNITIES).astype(np.int64)
    return _graph_set("sbm_pattern", drawn, labels, PATTERN_VOCABULARY, 2, generator_seed)


def generate_sbm_cluster(num_graphs: int = sum(CLUSTER_SPLIT), generator_seed: int = 0, seed: int = 0) -> Data:
    """CLUSTER: recover each node's community in a stochastic block model (Benchmarking GNNs).

    Each graph: 6 communities of 5-34 nodes (p = 0.55, q = 0.25); every node's feature is 0 except one
    random node per community, whose feature is its community id + 1; the label is the community id.
    Nodes are shuffled inside each graph. The first graphs train, then val, then test.

    Args:
        num_graphs: graphs in all, split in the full set's proportions 10,000 / 1,000 / 1,000 (at least 12).
        generator_seed: seeds the graphs; the same value gives the same set.
        seed: the run's seed; not used, so that every model seed sees the same graphs.

    Returns:
        The validated set: x_cat int64 [N, 1] (vocabulary 7), y int64 [N] in 0..5, node masks by graph,
        graph_ptr [G+1], task node_classification, metric weighted_accuracy.

    Raises:
        ConfigError: If a value is invalid.
    """
    counts = split_counts(num_graphs, CLUSTER_SPLIT, "sbm_cluster")
    generator_seed = check_generator_seed(generator_seed)
    drawn = draw_cluster(counts, generator_seed)
    return _graph_set("sbm_cluster", drawn, drawn.blocks, CLUSTER_VOCABULARY, CLUSTER_COMMUNITIES, generator_seed)
