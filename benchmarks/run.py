"""The benchmark suite (`make bench`): accuracy over seeds, stage time and memory, edge share, sampler speed.

    python -m benchmarks.run [--datasets minesweeper tolokers ...] [--variants ...] [--seeds 5]

Each stage runs in a fresh process (benchmarks/stage_process.py) so its peak resident memory is its own.
Stage outputs are cached under `<out>/cache/<stage>/<key>/`, the same layout and keys as `sgt run`, so
variants that change only training share one estimator per seed, a re-run resumes where it stopped,
and `sgt run paths.artifacts=<out>/cache` is fully cached: its wall time is the orchestration overhead.
Results go to `<out>/results.md` and `<out>/results.csv` (one row per run).
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import torch

from sgt_core.artifacts import ArtifactStore, atomic_path
from sgt_core.config import compose_config
from sgt_core.export.outputs import SCORES_DIR
from sgt_core.export.scores import read_attention_scores
from sgt_core.kernels import cpu_kernels
from sgt_core.pipeline import STAGES, stage_environment, stage_keys
from sgt_core.preprocess.interaction_graph import InteractionGraph
from sgt_core.preprocess.outputs import INTERACTION_GRAPH_FILE
from sgt_core.sampling import sample_neighbours
from sgt_core.train.device import resolve_device

REPO = Path(__file__).resolve().parents[1]
SHARED = REPO.parent / "shared" / "datasets"

DATASETS = {
    "minesweeper": ["+experiment=minesweeper", f"dataset.path={SHARED / 'minesweeper.npz'}"],
    "tolokers": ["+experiment=tolokers", f"dataset.path={SHARED / 'tolokers.npz'}"],
    "cora": ["+experiment=cora", f"dataset.path={SHARED / 'cora.npz'}"],
    "citeseer": ["+experiment=citeseer", f"dataset.path={SHARED / 'citeseer.npz'}"],
    "long_range": ["+experiment=long_range"],
}
# The hybrid variants replace the dataset's preset by its `<dataset>_hybrid` one (a local MPNN branch in every
# layer, GraphGPS's layout); `defaults` by none at all: what `sgt run dataset=npz dataset.path=FILE` gives.
PRESET_VARIANTS = {
    "hybrid": lambda dataset: [f"+experiment={dataset}_hybrid", *DATASETS[dataset][1:]],
    # the hybrid without the estimator's scores: do they still help once a local branch is there?
    "hybrid_uniform": lambda dataset: [f"+experiment={dataset}_hybrid", *DATASETS[dataset][1:], "sampler=uniform"],
    "defaults": lambda dataset: ["dataset=npz", *DATASETS[dataset][1:]],
}
VARIANTS = {
    "spexphormer": [],
    "uniform": ["sampler=uniform"],
    "topk": ["sampler=topk"],
    "no_temperature": ["estimator.temperature.anneal=false"],
    "no_layer_norm": ["estimator.layer_norm=false"],
    # the paper's estimator, with layer norm (the Minesweeper and Tolokers presets leave it out)
    "layer_norm": ["estimator.layer_norm=true"],
    "exphormer": ["sampler=full"],
    # Algorithm 2's neighbourhood batches (the paper's Figure 5: memory and time per epoch against batch size)
    "batch_2000": ["train.batch_size=2000"],
    "batch_1000": ["train.batch_size=1000"],
    "batch_250": ["train.batch_size=250"],
    # The wide network on DDP (torchrun, gloo on the CPU): the same global batch on 1 and on 2 processes
    "ddp_1": ["train.batch_size=1000", "train.distributed.nproc_per_node=1"],
    "ddp_2": ["train.batch_size=1000", "train.distributed.nproc_per_node=2"],
    "graph_only": ["preprocess.expander.enabled=false"],
    # interaction-graph components of AnchorGT, DeepGraph and SAN, on top of the preset
    "anchors": ["preprocess.anchors.enabled=true", "preprocess.anchors.max_anchors_per_node=4"],
    "substructures": ["preprocess.substructures.enabled=true"],
    "lpe": ["preprocess.lpe.enabled=true"],
    "all_components": ["preprocess.anchors.enabled=true", "preprocess.anchors.max_anchors_per_node=4",
                       "preprocess.substructures.enabled=true", "preprocess.lpe.enabled=true",
                       "preprocess.virtual_nodes=1"],
}
# Spexphormer's Table 2 / Table 4 (ROC-AUC x 100) for the rows we can compare with.
PAPER = {
    ("minesweeper", "spexphormer"): "90.71 ± 0.17", ("tolokers", "spexphormer"): "83.34 ± 0.31",
    ("minesweeper", "uniform"): "84.15 ± 0.22", ("tolokers", "uniform"): "82.56 ± 0.17",
    ("minesweeper", "topk"): "87.92 ± 0.26", ("tolokers", "topk"): "80.85 ± 0.23",
    ("minesweeper", "no_temperature"): "90.02 ± 0.02", ("tolokers", "no_temperature"): "83.34 ± 0.13",
    ("minesweeper", "no_layer_norm"): "89.65 ± 0.10", ("tolokers", "no_layer_norm"): "84.06 ± 0.10",
    # the paper's Spexphormer has the layer norm
    ("minesweeper", "layer_norm"): "90.71 ± 0.17", ("tolokers", "layer_norm"): "83.34 ± 0.31",
    ("minesweeper", "exphormer"): "92.26 ± 0.56", ("tolokers", "exphormer"): "83.53 ± 0.28",
}
# Issue targets for estimate + train on 2 cores: (seconds, MB)
TARGETS = {"minesweeper": (50, 430), "tolokers": (200, 620)}
RANK_MODULE = "sgt_core.train.distributed"  # what torchrun's ranks run (its agent names it too, after its own)


class MemoryLimitExceeded(RuntimeError):
    """A benchmark process passed its resident-memory limit and was killed: the breaking point, recorded."""

    def __init__(self, command: str, peak_mb: float, limit_mb: float) -> None:
        super().__init__(f"{command}: killed at {peak_mb:.0f} MB resident, over the {limit_mb:.0f} MB limit")
        self.peak_mb = peak_mb


class TimeLimitExceeded(RuntimeError):
    """A benchmark process ran past its time limit and was stopped: recorded, not waited for."""

    def __init__(self, command: str, seconds: float, peak_mb: float) -> None:
        super().__init__(f"{command}: stopped after {seconds:.0f} s (peak {peak_mb:.0f} MB so far)")
        self.seconds, self.peak_mb = seconds, peak_mb


def _watch_ranks(process, peaks: dict[int, float]) -> None:
    """Updates `peaks` (pid -> MB) with the high-water mark (VmHWM) of each live DDP rank below `process`.

    A rank is a torchrun worker running RANK_MODULE; read every 0.1 s while it lives, so a peak in its
    last 0.1 s (rank 0 writing the checkpoint) could be missed.
    """
    import psutil

    try:
        children = process.children(recursive=True)
    except psutil.NoSuchProcess:
        return
    for child in children:
        try:
            command = child.cmdline()
            if RANK_MODULE in command and "torch.distributed.run" not in command:
                for line in Path(f"/proc/{child.pid}/status").read_text().splitlines():
                    if line.startswith("VmHWM:"):
                        peaks[child.pid] = max(peaks.get(child.pid, 0.0), int(line.split()[1]) / 1024)
        except (psutil.Error, OSError):
            continue


def run_in_process(module: str, first_argument: str | None, cfg: dict, *arguments: str,
                   memory_limit_mb: float | None = None, time_limit_s: float | None = None,
                   environment: dict[str, str] | None = None) -> dict:
    """Runs `python -m module [first_argument] CONFIG.json *arguments` in a fresh process; its last line, as JSON.

    The process starts with this one's environment plus `environment` (e.g. the stage's, `stage_environment`).

    The peaks of the DDP ranks it starts (the train stage on several processes) are added to that JSON
    as `rank_peaks_mb`, in order of their process ids.

    With `memory_limit_mb`, a watchdog samples the process's resident memory every 0.1 s and kills it
    past the limit (raising MemoryLimitExceeded), so that a benchmark that outgrows the machine records
    where it broke instead of taking the machine down (it has no swap). With `time_limit_s`, a process
    still running then is stopped (raising TimeLimitExceeded).
    """
    import psutil

    command = f"{module} {first_argument or ''}".strip()
    with tempfile.NamedTemporaryFile("w", suffix=".json") as handle, \
            tempfile.TemporaryFile("w+") as stdout, tempfile.TemporaryFile("w+") as stderr:
        json.dump(cfg, handle)
        handle.flush()
        process = subprocess.Popen(
            [sys.executable, "-m", module, *([first_argument] if first_argument else []), handle.name, *arguments],
            stdout=stdout, stderr=stderr, text=True, cwd=REPO, env={**os.environ, **(environment or {})},
        )
        watched, peak_mb, started = psutil.Process(process.pid), 0.0, time.monotonic()
        rank_peaks: dict[int, float] = {}
        while process.poll() is None:
            if time_limit_s is not None and time.monotonic() - started > time_limit_s:
                process.kill()
                process.wait()
                raise TimeLimitExceeded(command, time.monotonic() - started, peak_mb)
            try:
                peak_mb = max(peak_mb, watched.memory_info().rss / 2**20)
            except psutil.NoSuchProcess:
                break
            if memory_limit_mb is not None and peak_mb > memory_limit_mb:
                process.kill()
                process.wait()
                raise MemoryLimitExceeded(command, peak_mb, memory_limit_mb)
            if cfg.get("train", {}).get("distributed", {}).get("nproc_per_node", 1) > 1:
                _watch_ranks(watched, rank_peaks)
            time.sleep(0.1)
        process.wait()
        stdout.seek(0), stderr.seek(0)
        output, errors = stdout.read(), stderr.read()
    if process.returncode:
        raise RuntimeError(f"{command} failed:\n{errors[-3000:]}")
    result = json.loads(output.strip().splitlines()[-1])
    if rank_peaks:
        result["rank_peaks_mb"] = [rank_peaks[pid] for pid in sorted(rank_peaks)]
    return result


def run_stage(store: ArtifactStore, stage, cfg: dict, keys: dict, memory_limit_mb: float | None = None,
              time_limit_s: float | None = None) -> dict:
    """Runs one stage in a fresh process unless cached; returns its metrics and measurements."""
    key = keys[stage.name]
    if store.is_complete(stage.name, key):
        return json.loads((store.path(stage.name, key) / "bench.json").read_text())
    # What a stage keeps beside its own folder (the train stage's top-k propagation rows) goes to this
    # benchmark's store too, not to the default artifacts folder where another --out would find it.
    cfg = {**cfg, "paths": {**cfg["paths"], "artifacts": store.location()}}
    with store.writing(stage.name, key) as staging:
        upstream = [f"{name}={store.path(name, keys[name])}" for name in stage.upstream]
        result = run_in_process("benchmarks.stage_process", stage.name, cfg, str(staging), *upstream,
                                memory_limit_mb=memory_limit_mb, time_limit_s=time_limit_s,
                                environment=stage_environment(stage, cfg))
        (staging / "bench.json").write_text(json.dumps(result))
        store.finish(staging, result["metrics"], {"stage": stage.name, "key": key, "benchmark": True})
    return result


def edge_percent(graph: InteractionGraph, degrees: list[int], sampler: str) -> float:
    """Attention edges kept per layer as a share of the interaction graph's edges (the paper's Avg. Edge Percent)."""
    if sampler == "full":
        return 100.0
    in_degree = graph.ptr.diff()
    kept = [int(torch.clamp(in_degree, max=degree).sum()) for degree in degrees]
    return 100.0 * sum(kept) / (len(degrees) * graph.num_edges)


def variant_overrides(dataset: str, variant: str) -> list[str]:
    """The overrides of one benchmark row: the dataset's preset and the variant's changes to it."""
    if variant in PRESET_VARIANTS:
        return PRESET_VARIANTS[variant](dataset)
    return [*DATASETS[dataset], *VARIANTS[variant]]


def run_one(store: ArtifactStore, dataset: str, variant: str, seed: int) -> dict:
    cfg = compose_config([*variant_overrides(dataset, variant), f"seed={seed}"])
    keys = stage_keys(cfg)
    results = {stage.name: run_stage(store, stage, cfg, keys) for stage in STAGES}
    graph = InteractionGraph.load(store.path("preprocess", keys["preprocess"]) / INTERACTION_GRAPH_FILE)
    metric = graph.metric
    train = results["train"]["metrics"]
    # With DDP the train stage's own process only launches torchrun: its peak is the largest rank's.
    rank_peaks = results["train"].get("rank_peaks_mb") or [results["train"]["peak_rss_mb"]]
    return {
        "dataset": dataset, "variant": variant, "seed": seed, "metric": metric,
        "test": train[f"test_{metric}"], "val": train[f"val_{metric}"], "test_accuracy": train.get("test_accuracy"),
        "estimate_s": results["estimate"]["seconds"], "train_s": results["train"]["seconds"],
        "train_s_per_epoch": train["seconds_per_epoch"],
        **{f"{name}_peak_mb": results[name]["peak_rss_mb"] for name in results},
        "train_peak_mb": max(rank_peaks),
        "processes": cfg["train"]["distributed"]["nproc_per_node"] * cfg["train"]["distributed"]["nnodes"],
        "train_rank_peaks_mb": " / ".join(f"{peak:.0f}" for peak in rank_peaks),
        "edge_percent": edge_percent(graph, cfg["model"]["degrees"], cfg["sampler"]["method"]),
        "interaction_edges": graph.num_edges,
    }


def sampler_throughput(store: ArtifactStore, seed: int = 0) -> dict:
    """Edges sampled per second: our vectorised reservoir sampler against a per-node numpy loop."""
    cfg = compose_config([*DATASETS["minesweeper"], f"seed={seed}"])
    keys = stage_keys(cfg)
    graph = InteractionGraph.load(store.path("preprocess", keys["preprocess"]) / INTERACTION_GRAPH_FILE)
    scores = read_attention_scores(store.path("export", keys["export"]) / SCORES_DIR, graph.edge_index)[0]
    degree, ptr = cfg["model"]["degrees"][0], graph.ptr
    generator = torch.Generator().manual_seed(0)
    sample_neighbours(ptr, scores, degree, generator=generator)  # warm-up
    repeats, started = 20, time.perf_counter()
    for _ in range(repeats):
        _edges, mask = sample_neighbours(ptr, scores, degree, generator=generator)
    ours = repeats * int(mask.sum()) / (time.perf_counter() - started)

    rng, ptr_np, scores_np = np.random.default_rng(0), ptr.numpy(), scores.double().numpy()
    started, drawn = time.perf_counter(), 0
    for node in range(graph.num_nodes):  # the baseline is deliberately the per-node loop
        weights = scores_np[ptr_np[node]:ptr_np[node + 1]]
        size = min(degree, weights.size)
        drawn += rng.choice(weights.size, size=size, replace=False, p=weights / weights.sum()).size
    loop = drawn / (time.perf_counter() - started)
    return {"reservoir_edges_per_s": ours, "numpy_loop_edges_per_s": loop, "speedup": ours / loop,
            "nodes": graph.num_nodes, "degree": degree}


def orchestration_overhead(store: ArtifactStore, seed: int = 0) -> dict:
    """What `sgt run` costs beyond the stages' own work (Prefect, MLflow, imports, processes, plots).

    Three runs of the Minesweeper preset on the benchmark cache: a fully cached one on a new MLflow sqlite
    store (its schema migrations are a one-time cost), the same again (what every later cached run pays),
    and one forced to compute every stage (`stage=preprocess`), whose overhead is its wall time less the
    stages' own (`stage_seconds` of its four MLflow child runs, from start to metrics, process included).
    The target is under 10 s for both kinds of run.
    """
    from mlflow.tracking import MlflowClient

    def run(mlflow_dir: str, *extra: str) -> tuple[float, int, bool]:
        started = time.perf_counter()
        completed = subprocess.run(
            [sys.executable, "-m", "flows.cli", "run", *DATASETS["minesweeper"], f"seed={seed}", *extra,
             f"paths.artifacts={store.root}", f"mlflow.tracking_uri=sqlite:///{mlflow_dir}/mlflow.db"],
            capture_output=True, text=True, cwd=REPO, check=False,
        )
        return time.perf_counter() - started, completed.stdout.count(" cached "), completed.returncode == 0

    with tempfile.TemporaryDirectory() as mlflow_dir:
        first_seconds, _, first_ok = run(mlflow_dir)
        seconds, cached, ok = run(mlflow_dir)
        forced_seconds, _, forced_ok = run(mlflow_dir, "stage=preprocess")
        client = MlflowClient(f"sqlite:///{mlflow_dir}/mlflow.db")
        experiments = [experiment.experiment_id for experiment in client.search_experiments()]
        newest = client.search_runs(experiments, "tags.`sgt.stage` != 'pipeline'",
                                    order_by=["attributes.start_time DESC"], max_results=len(STAGES))
        stage_seconds = sum(child.data.metrics.get("stage_seconds", 0.0) for child in newest)
    return {"seconds_new_mlflow_store": first_seconds, "seconds": seconds, "stages_cached": cached,
            "forced_run_seconds": forced_seconds, "forced_run_stage_seconds": stage_seconds,
            "forced_run_overhead_seconds": forced_seconds - stage_seconds,
            "ok": first_ok and ok and forced_ok}


def epoch_memory(store: ArtifactStore, dataset: str, batch_sizes: list[int | None], seed: int = 0) -> list[dict]:
    """Memory and time of training epochs alone per batch size (benchmarks/step_memory.py), on cached scores."""
    cfg = compose_config([*DATASETS[dataset], f"seed={seed}"])
    keys = stage_keys(cfg)  # the batch size is a train option: every batch size shares these upstream stages
    for stage in STAGES:
        if stage.name != "train":
            run_stage(store, stage, cfg, keys)
    upstream = [str(store.path(name, keys[name])) for name in ("preprocess", "export")]
    # Every block of 64 KiB or more gets its own mapping, returned to the system when freed: the resident
    # set then follows live tensors instead of what a fragmented heap happens to keep.
    environment = {"MALLOC_MMAP_THRESHOLD_": str(64 * 1024)}
    return [{"dataset": dataset, **run_in_process("benchmarks.step_memory", None,
                                                  {**cfg, "train": {**cfg["train"], "batch_size": batch_size}},
                                                  *upstream, environment=environment)}
            for batch_size in batch_sizes]


def gcn_baseline(dataset: str, seeds: list[int]) -> list[float]:
    from benchmarks.gcn import train_gcn

    return [train_gcn(compose_config([*DATASETS[dataset], f"seed={seed}"])) for seed in seeds]


def read_rows(path: Path, text_columns: set[str]) -> list[dict]:
    """The rows of a results CSV, numbers parsed back (int, float, or None for an empty cell)."""
    def parse(key: str, value: str):
        if key in text_columns:
            return value
        if value in ("", "None"):
            return None
        try:
            return int(value)
        except ValueError:
            return float(value)

    with open(path, newline="") as handle:
        return [{key: parse(key, value) for key, value in row.items()} for row in csv.DictReader(handle)]


def previous_rows(path: Path) -> list[dict]:
    """The rows of an earlier results.csv (none if absent or of another layout)."""
    rows = read_rows(path, {"dataset", "variant", "metric", "train_rank_peaks_mb"}) if path.is_file() else []
    return rows if rows and "export_peak_mb" in rows[0] else []


def mean_std(values: list[float], scale: float = 1.0, digits: int = 2) -> str:
    values = [v * scale for v in values if v is not None]
    if not values:
        return "-"
    spread = statistics.stdev(values) if len(values) > 1 else 0.0
    return f"{statistics.mean(values):.{digits}f} ± {spread:.{digits}f}"


def cpu_model() -> str:
    """The CPU's model name and family (timings depend on it: the same code ran ~1.5x slower on Zen 1 than Zen 3)."""
    try:
        fields = dict(line.split(":", 1) for line in Path("/proc/cpuinfo").read_text().splitlines() if ":" in line)
    except OSError:
        return "unknown CPU"
    fields = {key.strip(): value.strip() for key, value in fields.items()}
    # Virtual machines often show a bare "AMD EPYC"; the family and model numbers still tell the generation.
    return f"{fields.get('model name', 'unknown CPU')}, family {fields.get('cpu family', '?')} model {fields.get('model', '?')}"


