"""`make bench-scale`: every stage on generated graphs from 10^4 nodes to Amazon2M's size, per attention edge.

    python -m benchmarks.scale [--sizes 1e4 1e5 1e6 amazon2m] [--memory-limit-gb 20] [--out artifacts/bench]
                               [--overrides model.local=gcn model.degree_signal=true]

Each stage runs in its own process (benchmarks/stage_process.py) under a memory watchdog: a stage that
passes the limit is killed and its row records the breaking point instead of the machine running out of
memory. Per size and stage the report gives the wall time, seconds per epoch, peak resident memory, bytes
per attention edge (peak RSS / interaction-graph edges) and, for the training stages, nanoseconds per
attention edge per layer per epoch. Results: `<out>/scale.md`, `<out>/scale.csv`, `<out>/scale.png`.
"""

from __future__ import annotations

import argparse
import csv
import json
import os
from pathlib import Path

from benchmarks.run import (
    REPO,
    MemoryLimitExceeded,
    TimeLimitExceeded,
    cpu_model,
    gpu_model,
    read_rows,
    run_stage,
)
from sgt_core.artifacts import ArtifactStore, atomic_path
from sgt_core.config import compose_config
from sgt_core.pipeline import STAGES, stage_keys

# Few epochs: time per epoch and memory are what is measured, not accuracy.
EPOCHS = ["estimator.epochs=3", "train.epochs=3"]
SIZES = {
    "1e4": ["+experiment=scale", "dataset.num_nodes=10000", *EPOCHS],
    "1e5": ["+experiment=scale", "dataset.num_nodes=100000", *EPOCHS],
    "1e6": ["+experiment=scale", "dataset.num_nodes=1000000", *EPOCHS],
    # Table 9's Amazon2M networks on a graph of its size (conf/experiment/amazon2m.yaml)
    # one wide-network epoch: batched training of 1.2 M target nodes on 2 cores takes minutes per epoch
    "amazon2m": ["+experiment=amazon2m", "estimator.epochs=2", "train.epochs=1"],
}
# The targets on 2 cores / 24 GiB: per size and stage, (limit, unit, what).
TARGETS = {
    ("amazon2m", "preprocess"): [("seconds", 300, "s"), ("peak_rss_mb", 12_000, "MB")],
    ("amazon2m", "estimate"): [("peak_rss_mb", 16_000, "MB"), ("bytes_per_edge", 60, "B/edge"),
                               ("ns_per_edge_layer_epoch", 150, "ns")],
    ("amazon2m", "export"): [("peak_rss_mb", 8_000, "MB")],
    ("amazon2m", "train"): [("peak_rss_mb", 8_000, "MB")],
}
END_TO_END_TARGET = ("1e6", 15 * 60)  # seconds for all four stages
COLUMNS = ["size", "nodes", "attention_edges", "layers", "stage", "status", "seconds", "seconds_per_epoch",
           "peak_rss_mb", "bytes_per_edge", "ns_per_edge_layer_epoch", "device", "peak_cuda_mb",
           "cuda_bytes_per_edge"]


