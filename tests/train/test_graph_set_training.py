"""Training on batches of whole graphs: batched equals the full union, nothing crosses graphs, stages run."""

from __future__ import annotations

import math

import pytest
import torch

from sgt_core.config import compose_config
from sgt_core.graph_batches import GraphBatches
from sgt_core.pipeline import STAGE_BY_NAME
from sgt_core.preprocess.builder import build_interaction_graph
from sgt_core.preprocess.outputs import INTERACTION_GRAPH_FILE
from sgt_core.train.graph_set_training import GraphSetTraining
from tests.graph_sets import toy_graph_set

SMALL = ["model.hidden=16", "model.heads=2", "model.num_layers=2", "model.degrees=[8,8]", "model.local=gine",
         "estimator.epochs=3", "estimator.batch_size=16", "train.epochs=3", "train.batch_size=16",
         "preprocess.expander.enabled=false"]


def interaction_graph(task: str):
    return build_interaction_graph(toy_graph_set(task, num_graphs=40), self_loops=True, expander=None,
                                   virtual_nodes=0, seed=0)


@pytest.mark.parametrize("task", ["graph_regression", "node_classification"])
def test_batches_of_graphs_equal_the_whole_union_when_every_neighbour_is_kept(task):
    graph = interaction_graph(task)
    largest = int(graph.ptr.diff().max())
    cfg = compose_config([*SMALL, f"model.degrees=[{largest},{largest}]", "train.batch_size=3"])
    scores = torch.rand(2, graph.num_edges, generator=torch.Generator().manual_seed(0))
    batched = GraphSetTraining.build(cfg, graph, scores, torch.device("cpu"))
    batched.model.eval()
    everything = torch.arange(graph.num_graphs)
    mask = graph.train_mask | graph.val_mask | graph.test_mask
    with torch.no_grad():
        in_batches = batched.predict(everything, mask=mask)
        batched.batch_size = None  # one batch: the whole union
        whole = batched.predict(everything, mask=mask)
        batched.sampler.method = "full"  # no sampling at all: the union's own edges
        full = batched.predict(everything, mask=mask)
    assert in_batches.shape == (batched.num_targets(everything, mask), graph.num_outputs)
    assert torch.allclose(in_batches, whole, atol=1e-5) and torch.allclose(in_batches, full, atol=1e-5)
    assert batched.targets(everything, mask).shape[0] == in_batches.shape[0]


def test_sampled_neighbours_stay_inside_their_graph():
    graph = interaction_graph("graph_classification")
    cfg = compose_config([*SMALL, "model.degrees=[2,3]"])
    training = GraphSetTraining.build(cfg, graph, torch.rand(2, graph.num_edges), torch.device("cpu"))
    batches = GraphBatches.of(graph.node_graph, graph.node_kind, graph.num_graphs)
    chosen = torch.tensor([0, 5, 9, 17])
    nodes = batches.nodes(chosen)
    for layer in training.sampler.closed_batch(nodes):
        ends = nodes[layer.neighbours][layer.neighbour_mask]  # [kept] global ids
        queries = nodes.unsqueeze(1).expand_as(layer.neighbours)[layer.neighbour_mask]
        assert torch.equal(graph.node_graph[ends], graph.node_graph[queries])


@pytest.mark.parametrize("task, metric", [("graph_regression", "mae"), ("graph_classification", "roc_auc"),
                                          ("node_classification", "weighted_accuracy")])
def test_estimate_export_and_train_stages_on_many_graphs(tmp_path, task, metric):
    graph = build_interaction_graph(toy_graph_set(task, num_graphs=80), self_loops=True, expander=None,
                                    virtual_nodes=0, seed=0, compact=True)
    for name in ("preprocess", "estimate", "export", "train"):
        (tmp_path / name).mkdir()
    graph.save(tmp_path / "preprocess" / INTERACTION_GRAPH_FILE)
    cfg = compose_config(SMALL)
    metrics = {}
    for name in ("estimate", "export", "train"):
        stage = STAGE_BY_NAME[name]
        metrics[name] = stage.run(cfg, {upstream: tmp_path / upstream for upstream in stage.upstream}, tmp_path / name)
    for name in ("estimate", "train"):
        assert metrics[name]["selected_by"] == f"val_{metric}"
        assert math.isfinite(metrics[name][f"test_{metric}"])
    assert metrics["export"]["max_normalisation_error"] < 1e-4
    import duckdb  # the exported scores carry each edge's graph: one graph's rows by a query

    files = str(tmp_path / "export" / "attention_scores" / "layer_*.parquet")
    per_graph = duckdb.sql(f"SELECT graph_id, COUNT(*) FROM read_parquet('{files}') WHERE layer = 0 "
                           "GROUP BY graph_id ORDER BY graph_id").fetchall()
    assert len(per_graph) == 80 and sum(count for _, count in per_graph) == graph.num_edges