def gpu_model() -> str | None:
    """The GPU the train stage runs on at `train.device=auto` (the stage's own rule), or None."""
    device = resolve_device("auto")
    return torch.cuda.get_device_name(device) if device.type == "cuda" else None


def write_report(out: Path, rows: list[dict], extras: dict) -> None:
    columns = list(dict.fromkeys(key for row in rows for key in row))  # rows of an older layout lack some
    # a reader never sees half a table
    with atomic_path(out / "results.csv") as partial_csv, open(partial_csv, "w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=columns, restval="")
        writer.writeheader()
        writer.writerows(rows)
    lines = ["# Benchmark results", "",
             (f"Machine: {os.cpu_count()} CPU cores ({cpu_model()}), torch {torch.__version__}, "
              f"{torch.get_num_threads()} threads, compiled CPU kernels {'on' if cpu_kernels() else 'off'}. "
              "Times are wall seconds of the stage function; memory is each stage process's own peak RSS "
              "(VmHWM; interpreter, torch and pyarrow, ~245 MB, included)."), "",
             ("| dataset | variant | seeds | test metric (×100) | paper | estimate s | train s | train s/epoch | "
              "preprocess MB | estimate MB | export MB | train MB | edge % |"),
             "|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    groups: dict[tuple, list[dict]] = {}
    for row in rows:
        groups.setdefault((row["dataset"], row["variant"]), []).append(row)
    for (dataset, variant), group in groups.items():
        metric = group[0]["metric"]
        lines.append(
            f"| {dataset} | {variant} | {len(group)} | {metric} {mean_std([r['test'] for r in group], 100)} | "
            f"{PAPER.get((dataset, variant), '-')} | {statistics.mean(r['estimate_s'] for r in group):.1f} | "
            f"{statistics.mean(r['train_s'] for r in group):.1f} | "
            f"{statistics.mean(r['train_s_per_epoch'] for r in group):.3f} | "
            + " | ".join(f"{max(r[f'{stage}_peak_mb'] for r in group):.0f}"
                         for stage in ("preprocess", "estimate", "export", "train"))
            + f" | {group[0]['edge_percent']:.1f} |"
        )
    lines += ["", "## Speed and memory targets (estimate + train, Spexphormer variant)", "",
              "| dataset | estimate + train s | target s | peak MB | target MB |", "|---|---|---|---|---|"]
    for dataset, (seconds, megabytes) in TARGETS.items():
        group = groups.get((dataset, "spexphormer"))
        if group:
            wall = statistics.mean(r["estimate_s"] + r["train_s"] for r in group)
            peak = max(max(r["estimate_peak_mb"], r["train_peak_mb"]) for r in group)
            lines.append(f"| {dataset} | {wall:.1f} | {seconds} | {peak:.0f} | {megabytes} |")
    lines += ["", "## Neighbourhood batching (the paper's Figure 5): train-stage memory and time per epoch", "",
              "| dataset | train.batch_size | train MB | train s/epoch | test metric (×100) |", "|---|---|---|---|---|"]
    for (dataset, variant), group in groups.items():
        if variant == "spexphormer" or variant.startswith("batch_"):
            size = "full graph" if variant == "spexphormer" else variant.removeprefix("batch_")
            lines.append(f"| {dataset} | {size} | {max(r['train_peak_mb'] for r in group):.0f} | "
                         f"{statistics.mean(r['train_s_per_epoch'] for r in group):.3f} | "
                         f"{mean_std([r['test'] for r in group], 100)} |")
    ddp = [(variant, groups[(dataset, variant)]) for dataset, variant in groups if variant.startswith("ddp_")]
    if ddp:
        lines += ["", ("## The wide network on DDP (Minesweeper preset, global train.batch_size=1000; torchrun, "
                       "gloo on the CPU, OMP_NUM_THREADS = cores // processes)"), "",
                  ("Peak memory is each rank's own high-water mark (the train stage's process only launches "
                   "torchrun); seconds per epoch are rank 0's training loop, evaluation included."), "",
                  "| processes | seeds | train s/epoch | train s | peak MB per rank | test metric (×100) |",
                  "|---|---|---|---|---|---|"]
        for variant, group in ddp:
            lines.append(f"| {group[0].get('processes') or variant.removeprefix('ddp_')} | {len(group)} | "
                         f"{statistics.mean(r['train_s_per_epoch'] for r in group):.3f} | "
                         f"{statistics.mean(r['train_s'] for r in group):.1f} | "
                         f"{', '.join(str(r.get('train_rank_peaks_mb')) for r in group)} | "
                         f"{group[0]['metric']} {mean_std([r['test'] for r in group], 100)} |")
    lines += ["", "## Reservoir against uniform sampling (the paper found uniform worse)", ""]
    for dataset in sorted({d for d, _ in groups}):
        reservoir, uniform = groups.get((dataset, "spexphormer")), groups.get((dataset, "uniform"))
        if reservoir and uniform:
            gap = 100 * (statistics.mean(r["test"] for r in reservoir) - statistics.mean(r["test"] for r in uniform))
            verdict = "agrees: uniform is worse" if gap > 0 else "disagrees: uniform is not worse"
            lines.append(f"- {dataset}: reservoir − uniform = {gap:+.2f} points ({verdict})")
    long_range = [(variant, target, groups.get(("long_range", variant)))
                  for variant, target in (("spexphormer", "≥ 0.90"), ("graph_only", "≤ 0.70"))]
    if any(group for _, _, group in long_range):
        # The criterion for this task is test accuracy, not the ROC-AUC of the main table.
        lines += ["", "## Long-range task: test accuracy (expanders against graph edges only, same budget)", "",
                  "| variant | seeds | test accuracy | min | max | target |", "|---|---|---|---|---|---|"]
        for variant, target, group in long_range:
            if group:
                accuracies = [r["test_accuracy"] for r in group]
                lines.append(f"| {variant} | {len(group)} | {mean_std(accuracies, digits=3)} | {min(accuracies):.3f} | "
                             f"{max(accuracies):.3f} | {target} |")
    for title, value in extras.items():
        lines += ["", f"## {title}", ""]
        if isinstance(value, list) and value and isinstance(value[0], dict):  # rows: a table
            lines += ["| " + " | ".join(value[0]) + " |", "|" + "---|" * len(value[0])]
            lines += ["| " + " | ".join(f"{v:.3f}" if isinstance(v, float) else str(v) for v in row.values()) + " |"
                      for row in value]
        else:
            lines += ["```", json.dumps(value, indent=2, ensure_ascii=False), "```"]
    with atomic_path(out / "results.md") as partial_md:
        partial_md.write_text("\n".join(lines) + "\n")


def open_benchmark_store(out: str, what: str) -> tuple[Path, ArtifactStore]:
    """The output folder (created) and its stage cache `<out>/cache`; exits when the datasets are missing."""
    if not SHARED.is_dir():
        sys.exit(f"{what} needs the real datasets at {SHARED}")
    folder = Path(out)
    folder.mkdir(parents=True, exist_ok=True)
    return folder, ArtifactStore(folder / "cache")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--datasets", nargs="+", default=["minesweeper", "tolokers", "cora", "citeseer", "long_range"])
    parser.add_argument("--variants", nargs="+", default=[*VARIANTS, *PRESET_VARIANTS],
                        choices=[*VARIANTS, *PRESET_VARIANTS])
    parser.add_argument("--seeds", type=int, default=5)
    parser.add_argument("--ablation-seeds", type=int, default=None,
                        help="seeds for variants other than spexphormer (default: --seeds)")
    parser.add_argument("--out", default=str(REPO / "artifacts" / "bench"))
    parser.add_argument("--no-extras", action="store_true",
                        help="only the rows of --datasets x --variants: no sampler, orchestration, epoch-memory or "
                             "GCN sections (earlier ones are kept)")
    args = parser.parse_args(argv)
    out, store = open_benchmark_store(args.out, "the benchmark")
    # Rows of earlier invocations stay in the report (a narrowed run adds to it rather than replacing it);
    # a (dataset, variant, seed) measured again replaces its old row.
    measured = {(r["dataset"], r["variant"], r["seed"]): r for r in previous_rows(out / "results.csv")}
    for dataset in args.datasets:
        for variant in args.variants:
            if dataset == "long_range" and variant not in ("spexphormer", "graph_only"):
                continue
            if variant in PRESET_VARIANTS and dataset not in ("minesweeper", "tolokers", "cora", "citeseer"):
                continue
            if variant == "graph_only" and dataset != "long_range":
                continue
            if variant.startswith("ddp_") and dataset != "minesweeper":  # the preset for DDP
                continue
            seeds = args.seeds if variant == "spexphormer" else (args.ablation_seeds or args.seeds)
            for seed in range(seeds):
                row = run_one(store, dataset, variant, seed)
                measured[(dataset, variant, seed)] = row
                print(json.dumps({k: row[k] for k in ("dataset", "variant", "seed", "test", "estimate_s", "train_s")}),
                      flush=True)
                write_report(out, list(measured.values()), {})
    # Sections of earlier invocations stay too; one measured again replaces its old value.
    extras_path = out / "extras.json"
    extras = json.loads(extras_path.read_text()) if extras_path.is_file() else {}
    if args.no_extras:
        args.datasets = []  # the sections below are all per dataset
    if "minesweeper" in args.datasets:
        extras["Sampler throughput (Minesweeper, layer 0 scores)"] = sampler_throughput(store)
        extras["Orchestration overhead (`sgt run` beyond the stages: Prefect, MLflow, processes, plots)"] = (
            orchestration_overhead(store))
    for dataset in ("minesweeper", "tolokers"):
        if dataset in args.datasets:
            # epoch_added_mb: what the epochs add to the resident set once graph, scores and model are loaded
            extras[f"Training epochs alone by batch size ({dataset}, seed 0; Figure 5; benchmarks/step_memory.py)"] = epoch_memory(
                store, dataset, [None, 2000, 1000, 250])
    for dataset in ("cora", "citeseer"):
        if dataset in args.datasets:
            scores = gcn_baseline(dataset, list(range(args.seeds)))
            extras[f"2-layer GCN (PyG) on {dataset}, same split, test accuracy ×100"] = mean_std(scores, 100)
    gpu = gpu_model()
    extras["GPU"] = (f"the train stage ran on {gpu} (train.device=auto)" if gpu else
                     "none here: torch sees no GPU, so every stage ran on the CPU. The train stage picks CUDA when "
                     "torch.cuda.is_available() and records the device in MLflow (tag sgt.device); runs on a lent "
                     "H200 are in benchmarks/results/2026-11-25-gpu.md")
    with atomic_path(extras_path) as partial_extras:
        partial_extras.write_text(json.dumps(extras, indent=2, ensure_ascii=False))
    write_report(out, list(measured.values()), extras)
    print(f"wrote {out / 'results.md'} and {out / 'results.csv'}")


if __name__ == "__main__":
    main()
