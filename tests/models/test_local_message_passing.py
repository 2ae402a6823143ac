"""The local branch: the dense sampled layout equals PyG's layers on the graph, batched equals full-graph."""

from __future__ import annotations

import pytest
import torch
from torch_geometric.nn import APPNP, GATv2Conv, GCNConv, SAGEConv

from sgt_core.config.preprocess import ExpanderConfig
from sgt_core.layers import PropagationRows, SampledLayer
from sgt_core.models import NodeExtras, Spexphormer
from sgt_core.models.local_message_passing import LocalMessagePassing, _sum_messages
from sgt_core.preprocess.builder import build_interaction_graph
from sgt_core.preprocess.interaction_graph import EDGE_TYPES, NODE_KINDS
from sgt_core.sampling import LayerSampler
from sgt_core.sampling.propagation import appnp_top_k
from tests.preprocess.test_interaction_graph import path_graph
from tests.threads import torch_threads

GRAPH = EDGE_TYPES.index("graph")
HIDDEN, HEADS = 8, 2
BRANCHES = [("gcn", "mean"), ("sage", "mean"), ("sage", "sum"), ("gatv2", "mean")]


def random_graph(num_nodes: int = 60, num_edges: int = 150, seed: int = 0):
    """An undirected graph with uneven degrees (a path plus random chords), so that normalisations matter."""
    graph = path_graph(num_nodes)
    generator = torch.Generator().manual_seed(seed)
    chords = torch.randint(0, num_nodes, (2, num_edges), generator=generator)
    chords = chords[:, chords[0] != chords[1]]
    edges = torch.cat([graph.edge_index, chords, chords.flip(0)], dim=1)
    graph.edge_index = torch.unique(edges, dim=1)
    return graph


@pytest.fixture(scope="module")
def interaction_graph():
    return build_interaction_graph(random_graph(), self_loops=True, virtual_nodes=1, seed=0,
                                   expander=ExpanderConfig(degree=4, ramanujan_slack=1.0, max_tries=50))


