"""The CUDA paths: the sampler, the wide network and the train stage on a GPU compute what they compute on CPU.

Skipped where torch sees no GPU (this repository's CI); run on a GPU machine with `pytest -m gpu`.
"""

from __future__ import annotations

import copy
import json
import math

import pytest
import torch
import torch.nn.functional as F
from scipy.stats import chisquare

from sgt_core.config.preprocess import ExpanderConfig
from sgt_core.models import NodeExtras, Spexphormer
from sgt_core.preprocess.builder import build_interaction_graph
from sgt_core.preprocess.interaction_graph import EDGE_TYPES, NODE_KINDS
from sgt_core.sampling import sample_neighbours
from sgt_core.seeding import seed_everything
from sgt_core.train.outputs import HISTORY_FILE, MODEL_FILE
from sgt_core.train.stage import _read_inputs, run_train
from tests.models.local.graphs import BRANCHES, keep_everything, random_graph, top_k_rows
from tests.sampling.test_reservoir import csr
from tests.stage_runner import run_stages
from tests.train.test_distributed import _build_in_float64

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device: torch.cuda.is_available() is False"),
]
CUDA = torch.device("cuda")
GRAPH = EDGE_TYPES.index("graph")
HIDDEN, HEADS, LAYERS = 16, 2, 3


def test_reservoir_sampling_on_cuda_draws_in_proportion_to_the_scores():
    weights = torch.tensor([0.5, 0.25, 0.15, 0.07, 0.03], device=CUDA)
    repeats = 40_000  # one node repeated: as many independent draws
    ptr = csr([5] * repeats, CUDA)
    edges, mask = sample_neighbours(ptr, weights.repeat(repeats), 1, generator=torch.Generator(CUDA).manual_seed(0))
    assert edges.device.type == "cuda" and bool(mask.all())
    observed = torch.bincount(edges[:, 0] - ptr[:-1], minlength=5).cpu().numpy()
    expected = (weights.double() / weights.double().sum() * observed.sum()).cpu().numpy()
    assert chisquare(observed, expected).pvalue > 1e-3


def test_reservoir_sampling_on_cuda_is_without_replacement_and_masks_small_neighbourhoods():
    generator = torch.Generator(CUDA).manual_seed(1)
    counts = [*torch.randint(6, 30, (500,), generator=torch.Generator().manual_seed(1)).tolist(), 2, 1]
    ptr = csr(counts, CUDA)
    scores = torch.rand(sum(counts), device=CUDA, generator=generator) ** 4  # skewed, as trained scores are
    edges, mask = sample_neighbours(ptr, scores, 5, generator=generator)
    assert mask.sum(dim=1).tolist() == [5] * 500 + [2, 1]
    kept = torch.where(mask, edges, ptr[:-1, None])
    assert torch.all((kept >= ptr[:-1, None]) & (kept < ptr[1:, None]))
    assert bool((edges[~mask] == -1).all())
    ordered = edges[:500].sort(dim=1).values
    assert torch.all(ordered[:, 1:] != ordered[:, :-1])


@pytest.fixture(scope="module")
def interaction_graph():
    return build_interaction_graph(random_graph(50, 120, seed=3), self_loops=True, virtual_nodes=1, seed=0,
                                   expander=ExpanderConfig(degree=4, ramanujan_slack=1.0, max_tries=50))


def network(graph, kind: str, aggregation: str, **propagation) -> Spexphormer:
    torch.manual_seed(0)
    return Spexphormer(in_features=graph.x.shape[1], num_outputs=3, hidden=HIDDEN, num_layers=LAYERS, heads=HEADS,
                       num_edge_types=len(EDGE_TYPES), num_node_kinds=len(NODE_KINDS), dropout=0.0, local=kind,
                       local_aggregation=aggregation, degree_signal=True, graph_edge_type=GRAPH, **propagation)