def test_ranks_share_the_graph_batches_through_torchrun(tmp_path):
    """Two gloo ranks split every global batch of graphs; rank 0 writes what one process writes."""
    graph = build_interaction_graph(toy_graph_set("graph_regression", num_graphs=60), self_loops=True,
                                    expander=None, virtual_nodes=0, seed=0, compact=True)
    for name in ("preprocess", "estimate", "export", "single", "ranks"):
        (tmp_path / name).mkdir()
    graph.save(tmp_path / "preprocess" / INTERACTION_GRAPH_FILE)
    cfg = compose_config([*SMALL, "train.batch_size=8", "model.dropout=0"])
    for name in ("estimate", "export"):
        stage = STAGE_BY_NAME[name]
        stage.run(cfg, {upstream: tmp_path / upstream for upstream in stage.upstream}, tmp_path / name)
    inputs = {"preprocess": tmp_path / "preprocess", "export": tmp_path / "export"}
    train = STAGE_BY_NAME["train"]
    single = train.run(cfg, inputs, tmp_path / "single")
    distributed = {**cfg, "train": {**cfg["train"], "distributed": {"nproc_per_node": 2, "nnodes": 1,
                                                                     "rdzv_endpoint": None}}}
    ranks = train.run(distributed, inputs, tmp_path / "ranks")
    assert ranks.keys() == single.keys() and math.isfinite(ranks["test_mae"])
    assert sorted(p.name for p in (tmp_path / "ranks").iterdir()) == sorted(p.name for p in (tmp_path / "single").iterdir())


def test_every_component_on_many_graphs_trains_in_batches(tmp_path):
    """Expander, virtual nodes, anchors with SPD, tokens and the LPE, each inside its graph: the batches of
    whole graphs hold every edge of their nodes, and both networks read every component."""
    from sgt_core.config.preprocess import PreprocessConfig
    from sgt_core.preprocess.stage import build_preprocessed

    cfg = compose_config([*SMALL, "preprocess.expander.enabled=true", "preprocess.expander.degree=4",
                          "preprocess.virtual_nodes=1", "preprocess.anchors.enabled=true",
                          "preprocess.substructures.enabled=true", "preprocess.lpe.enabled=true",
                          "preprocess.lpe.m=4", "model.lpe_dim=4", "model.readout=virtual"])
    graph, tokens, _ = build_preprocessed(PreprocessConfig.from_dict(cfg["preprocess"]),
                                          toy_graph_set("graph_regression", num_graphs=50), seed=0)
    assert tokens is not None and graph.num_tokens > 0 and graph.num_spd_buckets > 0
    ends = graph.node_graph.long()[graph.edge_index.long()]
    assert torch.equal(ends[0], ends[1])  # nothing crosses between graphs
    (tmp_path / "preprocess").mkdir()
    graph.save(tmp_path / "preprocess" / INTERACTION_GRAPH_FILE)
    metrics = {}
    for name in ("estimate", "export", "train"):
        (tmp_path / name).mkdir()
        stage = STAGE_BY_NAME[name]
        metrics[name] = stage.run(cfg, {upstream: tmp_path / upstream for upstream in stage.upstream}, tmp_path / name)
    assert math.isfinite(metrics["train"]["test_mae"]) and math.isfinite(metrics["estimate"]["test_mae"])


