"""Where an epoch of graph-level training goes, part by part, beside its floor: the work it cannot avoid.

    python -m benchmarks.graph_step [--presets zinc zinc_cpu ...] [--profile-batches 24] [--rounds 3]
                                    [--repeats 3] [--full-size] [--out DIR] [--prepare-only]

For each preset (the interaction graph and scores of its preprocess, estimate and export stages, cached in
`<out>/cache` like `make bench-graphs`), in this one process and on its threads:

- **The epoch**, timed whole, as the train stage runs it: every training batch (sampling, forward,
  backward, the optimiser), then the validation and test graphs' predictions (evaluation, as on an epoch
  whose validation improves; the others predict the validation graphs alone, timed apart).
- **Its parts**, from a torch.profiler trace of its first `--profile-batches` training batches, scaled to
  the epoch's training time: dense layers (matrix products with a weight of the network), attention edge
  work (everything else the attention modules run: gathers, scatters, the edge softmax, the fused
  kernels), the local branch, norms and readout, sampling and block building (the sampler, the batch's
  nodes, edges and readout rows), the optimiser, other ops (embeddings, activations, dropout, the loss,
  copies) and time between torch ops (Python and dispatch: the epoch's wall time that no op covers). A
  backward op counts where its forward op ran (autograd's sequence numbers). Evaluation is one part,
  timed whole.
- **The floor**: the same profiled batches' dense layers as plain `torch.nn.Linear`s of the same shapes on
  the same rows, and per attention layer one `index_select` of keys and values ([n, 2D] rows at each
  attention edge) and one `index_add_` of messages ([e, D] into n rows), forward and backward for the
  training batches, forward alone for evaluation; scaled to the whole epoch by its rows (dense) and
  attention edges (gathers). Timed in the same process, median of `--repeats`.
- **Rounds**: the epoch and the floor are timed `--rounds` times, alternating (an epoch, then its floor), so
  that a slower spell of a shared machine weighs on both; the report keeps the medians, and the ratio is the
  median of the rounds' ratios, with their range.

It prints and writes (`<out>/graph_step.md`, `graph_step.json`) each preset's seconds per epoch, the parts,
the floor, ns per node-layer and per edge-layer for both, and the ratio of the epoch to its floor.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time
from collections import defaultdict
from dataclasses import dataclass, field

import torch
from torch import nn
from torch.autograd.profiler import record_function

from benchmarks.graph_level import STAGE_NAMES, preset_overrides
from benchmarks.run import cpu_model, open_benchmark_store, run_stage
from sgt_core.artifacts import atomic_path
from sgt_core.config import compose_config
from sgt_core.pipeline import STAGES, stage_keys
from sgt_core.preprocess.interaction_graph import InteractionGraph
from sgt_core.seeding import seed_everything
from sgt_core.train.graph_set_training import GraphSetTraining
from sgt_core.train.stage import _read_inputs

DEFAULT_PRESETS = ["zinc", "zinc_cpu", "cluster_cpu", "pattern_cpu", "tu_nci1", "peptides_func_cpu"]
# A tenth of the generated sets' graphs unless --full-size: an epoch's cost per graph, its parts and its floor do
# not depend on how many graphs there are, and their full 14,000 / 12,000 take many minutes to prepare.
SAMPLE_SIZES = {"pattern_cpu": ["dataset.num_graphs=1400"], "cluster_cpu": ["dataset.num_graphs=1200"]}
PARTS = ["dense layers", "attention edge work", "local branch", "norms and readout", "sampling and block building",
         "optimizer", "other ops", "between torch ops", "evaluation"]
# Region names the benchmark wraps around parts of a step (record_function); its own, never the library's.
SAMPLING, OPTIMIZER, ATTENTION, LOCAL, READOUT = ("bench.sampling", "bench.optimizer", "bench.attention",
                                                  "bench.local", "bench.readout")
REGIONS = (SAMPLING, OPTIMIZER, ATTENTION, LOCAL, READOUT)
MATMULS = ("aten::addmm", "aten::mm", "aten::bmm")
NORMS = ("aten::native_batch_norm", "aten::native_batch_norm_backward", "aten::native_layer_norm",
         "aten::native_layer_norm_backward", "aten::_batch_norm_impl_index", "aten::batch_norm")
BACKWARD = "autograd::engine::evaluate_function: "


# ---- instrumentation: regions around the parts of a step ---------------------------------------------------


class _Traced:
    """`target` with the methods `names` run inside a profiler region (the benchmark's view, not a mock:
    every call goes to `target`)."""

    def __init__(self, target: object, names: tuple[str, ...], region: str) -> None:
        self._target, self._names, self._region = target, names, region

    def __getattr__(self, name: str):
        value = getattr(self._target, name)
        return _in_region(value, self._region) if name in self._names else value


def _in_region(function, region: str):
    """`function`, run inside the profiler region `region`."""
    def traced(*args, **kwargs):
        with record_function(region):
            return function(*args, **kwargs)
    return traced


def _module_region(module: nn.Module, region: str) -> list:
    """Forward hooks that open and close a profiler region around `module`'s forward."""
    opened = []

    def enter(_module, _inputs):
        handle = record_function(region)
        handle.__enter__()
        opened.append(handle)

    def leave(_module, _inputs, _output):
        opened.pop().__exit__(None, None, None)

    return [module.register_forward_pre_hook(enter), module.register_forward_hook(leave)]