def measure_size(store: ArtifactStore, size: str, memory_limit_mb: float, time_limit_s: float | None,
                 overrides: tuple[str, ...] = ()) -> list[dict]:
    """Runs (or reuses) the four stages of one size, with `overrides` on top of its configuration; a row per
    stage, the breaking point if one was killed."""
    cfg = compose_config([*SIZES[size], *overrides])
    keys = stage_keys(cfg)
    rows, edges = [], None
    layers = cfg["model"]["num_layers"]
    for stage in STAGES:
        row = {"size": size, "nodes": cfg["dataset"]["num_nodes"], "layers": layers, "stage": stage.name}
        try:
            result = run_stage(store, stage, cfg, keys, memory_limit_mb=memory_limit_mb, time_limit_s=time_limit_s)
        except MemoryLimitExceeded as error:
            rows.append({**row, "attention_edges": edges, "status": f"killed at {error.peak_mb:.0f} MB",
                         "peak_rss_mb": error.peak_mb})
            break  # later stages have no input
        except TimeLimitExceeded as error:
            rows.append({**row, "attention_edges": edges, "status": f"stopped after {error.seconds:.0f} s",
                         "peak_rss_mb": error.peak_mb})
            break
        metrics = result["metrics"]
        if stage.name == "preprocess":
            edges = metrics["num_edges"]
        epochs = {"estimate": cfg["estimator"]["epochs"], "train": cfg["train"]["epochs"]}.get(stage.name)
        per_epoch = None
        if stage.name == "estimate":
            per_epoch = metrics["seconds"] / epochs
        elif stage.name == "train":
            per_epoch = metrics["seconds_per_epoch"]
        rows.append({
            **row, "attention_edges": edges, "status": "ok", "seconds": result["seconds"],
            "seconds_per_epoch": per_epoch, "peak_rss_mb": result["peak_rss_mb"],
            "bytes_per_edge": result["peak_rss_mb"] * 2**20 / edges,
            "ns_per_edge_layer_epoch": per_epoch / (edges * layers) * 1e9 if per_epoch is not None else None,
            # the train stage on a GPU (train.device=auto finds one): its own peak of GPU memory as well
            "device": metrics.get("device", "cpu"), "peak_cuda_mb": metrics.get("peak_cuda_mb"),
            "cuda_bytes_per_edge": metrics["peak_cuda_mb"] * 2**20 / edges if "peak_cuda_mb" in metrics else None,
        })
    return rows


def cores_and_gpu() -> str:
    """"N cores", and ", GPU: <name>" where torch sees one (the train stage then runs there)."""
    gpu = gpu_model()
    return f"{os.cpu_count()} cores" + (f", GPU: {gpu}" if gpu else "")


def target_lines(rows: list[dict]) -> list[str]:
    """The issue's targets, each with the measured value and whether it is met."""
    by_key = {(row["size"], row["stage"]): row for row in rows}
    lines = ["| size | stage | measure | target | measured | met |", "|---|---|---|---|---|---|"]
    for (size, stage), checks in TARGETS.items():
        row = by_key.get((size, stage))
        for measure, limit, unit in checks:
            value = row.get(measure) if row and row["status"] == "ok" else None
            shown = f"{value:.1f}" if value is not None else (row["status"] if row else "not run")
            met = "yes" if value is not None and value <= limit else "no"
            lines.append(f"| {size} | {stage} | {measure} | ≤ {limit} {unit} | {shown} | {met} |")
    size, limit = END_TO_END_TARGET
    stages = [row for row in rows if row["size"] == size]
    if stages:
        complete = len(stages) == len(STAGES) and all(row["status"] == "ok" for row in stages)
        total = sum(row.get("seconds") or 0 for row in stages)
        lines.append(f"| {size} | all four | seconds | ≤ {limit} s | {total:.1f}{'' if complete else ' (incomplete)'} | "
                     f"{'yes' if complete and total <= limit else 'no'} |")
    return lines


def growth_lines(rows: list[dict]) -> list[str]:
    """Time and memory of each stage at 10^6 over 10^5 nodes (the target: at most 12x)."""
    by_key = {(row["size"], row["stage"]): row for row in rows if row["status"] == "ok"}
    lines = ["| stage | time 1e6/1e5 | memory 1e6/1e5 |", "|---|---|---|"]
    for stage in STAGES:
        small, large = by_key.get(("1e5", stage.name)), by_key.get(("1e6", stage.name))
        if small and large:
            lines.append(f"| {stage.name} | {large['seconds'] / small['seconds']:.1f}x | "
                         f"{large['peak_rss_mb'] / small['peak_rss_mb']:.1f}x |")
    return lines