@pytest.mark.parametrize("method", ["reservoir", "full"])  # the dense sampled layout, and the sparse FullLayer
@pytest.mark.parametrize(("kind", "aggregation"), [*BRANCHES, ("none", "mean")])
def test_the_wide_network_on_cuda_computes_what_it_computes_on_cpu(interaction_graph, kind, aggregation, method):
    graph = interaction_graph
    extras = NodeExtras.from_graph(graph, NODE_KINDS.index("substructure"), GRAPH)
    labels = torch.randint(0, 3, (graph.num_nodes,), generator=torch.Generator().manual_seed(2))
    on_cpu = network(graph, kind, aggregation)
    on_cpu.train()
    cpu_sampler = keep_everything(graph, LAYERS, "cpu", method)
    with torch.no_grad():
        for _ in range(3):  # non-trivial batch-norm running statistics, so eval mode is not the identity
            on_cpu(graph.x, graph.node_kind, cpu_sampler.full(), extras)
    on_cuda = copy.deepcopy(on_cpu).to(CUDA)
    cuda_sampler = keep_everything(graph, LAYERS, CUDA, method)
    cuda_inputs = (graph.x.to(CUDA), graph.node_kind.to(CUDA))

    for mode in ("train", "eval"):
        on_cpu.train(mode == "train")
        on_cuda.train(mode == "train")
        expected = on_cpu(graph.x, graph.node_kind, cpu_sampler.full(), extras)
        actual = on_cuda(*cuda_inputs, cuda_sampler.full(), extras.to(CUDA))
        assert actual.device.type == "cuda"
        torch.testing.assert_close(actual.cpu(), expected, rtol=1e-4, atol=1e-4, msg=mode)
        if mode == "train":
            on_cpu.zero_grad()
            on_cuda.zero_grad()
            F.cross_entropy(expected, labels).backward()
            F.cross_entropy(actual, labels.to(CUDA)).backward()
            for (name, cpu_weight), cuda_weight in zip(on_cpu.named_parameters(), on_cuda.parameters()):
                assert cuda_weight.grad is not None, name
                torch.testing.assert_close(cuda_weight.grad.cpu(), cpu_weight.grad, rtol=1e-3, atol=1e-5, msg=name)


@pytest.mark.parametrize("top_k", [None, 3])  # one GCN hop; ten APPNP steps through their top-3 rows
def test_batched_forward_on_cuda_equals_full_graph_with_every_neighbour_kept(interaction_graph, top_k):
    graph = interaction_graph
    extras = NodeExtras.from_graph(graph, NODE_KINDS.index("substructure"), GRAPH).to(CUDA)
    steps = {} if top_k is None else {"local_steps": 10, "local_teleport": 0.1, "local_top_k": top_k}
    model = network(graph, "gcn" if top_k is None else "appnp", "mean", **steps).to(CUDA)
    rows = None if top_k is None else top_k_rows(graph, 10, 0.1, top_k)
    sampler = keep_everything(graph, LAYERS, CUDA, propagation=rows)
    x, node_kind = graph.x.to(CUDA), graph.node_kind.to(CUDA)
    model.train()
    with torch.no_grad():
        for _ in range(3):
            model(x, node_kind, sampler.full(), extras)
        model.eval()
        full = model(x, node_kind, sampler.full(), extras)
        everyone = torch.arange(graph.num_nodes, device=CUDA)
        input_nodes, layers = sampler.batch(everyone)
        assert torch.equal(input_nodes, everyone) and layers[0].neighbours.device.type == "cuda"
        batched = model(x[input_nodes], node_kind[input_nodes], layers, extras.select(input_nodes))
        torch.testing.assert_close(batched, full, rtol=1e-5, atol=1e-5)
        for node in [0, 17, graph.num_nodes - 1]:  # the last is the virtual node
            input_nodes, layers = sampler.batch(torch.tensor([node], device=CUDA))
            single = model(x[input_nodes], node_kind[input_nodes], layers, extras.select(input_nodes))
            torch.testing.assert_close(single[0], full[node], rtol=1e-5, atol=1e-5)


# Deterministic training: every neighbour (sampler=full), no dropout, full-graph steps; the initial weights
# are drawn on CPU from the seed, so CPU and CUDA start from the same network.
DETERMINISTIC = ["sampler=full", "model.dropout=0", "model.input_dropout=0", "train.batch_size=null"]
EPOCHS = 6