def instrument(training: GraphSetTraining) -> list:
    """Wraps the step's parts in regions; returns the hook handles (remove them to end it)."""
    training.sampler = _Traced(training.sampler, ("closed_batch", "closed_whole"), SAMPLING)
    training.batches = _Traced(training.batches, ("nodes", "rows", "in_graph_order"), SAMPLING)
    training.extras = _Traced(training.extras, ("select",), SAMPLING)
    training.optimizer.zero_grad = _in_region(training.optimizer.zero_grad, OPTIMIZER)
    training.optimizer_step = _in_region(training.optimizer_step, OPTIMIZER)
    handles = []
    for layer in training.model.layers:
        handles += _module_region(layer.attention, ATTENTION)
        if layer.local is not None:
            handles += _module_region(layer.local, LOCAL)
    for module in (training.model.readout, training.model.head):
        if module is not None:
            handles += _module_region(module, READOUT)
    return handles


# ---- the profile, by part ------------------------------------------------------------------------------------


def linear_shapes(model: nn.Module) -> set[tuple[int, int]]:
    """(out, in) of every dense layer of the network: its Linears, and each attention's keys and values
    projected as one [2D, D] matrix."""
    shapes = {(m.out_features, m.in_features) for m in model.modules() if isinstance(m, nn.Linear)}
    shapes |= {(2 * out, inp) for out, inp in shapes if out == inp}
    return shapes


def dense_rows(event, shapes: set[tuple[int, int]]) -> tuple[int, int, int] | None:
    """(rows, in, out) when `event` is a product of rows with a weight of the network, else None."""
    if event.name not in ("aten::addmm", "aten::mm") or not event.input_shapes:
        return None
    operands = [shape for shape in event.input_shapes if len(shape) == 2]
    if len(operands) < 2:
        return None
    (rows, inner), (inner_b, out) = operands[-2], operands[-1]
    if inner != inner_b or (out, inner) not in shapes:
        return None
    return rows, inner, out


def _ancestors(event):
    parent = event.cpu_parent
    while parent is not None:
        yield parent
        parent = parent.cpu_parent


def _region_of(event) -> str | None:
    """The innermost benchmark region around `event`, None outside all."""
    return next((a.name for a in _ancestors(event) if a.name in REGIONS), None)


@dataclass
class Profile:
    """Seconds per part over the profiled batches, and the census the floor replays."""

    parts: dict[str, float]
    wall: float
    dense: list[tuple[int, int, int]] = field(default_factory=list)  # (rows, in, out) per forward product
    ops: dict[str, dict[str, float]] = field(default_factory=dict)  # part -> op name -> seconds


