"""Chooses the top-level defaults: candidate settings ranked by validation metric on each shared dataset.

    python -m benchmarks.defaults [--seeds N] [--candidates attention_only gcn ...]

What `sgt run dataset=npz dataset.path=FILE` trains must suit a graph nobody tuned for. Each candidate is
a set of overrides on the top-level defaults (conf/config.yaml, no preset), run on the four shared datasets;
on each dataset the candidates are ranked by mean validation metric over the seeds (1 = best), and the
candidate with the lowest mean rank wins: a rank, unlike a mean score, lets no single dataset's scale
decide. The test metric is reported beside it but chooses nothing. Stage outputs share `make bench`'s cache.
Writes `<out>/defaults.md` and `defaults.csv`.
"""

from __future__ import annotations

import argparse
import csv
import statistics
from pathlib import Path

from benchmarks.run import REPO, open_benchmark_store, run_stage, variant_overrides
from sgt_core.artifacts import ArtifactStore, atomic_path
from sgt_core.config import compose_config
from sgt_core.pipeline import STAGES, stage_keys

DATASETS = ("minesweeper", "tolokers", "cora", "citeseer")
CANDIDATES = {
    # conf/ as it was before the local branch: attention only
    "attention_only": ["model.local=none", "model.degree_signal=false"],
    "degree_signal": ["model.local=none", "model.degree_signal=true"],
    "gcn": ["model.local=gcn", "model.degree_signal=true"],
    "sage_mean": ["model.local=sage", "model.local_aggregation=mean", "model.degree_signal=true"],
    "sage_sum": ["model.local=sage", "model.local_aggregation=sum", "model.degree_signal=true"],
    "gatv2": ["model.local=gatv2", "model.degree_signal=true"],
}


def measure(store: ArtifactStore, dataset: str, candidate: str, seed: int) -> dict:
    cfg = compose_config([*variant_overrides(dataset, "defaults"), *CANDIDATES[candidate], f"seed={seed}"])
    keys = stage_keys(cfg)
    results = {stage.name: run_stage(store, stage, cfg, keys) for stage in STAGES}
    train = results["train"]["metrics"]
    metric = train["selected_by"].removeprefix("val_")
    return {"dataset": dataset, "candidate": candidate, "seed": seed, "metric": metric,
            "val": train[f"val_{metric}"], "test": train[f"test_{metric}"], "train_s": results["train"]["seconds"],
            "train_peak_mb": results["train"]["peak_rss_mb"]}


def ranking(rows: list[dict]) -> tuple[dict[str, dict[str, float]], dict[str, float]]:
    """Each candidate's rank per dataset by mean validation metric (1 = best), and its mean rank."""
    datasets = sorted({row["dataset"] for row in rows})
    candidates = sorted({row["candidate"] for row in rows})
    ranks: dict[str, dict[str, float]] = {candidate: {} for candidate in candidates}
    for dataset in datasets:  # a report written part-way ranks the candidates measured on each dataset so far
        means = {c: statistics.mean(values) for c in candidates
                 if (values := [r["val"] for r in rows if r["dataset"] == dataset and r["candidate"] == c])}
        ordered = sorted(means, key=means.get, reverse=True)
        for position, candidate in enumerate(ordered, start=1):
            ranks[candidate][dataset] = position
    return ranks, {candidate: statistics.mean(ranks[candidate].values()) for candidate in candidates}


def write_report(out: Path, rows: list[dict]) -> str:
    ranks, mean_rank = ranking(rows)
    winner = min(mean_rank, key=mean_rank.get)
    datasets = sorted({row["dataset"] for row in rows})
    lines = ["# Top-level defaults: mean validation rank across the shared datasets", "",
             ("`python -m benchmarks.defaults`: each candidate's overrides on conf/config.yaml with "
              "`dataset=npz dataset.path=FILE` and no preset; validation (test) metric ×100, mean over seeds; "
              "rank by validation, 1 = best."), "",
             "| candidate | overrides | " + " | ".join(datasets) + " | mean rank |",
             "|---|---|" + "---|" * len(datasets) + "---|"]
    for candidate in sorted(mean_rank, key=mean_rank.get):
        cells = []
        for dataset in datasets:
            group = [r for r in rows if r["dataset"] == dataset and r["candidate"] == candidate]
            if not group:
                cells.append("-")
                continue
            val, test = (100 * statistics.mean(r[k] for r in group) for k in ("val", "test"))
            cells.append(f"{val:.2f} ({test:.2f}), rank {ranks[candidate][dataset]}")
        lines.append(f"| {candidate} | `{' '.join(CANDIDATES[candidate])}` | " + " | ".join(cells)
                     + f" | {mean_rank[candidate]:.2f} |")
    seeds = sorted({row["seed"] for row in rows})
    lines += ["", f"Seeds: {', '.join(map(str, seeds))}. Chosen: **{winner}** (lowest mean rank).", ""]
    with atomic_path(out / "defaults.md") as partial:
        partial.write_text("\n".join(lines))
    with atomic_path(out / "defaults.csv") as partial, partial.open("w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    return winner


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=3, help="seeds per candidate and dataset (default: %(default)s)")
    parser.add_argument("--candidates", nargs="+", default=list(CANDIDATES), choices=list(CANDIDATES))
    parser.add_argument("--datasets", nargs="+", default=list(DATASETS), choices=DATASETS)
    parser.add_argument("--out", default=str(REPO / "artifacts" / "bench"))
    args = parser.parse_args(argv)
    out, store = open_benchmark_store(args.out, "choosing the defaults")
    rows = []
    for dataset in args.datasets:
        for candidate in args.candidates:
            for seed in range(args.seeds):
                rows.append(measure(store, dataset, candidate, seed))
                print(rows[-1], flush=True)
                write_report(out, rows)
    print(f"chosen: {write_report(out, rows)}; wrote {out / 'defaults.md'} and {out / 'defaults.csv'}")


if __name__ == "__main__":
    main()