@pytest.fixture(scope="module")
def upstream(tmp_path_factory):
    cfg, outputs, _ = run_stages(tmp_path_factory.mktemp("cuda"), DETERMINISTIC, until="export")
    return cfg, {name: outputs[name] for name in ("preprocess", "export")}


def test_full_graph_training_on_cuda_equals_training_on_cpu(upstream):
    cfg, inputs = upstream
    graph, scores = _read_inputs(cfg, inputs)
    runs = {}
    for device in (torch.device("cpu"), CUDA):
        # In float64, as test_distributed.py compares DDP's ranks: in float32 the devices' sums round
        # differently and the validation loss drifted 0.6% apart in 6 epochs (`_build_in_float64` says why).
        seed_everything(cfg["seed"])  # the same initial weights on both devices
        training = _build_in_float64(cfg, graph, scores, device)
        train_nodes = graph.train_mask.nonzero().flatten().to(device)
        eval_nodes = torch.cat([graph.val_mask.nonzero().flatten(), graph.test_mask.nonzero().flatten()]).to(device)
        losses = [training.train_epoch(train_nodes) for _ in range(EPOCHS)]
        training.model.eval()
        with torch.no_grad():
            logits = training.predict(eval_nodes).cpu()
        runs[device.type] = losses, logits, {k: v.cpu() for k, v in training.model.state_dict().items()}
    (cpu_losses, cpu_logits, cpu_state), (cuda_losses, cuda_logits, cuda_state) = runs["cpu"], runs["cuda"]
    assert cuda_losses == pytest.approx(cpu_losses, rel=1e-7)
    assert cpu_losses[-1] < cpu_losses[0]  # it trained
    torch.testing.assert_close(cuda_logits, cpu_logits, rtol=1e-6, atol=1e-6)
    for key, value in cpu_state.items():
        torch.testing.assert_close(cuda_state[key], value, rtol=1e-6, atol=1e-6, msg=key)


def test_the_train_stage_on_cuda_batched_with_a_moving_average_and_through_nccl(upstream, tmp_path):
    """The stage itself on CUDA: Algorithm 2 batches and the weights' moving average; then the same run as
    one NCCL rank started by torchrun (one GPU here: NCCL refuses two ranks on one device)."""
    cfg, inputs = upstream
    train = {**cfg["train"], "device": "cuda", "batch_size": 16, "ema_decay": 0.5}
    cfg = {**cfg, "sampler": {**cfg["sampler"], "method": "reservoir"}, "train": train}
    single_dir, ddp_dir = tmp_path / "single", tmp_path / "ddp"
    single_dir.mkdir()
    ddp_dir.mkdir()
    single = run_train(cfg, inputs, single_dir)
    distributed = {"nproc_per_node": 1, "nnodes": 1, "rdzv_endpoint": None}
    ddp = run_train({**cfg, "train": {**train, "distributed": distributed}}, inputs, ddp_dir)
    for metrics, folder in ((single, single_dir), (ddp, ddp_dir)):
        assert metrics["device"] == "cuda:0" and metrics["peak_cuda_mb"] > 0  # its GPU memory, reported
        assert 0 <= metrics["test_roc_auc"] <= 1 and metrics["best_epoch"] in range(cfg["train"]["epochs"])
        losses = [row["loss"] for row in json.loads((folder / HISTORY_FILE).read_text())]
        assert all(math.isfinite(loss) for loss in losses) and losses[0] > losses[-1], losses
        checkpoint = torch.load(folder / MODEL_FILE, map_location="cpu")
        assert all(value.device.type == "cpu" for value in checkpoint["state_dict"].values())
    assert sorted(path.name for path in ddp_dir.iterdir()) == sorted(path.name for path in single_dir.iterdir())
    on_cpu = run_train({**cfg, "train": {**train, "device": "cpu"}}, inputs, tmp_path)
    assert on_cpu["device"] == "cpu" and "peak_cuda_mb" not in on_cpu