def recalibrated_against_its_batches(training, network, units: torch.Tensor, num_batches: int) -> None:
    """Recalibrates `network`'s batch norms and checks each one's running statistics are the plain average of
    the statistics of the batches it saw (captured as they ran), and that momentum and mode are restored."""
    norms = [module for module in network.modules() if isinstance(module, torch.nn.BatchNorm1d)]
    assert norms
    seen = {norm: [] for norm in norms}
    hooks = [norm.register_forward_pre_hook(lambda module, args: seen[module].append(args[0].detach().clone()))
             for norm in norms]
    network.eval()
    training.recalibrate_batch_norm(network, units, num_batches)
    for hook in hooks:
        hook.remove()
    assert not network.training and all(norm.momentum == 0.1 for norm in norms)
    for norm, inputs in seen.items():
        assert len(inputs) == min(num_batches, len(training.epoch_batches(units)))
        mean = torch.stack([rows.mean(0) for rows in inputs]).mean(0)
        variance = torch.stack([rows.var(0, unbiased=True) for rows in inputs]).mean(0)
        torch.testing.assert_close(norm.running_mean, mean, rtol=1e-5, atol=1e-6)
        torch.testing.assert_close(norm.running_var, variance, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("num_batches", [2, 100])
def test_precise_batch_norm_averages_the_training_batches_statistics(num_batches):
    graph = interaction_graph("node_classification")
    cfg = compose_config([*SMALL, "train.batch_size=8"])
    training = GraphSetTraining.build(cfg, graph, torch.rand(2, graph.num_edges), torch.device("cpu"))
    train_graphs = training.units(graph.train_mask)
    training.train_epoch(train_graphs)  # weights away from their initialisation, running statistics trailing
    recalibrated_against_its_batches(training, training.model, train_graphs, num_batches)


def test_every_neighbour_as_slots_computes_the_edge_list_attention(monkeypatch):
    """sampler=full's batch layer (`closed_whole`: each node's edges as masked slots, for the fused slot
    kernels) holds exactly the batch's edges, and the network on it gives the outputs and gradients of the
    edge-list form (`FullLayer`, `SampledAttention.forward_full`) over the same edges."""
    from sgt_core.graph_batches import induced_edges
    from sgt_core.layers import FullLayer, SampledLayer

    graph = build_interaction_graph(toy_graph_set("graph_regression", num_graphs=40), self_loops=True,
                                    expander=None, virtual_nodes=1, seed=0)  # a virtual node: degrees vary
    training = GraphSetTraining.build(compose_config(SMALL), graph, torch.rand(2, graph.num_edges), torch.device("cpu"))
    graphs = torch.tensor([1, 4, 7, 30])
    nodes = training.batches.nodes(graphs)
    slots = training.sampler.closed_whole(nodes)
    edges, edge_index = induced_edges(graph.ptr, graph.edge_index, nodes)
    kept_target, kept_slot = slots.neighbour_mask.nonzero(as_tuple=True)  # row-major: the edges' order
    assert torch.equal(torch.stack([slots.neighbours[kept_target, kept_slot], kept_target]), edge_index)
    assert torch.equal(slots.neighbour_type[slots.neighbour_mask], graph.edge_type[edges].long())
    assert torch.equal(slots.neighbour_attr[slots.neighbour_mask], graph.edge_attr[edges].long())
    assert isinstance(training._every_neighbour(nodes), SampledLayer)  # these graphs pad to slots
    monkeypatch.setattr("sgt_core.train.graph_set_training.SLOT_PADDING", 1)  # any padding: the edge list
    full = training._every_neighbour(nodes)
    assert isinstance(full, FullLayer) and torch.equal(full.edge_index, edge_index)
    model = training.model.eval()
    with torch.no_grad():  # edge terms away from their neutral start, so that they matter
        for block in model.layers:
            block.attention.edge_scale.weight.normal_()
            block.attention.edge_bias.weight.normal_()
    rows = training.batches.rows(graphs, nodes)
    outputs, gradients = [], []
    for layer in (slots, full):
        model.zero_grad()
        out = model(training.x[nodes], training.node_kind[nodes], [layer] * 2, training.extras.select(nodes), rows)
        out.square().sum().backward()
        outputs.append(out.detach())
        gradients.append([parameter.grad.clone() for parameter in model.parameters() if parameter.grad is not None])
    assert torch.allclose(outputs[0], outputs[1], atol=1e-5)
    for from_slots, from_edges in zip(*gradients, strict=True):
        assert torch.allclose(from_slots, from_edges, atol=1e-4, rtol=1e-4)
    # the block is built once per batch and shared by every layer: one built afresh for each layer is the same
    with torch.no_grad():
        afresh = [training.sampler.closed_whole(nodes) for _ in range(2)]
        rebuilt = model(training.x[nodes], training.node_kind[nodes], afresh, training.extras.select(nodes), rows)
    assert torch.equal(rebuilt, outputs[0])


def test_evaluation_draws_its_own_layers_and_predicts_the_test_split_only_when_asked():
    """Evaluation samples from a generator of its own, seeded alike each time: training's stream (so its
    losses) is the same whether or not it evaluates between epochs, and two evaluations of the same weights
    are equal. The test split is predicted only when `wants_test` asks, as the stage asks on improving epochs."""
    graph = interaction_graph("graph_classification")
    cfg = compose_config([*SMALL, "model.degrees=[2,3]", "train.batch_size=8"])
    scores = torch.rand(2, graph.num_edges, generator=torch.Generator().manual_seed(0))
    units = {split: (torch.as_tensor(getattr(graph, f"{split}_mask")).nonzero().flatten(), None)
             for split in ("train", "val", "test")}

    def losses(evaluating: bool):
        torch.manual_seed(0)  # dropout's stream
        training = GraphSetTraining.build(cfg, graph, scores, torch.device("cpu"))
        run, evaluations = [], []
        for _ in range(3):
            run.append(training.train_epoch(units["train"][0]))
            if evaluating:
                training.model.eval()
                with torch.no_grad():
                    evaluations.append([training.evaluate(units, training.model) for _ in range(2)])
        return run, evaluations

    plain, _ = losses(evaluating=False)
    evaluated, evaluations = losses(evaluating=True)
    assert plain == evaluated
    for (val, test), (val_again, test_again) in evaluations:
        assert torch.equal(val, val_again) and torch.equal(test, test_again)
    # the precondition that makes the first assertion mean something: degrees [2, 3] leave neighbours out
    assert int(graph.ptr.diff().max()) > 3

    training = GraphSetTraining.build(cfg, graph, scores, torch.device("cpu"))
    training.model.eval()
    asked = []
    with torch.no_grad():
        val, test = training.evaluate(units, training.model, lambda outputs: asked.append(outputs) or False)
        val_both, test_both = training.evaluate(units, training.model, lambda outputs: True)
    assert test is None and len(asked) == 1 and torch.equal(asked[0], val)
    assert torch.equal(val, val_both) and test_both.shape[0] == units["test"][0].numel()