def classify(events, wall: float, shapes: set[tuple[int, int]]) -> Profile:
    """Adds each op's self time to its part; `wall` minus every op's time is the time between torch ops.

    A backward op belongs to the region its forward op ran in: autograd's node for a forward op carries its
    sequence number, and the backward's `evaluate_function` event the same one.
    """
    region_by_sequence: dict[int, str | None] = {}
    backward_region: dict[int, str | None] = {}  # id(evaluate_function event) -> its forward's region
    for event in events:
        if event.name.startswith(BACKWARD):
            continue
        if getattr(event, "sequence_nr", -1) >= 0 and not any(a.name.startswith(BACKWARD) for a in _ancestors(event)):
            region_by_sequence.setdefault(event.sequence_nr, _region_of(event))
    parts, covered, census = defaultdict(float), 0.0, []
    ops = defaultdict(lambda: defaultdict(float))
    for event in events:
        if event.name in REGIONS:
            continue
        seconds = event.self_cpu_time_total / 1e6
        covered += seconds
        backward = next((a for a in _ancestors(event) if a.name.startswith(BACKWARD)), None)
        if event.name.startswith(BACKWARD):
            backward = event
        if backward is not None:
            key = id(backward)
            if key not in backward_region:
                backward_region[key] = region_by_sequence.get(backward.sequence_nr)
            region = backward_region[key]
        else:
            region = _region_of(event)
        dense = dense_rows(event, shapes)
        if dense is not None and backward is None and region not in (SAMPLING, OPTIMIZER):
            census.append(dense)
        if region == SAMPLING:
            part = "sampling and block building"
        elif region == OPTIMIZER:
            part = "optimizer"
        elif region == LOCAL:
            part = "local branch"
        elif region == READOUT or event.name in NORMS:
            part = "norms and readout"
        elif event.name in MATMULS and (dense is not None or backward is not None):
            part = "dense layers"
        elif region == ATTENTION:
            part = "attention edge work"
        else:
            part = "other ops"
        parts[part] += seconds
        ops[part][event.name.removeprefix(BACKWARD)] += seconds
    parts["between torch ops"] = max(0.0, wall - covered)
    return Profile(dict(parts), wall, census, {part: dict(names) for part, names in ops.items()})


# ---- the floor -------------------------------------------------------------------------------------------------


def _median_seconds(function, repeats: int) -> float:
    function()  # warm-up: allocations, the first call's dispatch
    times = []
    for _ in range(repeats):
        started = time.perf_counter()
        function()
        times.append(time.perf_counter() - started)
    return statistics.median(times)


def dense_floor(batches: list[list[tuple[int, int, int]]], repeats: int) -> tuple[float, float]:
    """(forward, forward + backward) seconds of each batch's products as plain nn.Linears, one backward pass
    per batch as a training step has."""
    layers = {(inp, out): nn.Linear(inp, out) for batch in batches for _, inp, out in batch}
    inputs = [[(torch.randn(rows, inp), layers[(inp, out)]) for rows, inp, out in batch] for batch in batches]

    def forward():
        with torch.no_grad():
            for batch in inputs:
                for x, linear in batch:
                    linear(x)

    def both():
        for batch in inputs:
            total = 0
            for x, linear in batch:
                x.requires_grad_(True)
                total = total + linear(x).sum()
            total.backward()
            for x, _ in batch:
                x.grad = None
        for linear in layers.values():
            linear.zero_grad(set_to_none=True)

    return _median_seconds(forward, repeats), _median_seconds(both, repeats)


def gather_floor(batches: list[list[tuple[int, int]]], width: int, repeats: int,
                 seed: int = 0) -> tuple[float, float]:
    """(forward, forward + backward) seconds of one index_select of keys and values ([n, 2D] at each edge's
    source) and one index_add_ of messages ([e, D] into the destinations) per (n, e) attention layer of each
    batch, one backward pass per batch."""
    generator = torch.Generator().manual_seed(seed)
    prepared = []
    for batch in batches:
        layers = []
        for rows, count in batch:
            source = torch.randint(rows, (count,), generator=generator)
            destination = torch.sort(torch.randint(rows, (count,), generator=generator)).values
            layers.append((torch.randn(rows, 2 * width), torch.randn(count, width), source, destination, rows))
        prepared.append(layers)

    def run(backward: bool):
        for layers in prepared:
            total = 0
            for key_value, message, source, destination, rows in layers:
                key_value.requires_grad_(backward)
                message.requires_grad_(backward)
                gathered = key_value.index_select(0, source)  # [e, 2D]
                out = torch.zeros(rows, width).index_add_(0, destination, message)  # [n, D]
                total = total + gathered.sum() + out.sum()
            if backward:
                total.backward()
                for key_value, message, *_ in layers:
                    key_value.grad = message.grad = None

    def forward():
        with torch.no_grad():
            run(False)

    return _median_seconds(forward, repeats), _median_seconds(lambda: run(True), repeats)


# ---- one preset ------------------------------------------------------------------------------------------------


