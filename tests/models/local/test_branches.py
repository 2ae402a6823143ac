"""The one-hop local branches (gcn, sage, gatv2): the dense sampled layout equals PyG's layers on the graph,
batched equals full-graph, sampled sums are unbiased, and the backward pass keeps no message tensor."""

from __future__ import annotations

import pytest
import torch
from torch_geometric.nn import GATv2Conv, GCNConv, SAGEConv

from sgt_core.config.preprocess import ExpanderConfig
from sgt_core.layers import SampledLayer
from sgt_core.models import NodeExtras, Spexphormer
from sgt_core.models.local import (
    LOCAL_BRANCHES,
    APPNPBranch,
    GATv2Branch,
    GCNBranch,
    SAGEBranch,
    local_branch,
)
from sgt_core.models.local.messages import graph_edges
from sgt_core.preprocess.builder import build_interaction_graph
from sgt_core.preprocess.interaction_graph import EDGE_TYPES, NODE_KINDS
from sgt_core.sampling import LayerSampler
from tests.models.local.graphs import BRANCHES, GRAPH, HEADS, HIDDEN, keep_everything, random_graph
from tests.threads import torch_threads


def pyg_reference(kind: str, aggregation: str) -> torch.nn.Module:
    """PyG's layer used the ordinary way, on the whole graph with self-loops where the layer adds them."""
    if kind == "gcn":
        return GCNConv(HIDDEN, HIDDEN)
    if kind == "sage":
        return SAGEConv(HIDDEN, HIDDEN, aggr=aggregation)
    return GATv2Conv(HIDDEN, HIDDEN // HEADS, heads=HEADS)


def one_hop(kind: str, aggregation: str = "mean", hidden: int = HIDDEN, heads: int = HEADS) -> torch.nn.Module:
    """The branch `model.local=kind` builds."""
    return local_branch(kind, hidden, heads, GRAPH, aggregation)


def test_each_local_value_builds_its_own_class():
    assert local_branch("none", HIDDEN, HEADS) is None
    expected = {"gcn": GCNBranch, "sage": SAGEBranch, "gatv2": GATv2Branch, "appnp": APPNPBranch}
    for kind, cls in expected.items():
        branch = local_branch(kind, HIDDEN, HEADS, GRAPH, steps=3, teleport=0.1)
        assert type(branch) is cls is LOCAL_BRANCHES[kind]
    with pytest.raises(ValueError, match="appnp branch needs its steps and teleport"):
        local_branch("appnp", HIDDEN, HEADS)
    with pytest.raises(ValueError, match="local branch must be none or one of"):
        local_branch("gin", HIDDEN, HEADS)
    with pytest.raises(ValueError, match="aggregation must be one of"):
        SAGEBranch(HIDDEN, "max")
    with pytest.raises(ValueError, match="not divisible by 3 heads"):
        GATv2Branch(HIDDEN, 3)


@pytest.mark.parametrize(("kind", "aggregation"), BRANCHES)
def test_dense_sampled_layout_equals_pyg_layer_on_the_graph(interaction_graph, kind, aggregation):
    graph = interaction_graph
    torch.manual_seed(0)
    branch = one_hop(kind, aggregation)
    reference = pyg_reference(kind, aggregation)
    reference.load_state_dict(branch.state_dict())
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


def test_sampled_sums_are_unbiased_given_a_kept_neighbour(interaction_graph):
    """n_i times the mean over the kept graph neighbours: over the draws that keep at least one, its mean is
    the full-graph sum; the uncorrected sum over the kept ones falls far short."""
    graph = interaction_graph
    torch.manual_seed(0)
    branch = one_hop("sage", "sum")
    degree = NodeExtras.from_graph(graph, NODE_KINDS.index("substructure"), GRAPH).graph_degree
    h = torch.randn(graph.num_nodes, HIDDEN)
    branch.lin_r.weight.data.zero_()  # the neighbour sum alone, through lin_l
    reference = pyg_reference("sage", "sum")
    reference.load_state_dict(branch.state_dict())
    expected = reference(h, graph.edge_index[:, graph.edge_type == GRAPH])  # [N, D]
    # 3 of every node's ~10 candidates, uniformly: graph neighbours are often dropped
    sampler = LayerSampler(graph.edge_index, graph.edge_type, graph.ptr, torch.ones(1, graph.num_edges), [3],
                           "uniform", torch.Generator().manual_seed(0))
    draws, estimates, kept, uncorrected = 800, [], [], []
    with torch.no_grad():
        for _ in range(draws):
            (layer,) = sampler.full()
            estimates.append(branch(h, h, layer, degree))
            kept.append(graph_edges(layer, graph.num_nodes, GRAPH)[2])
            source, target, _ = graph_edges(layer, graph.num_nodes, GRAPH)
            plain = torch.zeros(graph.num_nodes, HIDDEN).index_add_(0, target, h[source])
            uncorrected.append(branch.lin_l(plain))
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
                         [("gcn", "mean", 1), ("appnp", "mean", 2), ("sage", "mean", 1), ("sage", "sum", 1)])
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
        branch = (one_hop(kind, aggregation) if kind != "appnp"
                  else APPNPBranch(HIDDEN, num_steps, 0.1, graph_edge_type=GRAPH))
        saved = saved_for_backward(lambda: branch(h, h, layer, degree))
        return sum(t.untyped_storage().nbytes() for t in saved), max(t.numel() for t in saved)

    source, _, _ = graph_edges(layer, graph.num_nodes, GRAPH)
    kept_bytes, largest = kept(steps)
    assert largest < source.numel() * HIDDEN  # nothing the size of the messages
    if steps > 1:  # ten steps keep what two keep: the same edges, weights and z_0
        assert kept(10)[0] == kept_bytes


@pytest.mark.parametrize(("kind", "aggregation", "steps"),
                         [("gcn", "mean", 1), ("sage", "sum", 1), ("appnp", "mean", 3)])
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
    branch = local_branch(kind, 64, 1, GRAPH, aggregation, steps, 0.1)
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