def pyg_reference(kind: str, aggregation: str) -> torch.nn.Module:
    """PyG's layer used the ordinary way, on the whole graph with self-loops where the layer adds them."""
    if kind == "gcn":
        return GCNConv(HIDDEN, HIDDEN)
    if kind == "sage":
        return SAGEConv(HIDDEN, HIDDEN, aggr=aggregation)
    return GATv2Conv(HIDDEN, HIDDEN // HEADS, heads=HEADS)


def keep_everything(graph, num_layers: int = 1, device: torch.device | str = "cpu",
                    method: str = "reservoir", propagation: PropagationRows | None = None) -> LayerSampler:
    """Every neighbour in every layer, so the layout is the same whatever the (device's) random draws."""
    largest = int(graph.ptr.diff().max())
    scores = torch.rand(num_layers, graph.num_edges, generator=torch.Generator().manual_seed(1))
    return LayerSampler(graph.edge_index.to(device), graph.edge_type.to(device), graph.ptr.to(device),
                        scores.to(device), [largest] * num_layers, method, torch.Generator(device).manual_seed(0),
                        propagation=None if propagation is None else propagation.to(device))


def top_k_rows(graph, steps: int, teleport: float, top_k: int) -> PropagationRows:
    """The graph edges' top-k APPNP rows, as the train stage computes them."""
    graph_edges = graph.edge_index[:, graph.edge_type == GRAPH]
    return appnp_top_k(graph_edges[0], graph_edges[1], graph.num_nodes, steps, teleport, top_k)


@pytest.mark.parametrize(("kind", "aggregation"), BRANCHES)
def test_dense_sampled_layout_equals_pyg_layer_on_the_graph(interaction_graph, kind, aggregation):
    graph = interaction_graph
    torch.manual_seed(0)
    branch = LocalMessagePassing(kind, HIDDEN, HEADS, aggregation, GRAPH)
    reference = pyg_reference(kind, aggregation)
    reference.load_state_dict(branch.conv.state_dict())
    degree = NodeExtras.from_graph(graph, NODE_KINDS.index("substructure"), GRAPH).graph_degree
    h = torch.randn(graph.num_nodes, HIDDEN)
    graph_edges = graph.edge_index[:, graph.edge_type == GRAPH]
    expected = reference(h, graph_edges)  # [N, D]
    sampler = keep_everything(graph)
    (dense,) = sampler.full()
    assert isinstance(dense, SampledLayer)
    assert torch.allclose(branch(h, h, dense, degree), expected, atol=1e-5)
    sampler.method = "full"  # the FullLayer path: every interaction edge, sparse
    (full,) = sampler.full()
    assert torch.allclose(branch(h, h, full, degree), expected, atol=1e-5)
    # a subset of queries over a renumbered input, as Algorithm 2's batches give a layer
    targets = torch.tensor([0, 5, 17, 59, graph.num_nodes - 1])
    input_nodes, (layer,) = keep_everything(graph).batch(targets)
    batched = branch(h[input_nodes], h[input_nodes][layer.queries], layer, degree[input_nodes])
    assert torch.allclose(batched, expected[targets], atol=1e-5)


def test_gcn_propagation_equals_pyg_appnp_after_the_gcn_linear_map(interaction_graph):
    """K steps with teleport alpha over the kept graph edges: PyG's APPNP on GCNConv's W x, plus its bias."""
    graph = interaction_graph
    torch.manual_seed(0)
    branch = LocalMessagePassing("gcn", HIDDEN, HEADS, graph_edge_type=GRAPH, steps=6, teleport=0.15)
    torch.nn.init.normal_(branch.conv.bias)  # glorot's zero bias would hide where it is added
    degree = NodeExtras.from_graph(graph, NODE_KINDS.index("substructure"), GRAPH).graph_degree
    h = torch.randn(graph.num_nodes, HIDDEN)
    graph_edges = graph.edge_index[:, graph.edge_type == GRAPH]
    expected = APPNP(K=6, alpha=0.15)(branch.conv.lin(h), graph_edges) + branch.conv.bias  # [N, D]
    one_hop = GCNConv(HIDDEN, HIDDEN)
    one_hop.load_state_dict(branch.conv.state_dict())
    assert not torch.allclose(one_hop(h, graph_edges), expected, atol=1e-2)  # the steps change the output
    sampler = keep_everything(graph)
    (dense,) = sampler.full()
    assert torch.allclose(branch(h, h, dense, degree), expected, atol=1e-5)
    sampler.method = "full"
    (full,) = sampler.full()
    assert torch.allclose(branch(h, h, full, degree), expected, atol=1e-5)


def test_gcn_propagation_refuses_a_batch_and_other_branches(interaction_graph):
    graph = interaction_graph
    branch = LocalMessagePassing("gcn", HIDDEN, HEADS, graph_edge_type=GRAPH, steps=3, teleport=0.1)
    degree = NodeExtras.from_graph(graph, NODE_KINDS.index("substructure"), GRAPH).graph_degree
    h = torch.randn(graph.num_nodes, HIDDEN)
    input_nodes, (layer,) = keep_everything(graph).batch(torch.tensor([0, 5, 17]))
    with pytest.raises(ValueError, match="need a full-graph layer"):
        branch(h[input_nodes], h[input_nodes][layer.queries], layer, degree[input_nodes])
    with pytest.raises(ValueError, match="gcn branch only"):
        LocalMessagePassing("sage", HIDDEN, HEADS, steps=3)


def test_top_k_propagation_with_whole_rows_equals_the_k_steps(interaction_graph):
    """k at least every row's support: one hop over the rows is APPNP's K steps over all the graph's edges,
    in full-graph layers (dense and sparse) and for a batch's queries; sampling does not change it."""
    graph = interaction_graph
    torch.manual_seed(0)
    steps_branch = LocalMessagePassing("gcn", HIDDEN, HEADS, graph_edge_type=GRAPH, steps=6, teleport=0.15)
    torch.nn.init.normal_(steps_branch.conv.bias)
    rows_branch = LocalMessagePassing("gcn", HIDDEN, HEADS, graph_edge_type=GRAPH, steps=6, teleport=0.15,
                                      top_k=graph.num_nodes)
    rows_branch.load_state_dict(steps_branch.state_dict())
    degree = NodeExtras.from_graph(graph, NODE_KINDS.index("substructure"), GRAPH).graph_degree
    h = torch.randn(graph.num_nodes, HIDDEN)
    rows = top_k_rows(graph, 6, 0.15, graph.num_nodes)
    sampler = keep_everything(graph, method="full", propagation=rows)
    (full,) = sampler.full()
    expected = steps_branch(h, h, full, degree)  # [N, D]
    assert torch.allclose(rows_branch(h, h, full, degree), expected, atol=1e-5)
    sampler.method = "uniform"
    sampler.degrees = [2]  # most graph neighbours dropped: the rows do not depend on the draw
    (dense,) = sampler.full()
    assert torch.allclose(rows_branch(h, h, dense, degree), expected, atol=1e-5)
    targets = torch.tensor([0, 5, 17, 59, graph.num_nodes - 1])
    input_nodes, (layer,) = sampler.batch(targets)
    batched = rows_branch(h[input_nodes], h[input_nodes][layer.queries], layer, degree[input_nodes])
    assert torch.allclose(batched, expected[targets], atol=1e-5)


def test_top_k_propagation_refuses_a_layer_without_its_rows(interaction_graph):
    graph = interaction_graph
    branch = LocalMessagePassing("gcn", HIDDEN, HEADS, graph_edge_type=GRAPH, steps=3, teleport=0.1, top_k=4)
    degree = NodeExtras.from_graph(graph, NODE_KINDS.index("substructure"), GRAPH).graph_degree
    h = torch.randn(graph.num_nodes, HIDDEN)
    for rows, found in [(None, "found None"), (top_k_rows(graph, 3, 0.1, 6), r"found \(\d+, 6\)")]:
        (layer,) = keep_everything(graph, propagation=rows).full()
        with pytest.raises(ValueError, match=rf"top-4 propagation needs the layer's propagation rows .*{found}"):
            branch(h, h, layer, degree)
    with pytest.raises(ValueError, match="gcn branch's"):
        LocalMessagePassing("sage", HIDDEN, HEADS, top_k=4)


def test_sampled_sums_are_unbiased_given_a_kept_neighbour(interaction_graph):
    """n_i times the mean over the kept graph neighbours: over the draws that keep at least one, its mean is
    the full-graph sum; the uncorrected sum over the kept ones falls far short."""
    graph = interaction_graph
    torch.manual_seed(0)
    branch = LocalMessagePassing("sage", HIDDEN, HEADS, "sum", GRAPH)
    degree = NodeExtras.from_graph(graph, NODE_KINDS.index("substructure"), GRAPH).graph_degree
    h = torch.randn(graph.num_nodes, HIDDEN)
    branch.conv.lin_r.weight.data.zero_()  # the neighbour sum alone, through lin_l
    reference = pyg_reference("sage", "sum")
    reference.load_state_dict(branch.conv.state_dict())
    expected = reference(h, graph.edge_index[:, graph.edge_type == GRAPH])  # [N, D]
    # 3 of every node's ~10 candidates, uniformly: graph neighbours are often dropped
    sampler = LayerSampler(graph.edge_index, graph.edge_type, graph.ptr, torch.ones(1, graph.num_edges), [3],
                           "uniform", torch.Generator().manual_seed(0))
    draws, estimates, kept, uncorrected = 800, [], [], []
    with torch.no_grad():
        for _ in range(draws):
            (layer,) = sampler.full()
            estimates.append(branch(h, h, layer, degree))
            kept.append(branch.graph_edges(layer, graph.num_nodes)[2])
            source, target, _ = branch.graph_edges(layer, graph.num_nodes)
            plain = torch.zeros(graph.num_nodes, HIDDEN).index_add_(0, target, h[source])
            uncorrected.append(branch.conv.lin_l(plain))
    estimates, kept, uncorrected = torch.stack(estimates), torch.stack(kept), torch.stack(uncorrected)
    real = (degree > 0) & (torch.arange(graph.num_nodes) < graph.num_real_nodes)
    some = (kept > 0).unsqueeze(2)  # [draws, N, 1]
    count = some.sum(0).clamp_min(1)  # [N, 1]
    mean = (estimates * some).sum(0) / count  # [N, D] over the draws with a kept neighbour
    spread = ((estimates - mean).square() * some).sum(0).div(count).sqrt() / count.sqrt()  # standard error
    sometimes_dropped = real & (kept < degree).any(0) & (count.squeeze(1) > 50)
    assert sometimes_dropped.sum() > 20
    within = ((mean - expected).abs() <= 4 * spread + 1e-4)[sometimes_dropped]
    assert within.float().mean() > 0.98  # per node and feature, within 4 standard errors bar a few
    shortfall = ((uncorrected * some).sum(0) / count - expected)[sometimes_dropped].abs().mean()
    assert shortfall > 10 * (mean - expected)[sometimes_dropped].abs().mean()


@pytest.mark.parametrize(("kind", "aggregation"), [*BRANCHES, ("none", "mean")])
@pytest.mark.parametrize("mode", ["train", "eval"])
def test_batched_forward_equals_full_graph_with_every_neighbour_kept(kind, aggregation, mode):
    graph = build_interaction_graph(random_graph(40, 80, seed=2), self_loops=True, virtual_nodes=1, seed=0,
                                    expander=ExpanderConfig(degree=4, ramanujan_slack=1.0, max_tries=50))
    torch.manual_seed(0)
    sampler = keep_everything(graph, num_layers=3)
    model = Spexphormer(in_features=graph.x.shape[1], num_outputs=2, hidden=HIDDEN, num_layers=3, heads=HEADS,
                        num_edge_types=len(EDGE_TYPES), num_node_kinds=len(NODE_KINDS), dropout=0.0,
                        local=kind, local_aggregation=aggregation, degree_signal=True, graph_edge_type=GRAPH)
    extras = NodeExtras.from_graph(graph, NODE_KINDS.index("substructure"), GRAPH)
    model.train()
    for _ in range(3):  # non-trivial batch-norm running statistics, so eval mode is not the identity
        model(graph.x, graph.node_kind, sampler.full(), extras)
    model.train(mode == "train")
    with torch.no_grad():
        full = model(graph.x, graph.node_kind, sampler.full(), extras)
        everyone = torch.arange(graph.num_nodes)
        input_nodes, layers = sampler.batch(everyone)
        batched = model(graph.x[input_nodes], graph.node_kind[input_nodes], layers, extras.select(input_nodes))
        assert torch.allclose(batched, full, atol=1e-5, rtol=1e-5)
        if mode == "eval":  # single targets: their own small Algorithm 2 neighbourhoods
            for node in [0, 13, 39, 40]:
                input_nodes, layers = sampler.batch(torch.tensor([node]))
                single = model(graph.x[input_nodes], graph.node_kind[input_nodes], layers,
                               extras.select(input_nodes))
                assert torch.allclose(single[0], full[node], atol=1e-5, rtol=1e-5), node


@pytest.mark.parametrize("mode", ["train", "eval"])
def test_batched_forward_equals_full_graph_with_top_k_rows(mode):
    """With the rows cut to k = 3 (not P), Algorithm 2's batches, whose inputs add each query's rows, give
    the full-graph forward exactly: the K steps train in batches."""
    graph = build_interaction_graph(random_graph(40, 80, seed=2), self_loops=True, virtual_nodes=1, seed=0,
                                    expander=ExpanderConfig(degree=4, ramanujan_slack=1.0, max_tries=50))
    torch.manual_seed(0)
    rows = top_k_rows(graph, 10, 0.1, 3)
    assert (rows.weights[:graph.num_real_nodes] > 0).all()  # every real node's three slots are in use
    sampler = keep_everything(graph, num_layers=3, propagation=rows)
    model = Spexphormer(in_features=graph.x.shape[1], num_outputs=2, hidden=HIDDEN, num_layers=3, heads=HEADS,
                        num_edge_types=len(EDGE_TYPES), num_node_kinds=len(NODE_KINDS), dropout=0.0, local="gcn",
                        local_steps=10, local_teleport=0.1, local_top_k=3, graph_edge_type=GRAPH)
    extras = NodeExtras.from_graph(graph, NODE_KINDS.index("substructure"), GRAPH)
    model.train()
    for _ in range(3):
        model(graph.x, graph.node_kind, sampler.full(), extras)
    model.train(mode == "train")
    with torch.no_grad():
        full = model(graph.x, graph.node_kind, sampler.full(), extras)
        for targets in [torch.arange(graph.num_nodes), *(torch.tensor([node]) for node in [0, 13, 39, 40])]:
            if mode == "train" and targets.numel() == 1:
                continue  # batch norm in training mode needs more than one row
            input_nodes, layers = sampler.batch(targets)
            batched = model(graph.x[input_nodes], graph.node_kind[input_nodes], layers, extras.select(input_nodes))
            assert torch.allclose(batched, full[targets], atol=1e-5, rtol=1e-5)
    # one sampled neighbour per layer: a batch's inputs still hold every node of its targets' rows
    sampler.method, sampler.degrees = "uniform", [1, 1, 1]
    targets = torch.tensor([3, 21])
    input_nodes, layers = sampler.batch(targets)
    assert torch.isin(rows.neighbours[targets], input_nodes).all()
    assert torch.equal(input_nodes[layers[0].propagation.neighbours], rows.neighbours[input_nodes[layers[0].queries]])


def test_local_branch_without_graph_degrees_is_refused(interaction_graph):
    graph = interaction_graph
    model = Spexphormer(in_features=graph.x.shape[1], num_outputs=2, hidden=HIDDEN, num_layers=1, heads=HEADS,
                        num_edge_types=len(EDGE_TYPES), num_node_kinds=len(NODE_KINDS), local="gcn")
    with pytest.raises(ValueError, match="graph_degree"):
        model(graph.x, graph.node_kind, keep_everything(graph).full())


def test_degree_signal_counts_graph_neighbours_only(interaction_graph):
    graph = interaction_graph
    degree = NodeExtras.from_graph(graph, NODE_KINDS.index("substructure"), GRAPH).graph_degree
    dst = graph.edge_index[1]
    for node in [0, 10, graph.num_nodes - 1]:
        assert degree[node] == int(((dst == node) & (graph.edge_type == GRAPH)).sum())
    assert degree[graph.num_nodes - 1] == 0  # the virtual node has no edge of the input graph
    assert int(degree.sum()) == int((graph.edge_type == GRAPH).sum())


def saved_for_backward(run) -> list[torch.Tensor]:
    """The tensors autograd keeps for the backward pass of `run()`, one per storage (what it holds in memory)."""
    saved: dict[int, torch.Tensor] = {}

    def keep(tensor: torch.Tensor) -> torch.Tensor:
        saved[tensor.untyped_storage().data_ptr()] = tensor
        return tensor

    with torch.autograd.graph.saved_tensors_hooks(keep, lambda tensor: tensor):
        run()
    return list(saved.values())


@pytest.mark.parametrize(("kind", "aggregation", "steps"),
                         [("gcn", "mean", 1), ("gcn", "mean", 2), ("sage", "mean", 1), ("sage", "sum", 1)])
def test_backward_state_holds_no_message_tensor(interaction_graph, kind, aggregation, steps):
    """What the branch keeps for the backward pass is O(kept edges) indices and weights, never one
    [kept edges, D] message tensor per layer and step: the APPNP branch's memory must not grow with K."""
    graph = interaction_graph
    degree = NodeExtras.from_graph(graph, NODE_KINDS.index("substructure"), GRAPH).graph_degree
    (layer,) = keep_everything(graph).full()
    h = torch.randn(graph.num_nodes, HIDDEN, requires_grad=True)

    def kept(num_steps: int) -> tuple[int, int]:
        """(bytes, elements of the largest tensor) that autograd keeps for the branch with `num_steps` steps."""
        torch.manual_seed(0)
        teleport = 0.1 if num_steps > 1 else 0.0
        branch = LocalMessagePassing(kind, HIDDEN, HEADS, aggregation, GRAPH, num_steps, teleport)
        saved = saved_for_backward(lambda: branch(h, h, layer, degree))
        return sum(t.untyped_storage().nbytes() for t in saved), max(t.numel() for t in saved)

    source, _, _ = LocalMessagePassing(kind, HIDDEN, HEADS, aggregation, GRAPH).graph_edges(layer, graph.num_nodes)
    kept_bytes, largest = kept(steps)
    assert largest < source.numel() * HIDDEN  # nothing the size of the messages
    if steps > 1:  # ten steps keep what two keep: the same edges, weights and z_0
        assert kept(10)[0] == kept_bytes


@pytest.mark.parametrize("gather", ["index_select", "indexing"])
@pytest.mark.parametrize("weighted", [True, False])
def test_message_sum_equals_autograd_of_its_formula_bit_for_bit(gather, weighted):
    """`_sum_messages` against the plain formula it replaces, outputs and both gradients identical: with
    index_select at any thread count (its backward is index_add_ as well), and with indexing (`x[source]`,
    the one-hop branches' formula before) on one thread, where autograd's accumulating index_put_ sums in
    the same order, so that rows recorded on one thread with the old formula still reproduce."""
    generator = torch.Generator().manual_seed(0)
    source = torch.randint(0, 50, (400,), generator=generator)
    target = torch.randint(0, 30, (400,), generator=generator).sort().values
    weight = torch.rand(400, 1, generator=generator) if weighted else None
    x = torch.randn(50, HIDDEN, generator=generator)
    into = torch.randn(30, HIDDEN, generator=generator)
    upstream = torch.randn(30, HIDDEN, generator=generator)

    def run(formula):
        x_leaf, into_leaf = x.clone().requires_grad_(), into.clone().requires_grad_()
        out = formula(x_leaf, into_leaf)
        out.backward(upstream)
        return out.detach(), x_leaf.grad, into_leaf.grad

    def plain(x_leaf, into_leaf):
        gathered = x_leaf[source] if gather == "indexing" else x_leaf.index_select(0, source)
        messages = gathered * weight if weighted else gathered
        return (into_leaf * 1).index_add_(0, target, messages)

    with torch_threads(1 if gather == "indexing" else max(torch.get_num_threads(), 2)):
        expected = run(plain)
        got = run(lambda x_leaf, into_leaf: _sum_messages(x_leaf, source, target, weight,
                                                          into_leaf * 1))  # a leaf cannot be summed into
    for name, a, b in zip(("output", "x's gradient", "into's gradient"), got, expected):
        assert torch.equal(a, b), name


@pytest.mark.parametrize(("kind", "aggregation", "steps"),
                         [("gcn", "mean", 1), ("sage", "sum", 1), ("gcn", "mean", 3)])
def test_branch_gradients_repeat_bit_for_bit_on_two_threads(kind, aggregation, steps):
    """Same inputs, same gradients, on two threads: training on CPU is reproducible with a local branch.
    With autograd's indexing the one-hop branches' gradients changed in the last bits from run to run
    (an accumulating index_put_ on several threads sums in a varying order)."""
    # big enough that index_put_ splits its sums between the threads
    graph = build_interaction_graph(random_graph(3000, 40000, seed=3), self_loops=True, expander=None,
                                    virtual_nodes=0, seed=0)
    (layer,) = keep_everything(graph, method="full").full()
    degree = NodeExtras.from_graph(graph, NODE_KINDS.index("substructure"), GRAPH).graph_degree
    num_nodes = graph.num_nodes
    torch.manual_seed(0)
    branch = LocalMessagePassing(kind, 64, 1, aggregation, GRAPH, steps, 0.1 if steps > 1 else 0.0)
    h = torch.randn(num_nodes, 64)
    upstream = torch.randn(num_nodes, 64)

    def gradients() -> list[torch.Tensor]:
        h_leaf = h.clone().requires_grad_()
        branch.zero_grad()
        branch(h_leaf, h_leaf, layer, degree).backward(upstream)
        return [h_leaf.grad, *(parameter.grad for parameter in branch.parameters())]

    with torch_threads(2):
        first = gradients()
        repeats = [gradients() for _ in range(3)]
    for repeat in repeats:
        assert all(torch.equal(a, b) for a, b in zip(first, repeat))