def attention_edges(training: GraphSetTraining, nodes: torch.Tensor) -> list[int]:
    """Real attention edges per layer into `nodes`: min(in-degree, degree), or every edge with sampler=full."""
    ptr = training.sampler.ptr
    in_degree = (ptr[nodes + 1] - ptr[nodes]).long()
    if training.sampler.method == "full":
        return [int(in_degree.sum())] * len(training.sampler.degrees)
    return [int(in_degree.clamp(max=degree).sum()) for degree in training.sampler.degrees]


def prepare(store, preset: str, seed: int, full_size: bool = False) -> tuple[dict, InteractionGraph, torch.Tensor]:
    """The preset's config and what its train stage reads: the interaction graph and the scores (their stages
    run, or found in the cache); the generated sets at a tenth of their graphs unless `full_size`."""
    sizes = [] if full_size else SAMPLE_SIZES.get(preset, [])
    cfg = compose_config([*preset_overrides(preset, seed), *sizes, f"seed={seed}", "train.device=cpu"])
    keys = stage_keys(cfg)
    for name, stage in zip(STAGE_NAMES[:-1], STAGES[:-1], strict=True):
        run_stage(store, stage, cfg, keys)
    inputs = {name: store.path(name, keys[name]) for name in STAGE_NAMES[:-1]}
    return cfg, *_read_inputs(cfg, inputs)


def new_training(cfg: dict, graph: InteractionGraph, layer_scores: torch.Tensor) -> GraphSetTraining:
    """The train stage's training on the CPU, seeded as the stage seeds it: its first epoch's batches alike."""
    seed_everything(cfg["seed"])
    return GraphSetTraining.build(cfg, graph, layer_scores, torch.device("cpu"))


def epoch_seconds(training: GraphSetTraining, units: dict) -> tuple[float, float, float]:
    """(training, validation, test) wall seconds of one epoch, as the train stage runs it on an epoch whose
    validation improves (the test split is predicted only then)."""
    started = time.perf_counter()
    training.train_epoch(units["train"][0])
    trained = time.perf_counter()
    network = training.evaluated
    network.eval()
    validated = []
    with torch.no_grad():
        training.evaluate({"val": units["val"], "test": units["test"]}, network,
                          lambda _: validated.append(time.perf_counter()) or True)
    return trained - started, validated[0] - trained, time.perf_counter() - validated[0]


def profile_batches(training: GraphSetTraining, batches: list[torch.Tensor]) -> Profile:
    """The profiled training steps over `batches`, by part."""
    handles = instrument(training)
    training.model.train()
    try:
        with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU], record_shapes=True) as trace:
            started = time.perf_counter()
            for batch in batches:
                training._step(batch)
            wall = time.perf_counter() - started
    finally:
        for handle in handles:
            handle.remove()
    return classify(trace.events(), wall, linear_shapes(training.model))