def write_report(out: Path, rows: list[dict], memory_limit_mb: float, overrides: tuple[str, ...] = ()) -> None:
    """scale.csv, scale.md and scale.png, each written to a temporary name and renamed."""
    def cell(value) -> str:
        return f"{value:.2f}" if isinstance(value, float) else ("-" if value is None else str(value))

    with atomic_path(out / "scale.csv") as partial, open(partial, "w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=COLUMNS)
        writer.writeheader()
        writer.writerows({column: row.get(column) for column in COLUMNS} for row in rows)
    lines = [
        "# Scale benchmark (`make bench-scale`)", "",
        (f"CPU: {cpu_model()}, {cores_and_gpu()}; memory watchdog at {memory_limit_mb:.0f} MB per stage. "
        "Generated graphs (`dataset=synthetic`, average degree 20; Amazon2M's size and Table 9's networks for "
        "`amazon2m`). bytes_per_edge: the stage's peak RSS over the interaction graph's edges; "
        "ns_per_edge_layer_epoch: seconds per epoch over (edges x layers); peak_cuda_mb and "
        "cuda_bytes_per_edge: the same for GPU memory, where the train stage ran on one."
        + (f" Overrides on every size: `{' '.join(overrides)}`." if overrides else "")), "",
        "| " + " | ".join(COLUMNS) + " |", "|" + "---|" * len(COLUMNS),
        *("| " + " | ".join(cell(row.get(column)) for column in COLUMNS) + " |" for row in rows),
        "", "## Targets", "", *target_lines(rows), "", "## Growth from 10^5 to 10^6 nodes (target: at most 12x)", "",
        *growth_lines(rows),
    ]
    with atomic_path(out / "scale.md") as partial:
        partial.write_text("\n".join(lines) + "\n")
    plot(rows, out / "scale.png")


def plot(rows: list[dict], path: Path) -> None:
    """Time and peak memory of each stage against the number of nodes, log-log."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, (time_axis, memory_axis) = plt.subplots(1, 2, figsize=(10, 4))
    for stage in STAGES:
        points = sorted((row["nodes"], row["seconds"], row["peak_rss_mb"]) for row in rows
                        if row["stage"] == stage.name and row["status"] == "ok")
        if points:
            nodes, seconds, memory = zip(*points)
            time_axis.plot(nodes, seconds, marker="o", label=stage.name)
            memory_axis.plot(nodes, memory, marker="o", label=stage.name)
    for axis, label in ((time_axis, "wall seconds"), (memory_axis, "peak RSS (MB)")):
        axis.set_xscale("log"), axis.set_yscale("log")
        axis.set_xlabel("nodes"), axis.set_ylabel(label)
        axis.grid(True, which="both", alpha=0.3)
        axis.legend()
    figure.suptitle(f"SGT stages on generated graphs ({cores_and_gpu()})")
    figure.tight_layout()
    with atomic_path(path) as partial:  # a name ending in .png: savefig takes the format from it
        figure.savefig(partial, dpi=100)
    plt.close(figure)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", nargs="+", default=list(SIZES), choices=list(SIZES))
    parser.add_argument("--memory-limit-gb", type=float, default=20.0,
                        help="kill a stage past this resident memory and record it (the machine has no swap)")
    parser.add_argument("--stage-time-limit-min", type=float, default=None,
                        help="stop a stage running longer than this and record it (default: no limit)")
    parser.add_argument("--out", default=str(REPO / "artifacts" / "bench"))
    parser.add_argument("--overrides", nargs="*", default=[],
                        help="Hydra overrides on every size, e.g. model.local=gcn (use another --out per setting)")
    args = parser.parse_args(argv)
    time_limit_s = None if args.stage_time_limit_min is None else args.stage_time_limit_min * 60
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    store = ArtifactStore(out / "scale-cache")
    limit_mb = args.memory_limit_gb * 1024
    previous = out / "scale.csv"
    # Rows of sizes not measured in this invocation stay in the report.
    text = {"size", "stage", "status", "device"}  # "1e4" is a size's name, not a number
    rows = [row for row in read_rows(previous, text) if row["size"] not in args.sizes] if previous.is_file() else []
    for size in args.sizes:
        rows += measure_size(store, size, limit_mb, time_limit_s, tuple(args.overrides))
        rows.sort(key=lambda row: (list(SIZES).index(row["size"]), [s.name for s in STAGES].index(row["stage"])))
        write_report(out, rows, limit_mb, tuple(args.overrides))
        print(json.dumps([row for row in rows if row["size"] == size]), flush=True)


if __name__ == "__main__":
    main()