def measure(store, preset: str, seed: int, profile_count: int, repeats: int, rounds: int,
            full_size: bool = False) -> dict:
    """One preset's row: its parts, then `rounds` rounds of an epoch beside its floor (alternating, so that a
    slower spell of a shared machine weighs on both), their medians and the median of the rounds' ratios."""
    cfg, graph, layer_scores = prepare(store, preset, seed, full_size)
    training = new_training(cfg, graph, layer_scores)
    masks = {split: getattr(graph, f"{split}_mask") for split in ("train", "val", "test")}
    units = {split: (training.units(mask), mask) for split, mask in masks.items()}
    train_graphs = units["train"][0]
    eval_graphs = torch.cat([units["val"][0], units["test"][0]])
    training.train_epoch(train_graphs[: 2 * (training.batch_size or 1)])  # warm-up, not timed

    # The profile: a fresh training of the same config, so its batches are the epoch's first ones.
    profiled_training = new_training(cfg, graph, layer_scores)
    all_batches = profiled_training.epoch_batches(train_graphs)
    profiled = all_batches[:profile_count]
    profile = profile_batches(profiled_training, profiled)

    # The floor's work: the profiled batches' products and attention edges, scaled to the epoch's rows and edges.
    batches_nodes = [training.batches.nodes(batch) for batch in profiled]
    width = cfg["model"]["hidden"]
    edges_per_batch = [[(nodes.numel(), e) for e in attention_edges(training, nodes)] for nodes in batches_nodes]
    per_batch = len(profile.dense) // len(profiled)  # every step runs the same products, in the same order
    products = [profile.dense[i * per_batch:(i + 1) * per_batch] for i in range(len(profiled))]
    profiled_edges = [layer for batch in edges_per_batch for layer in batch]
    train_nodes = training.batches.in_graph_order(train_graphs)
    eval_nodes = training.batches.in_graph_order(eval_graphs)
    profiled_rows = sum(nodes.numel() for nodes in batches_nodes)
    profiled_edge_count = sum(e for _, e in profiled_edges)
    train_edges = sum(attention_edges(training, train_nodes))  # a count per node: their order does not matter
    eval_edges = sum(attention_edges(training, eval_nodes))

    def floor_seconds() -> tuple[float, float, float]:
        """(training, evaluation, dense share) of the floor: dense work scaled by rows, gathers by attention edges."""
        dense_forward, dense_both = dense_floor(products, repeats)
        gather_forward, gather_both = gather_floor(edges_per_batch, width, repeats)
        dense_train, dense_eval = (dense_both * train_nodes.numel() / profiled_rows,
                                   dense_forward * eval_nodes.numel() / profiled_rows)
        gather_train, gather_eval = (gather_both * train_edges / profiled_edge_count,
                                     gather_forward * eval_edges / profiled_edge_count)
        dense = dense_train + dense_eval
        return dense_train + gather_train, dense_eval + gather_eval, dense / (dense + gather_train + gather_eval)

    timed = []  # per round: (train s, eval s, floor train s, floor eval s, the floor's dense share, val s)
    for _ in range(rounds):
        train, val, test = epoch_seconds(training, units)
        timed.append((train, val + test, *floor_seconds(), val))
    train_s, eval_s, floor_train, floor_eval, dense_share, val_s = (statistics.median(column) for column in zip(*timed))
    round_ratios = [(train + evaluation) / (f_train + f_eval) for train, evaluation, f_train, f_eval, *_ in timed]

    share = train_s / profile.wall  # the profiled batches -> the epoch's training time
    parts = {part: seconds * share for part, seconds in profile.parts.items()}
    parts["evaluation"] = eval_s
    heaviest = {part: {name: seconds * share for name, seconds in sorted(names.items(), key=lambda item: -item[1])[:6]}
                for part, names in profile.ops.items()}
    layers = len(training.sampler.degrees)
    epoch = train_s + eval_s
    floor = floor_train + floor_eval
    node_layers = (train_nodes.numel() + eval_nodes.numel()) * layers
    edge_layers = train_edges + eval_edges
    return {
        "preset": preset, "seed": seed, "threads": torch.get_num_threads(), "graphs": graph.num_graphs,
        "network": f"{layers} x {width}", "sampler": cfg["sampler"]["method"], "batch_size": training.batch_size,
        "batches": len(all_batches), "profiled_batches": len(profiled),
        "train_nodes": train_nodes.numel(), "eval_nodes": eval_nodes.numel(),
        "attention_edge_layers": edge_layers,
        "epoch_s": epoch, "train_s": train_s, "eval_s": eval_s, "parts_s": parts, "heaviest_ops_s": heaviest,
        "floor_s": floor, "floor_train_s": floor_train, "floor_eval_s": floor_eval,
        "floor_dense_share": dense_share,
        "eval_val_s": val_s,
        "rounds_s": [{"train": t, "eval": e, "floor_train": ft, "floor_eval": fe, "val": v}
                     for t, e, ft, fe, _, v in timed],
        "ns_per_node_layer": 1e9 * epoch / node_layers, "floor_ns_per_node_layer": 1e9 * floor / node_layers,
        "ns_per_edge_layer": 1e9 * epoch / edge_layers, "floor_ns_per_edge_layer": 1e9 * floor / edge_layers,
        "ratio": statistics.median(round_ratios), "round_ratios": round_ratios,
        "eval_share": statistics.median(e / (t + e) for t, e, *_ in timed),
        "eval_share_not_improving": statistics.median(v / (t + v) for t, _, _, _, _, v in timed),
        "load_average": round(os.getloadavg()[0], 1),
    }


# ---- report --------------------------------------------------------------------------------------------------


def ratio_range(row: dict) -> str:
    """The rounds' lowest and highest ratio, or '-' for a row from before rounds."""
    ratios = row.get("round_ratios") or []
    return f"{min(ratios):.2f}-{max(ratios):.2f}, n={len(ratios)}" if ratios else "-"


def not_improving(row: dict) -> str:
    """Evaluation's seconds and share on an epoch whose validation does not improve, or '-' for an older row."""
    if "eval_val_s" not in row:
        return "-"
    return f"{row['eval_val_s']:.2f} ({100 * row['eval_share_not_improving']:.0f}%)"


def report(rows: list[dict]) -> str:
    lines = ["# Graph-level training: an epoch by part, beside its floor", "",
             (f"Machine: {cpu_model()}, {os.cpu_count()} logical CPUs, torch {torch.__version__}, "
             f"{rows[0]['threads'] if rows else '?'} threads. `python -m benchmarks.graph_step` "
             "(benchmarks/graph_step.py says how each part and the floor are measured)."), "",
             ("The epoch is one whose validation improves, so the test split is predicted too; on the others "
              "evaluation is the validation split alone (last column)."), "",
             ("| preset | network | sampler | graphs | batches | s/epoch | train s | eval s (share) | floor s | "
              "ratio (rounds) | ns/node-layer (floor) | ns/edge-layer (floor) | validation alone s (share) |"),
             "|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for row in rows:
        lines.append(
            f"| {row['preset']} | {row['network']} | {row['sampler']} | {row.get('graphs', '-')} | {row['batches']} | "
            f"{row['epoch_s']:.2f} | "
            f"{row['train_s']:.2f} | {row['eval_s']:.2f} ({100 * row['eval_share']:.0f}%) | {row['floor_s']:.2f} | "
            f"{row['ratio']:.2f}x ({ratio_range(row)}) | {row['ns_per_node_layer']:.0f} ({row['floor_ns_per_node_layer']:.0f}) | "
            f"{row['ns_per_edge_layer']:.0f} ({row['floor_ns_per_edge_layer']:.0f}) | {not_improving(row)} |")
    lines += ["", ("Seconds per epoch by part (training parts from the profiled batches, scaled to the epoch's "
              "training time; evaluation timed whole):"), "",
              "| preset | " + " | ".join(PARTS) + " |", "|---|" + "---|" * len(PARTS)]
    for row in rows:
        parts = row["parts_s"]
        cells = [f"{parts.get(part, 0.0):.2f} ({100 * parts.get(part, 0.0) / row['epoch_s']:.0f}%)" for part in PARTS]
        lines.append(f"| {row['preset']} | " + " | ".join(cells) + " |")
    lines += ["", ("The heaviest ops of each part (seconds per epoch; a backward op under its forward's name's "
              "backward node):"), ""]
    for row in rows:
        lines.append(f"- {row['preset']}:")
        for part, names in row["heaviest_ops_s"].items():
            lines.append(f"  - {part}: " + ", ".join(f"{name} {seconds:.2f}" for name, seconds in names.items()))
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--presets", nargs="+", default=DEFAULT_PRESETS)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--profile-batches", type=int, default=24, help="training batches the profiler traces")
    # the floor over the profiled batches takes seconds; on a shared machine one timing of it moves by tens
    # of percent, so it is timed several times
    parser.add_argument("--repeats", type=int, default=3, help="timings of the floor per round, their median kept")
    parser.add_argument("--rounds", type=int, default=3,
                        help="rounds of an epoch then its floor; the report keeps their medians")
    parser.add_argument("--full-size", action="store_true",
                        help="PATTERN's and CLUSTER's presets at their full size (default: a tenth of their graphs)")
    parser.add_argument("--out", default="artifacts/bench")
    parser.add_argument("--prepare-only", action="store_true",
                        help="run (or find cached) each preset's preprocess, estimate and export stages, time nothing")
    args = parser.parse_args(argv)
    folder, store = open_benchmark_store(args.out, "the graph-level step benchmark")
    if args.prepare_only:
        for preset in args.presets:
            prepare(store, preset, args.seed, args.full_size)  # runs the stages; what it reads back is dropped
            print(f"{preset}: stages ready in {store.location()}", flush=True)
        return
    rows = []
    for preset in args.presets:
        rows.append(measure(store, preset, args.seed, args.profile_batches, args.repeats, args.rounds, args.full_size))
        print(report(rows[-1:]), flush=True)
        # after every preset, so that a long run stopped early keeps the presets it measured
        with atomic_path(folder / "graph_step.json") as path:
            path.write_text(json.dumps(rows, indent=1))
        with atomic_path(folder / "graph_step.md") as path:
            path.write_text(report(rows))
    print(report(rows))


if __name__ == "__main__":
    main()
