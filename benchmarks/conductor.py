"""What the conductor costs: a computing `sgt run`'s wall time beyond its four stages, and its largest process.

Runs `sgt run OVERRIDES` (fresh artifacts each time, so every stage computes) `--runs` times, alternating with
the same command in another checkout (`--baseline PATH`, e.g. a `git worktree` of an earlier commit) when one
is given, so both sides see the same machine. For each run: its wall time (start to exit), each stage's seconds
as `sgt report --json` gives them, the time beyond the stages (wall minus their sum: start-up, the Prefect
server, MLflow, the flow's bookkeeping, the end), and the peak RSS of the flow's process, of its largest other
process (a stage's, the plotting process's) and of the temporary Prefect server, sampled every 0.1 s.

    python -m benchmarks.conductor --runs 3 --baseline /tmp/before -- +experiment=minesweeper
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import psutil

REPO_ROOT = Path(__file__).resolve().parents[1]
SERVER_MARKS = ("flows.temporary_server", "uvicorn")


def measure(checkout: Path, overrides: list[str]) -> dict:
    """One computing run of `python -m flows.cli run OVERRIDES` in `checkout`, with fresh artifacts."""
    artifacts = tempfile.mkdtemp(prefix="sgt-conductor-")
    command = [sys.executable, "-m", "flows.cli", "run", f"paths.artifacts={artifacts}", *overrides]
    started = time.perf_counter()
    process = subprocess.Popen(command, cwd=checkout, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                               env={**os.environ, "OMP_WAIT_POLICY": "PASSIVE"})
    flow = psutil.Process(process.pid)
    peaks = {"flow": 0, "largest other": 0, "prefect server": 0}
    while process.poll() is None:
        try:
            peaks["flow"] = max(peaks["flow"], flow.memory_info().rss)
            for child in flow.children(recursive=True):
                kind = "prefect server" if any(m in " ".join(child.cmdline()) for m in SERVER_MARKS) else "largest other"
                peaks[kind] = max(peaks[kind], child.memory_info().rss)
        except psutil.Error:  # a process ended between listing and reading it
            pass
        time.sleep(0.1)
    wall = time.perf_counter() - started
    if process.returncode != 0:
        raise SystemExit(f"{checkout}: sgt run exited with {process.returncode}")
    report = json.loads(subprocess.run([sys.executable, "-m", "flows.cli", "report", "--json",
                                        f"paths.artifacts={artifacts}"], cwd=checkout, capture_output=True,
                                       text=True, check=True).stdout)
    stages = {stage["stage"]: stage["seconds"] for stage in report["stages"]}
    return {"wall_s": wall, "stage_s": stages, "beyond_stages_s": wall - sum(stages.values()),
            "peak_rss_mb": {kind: rss / 2**20 for kind, rss in peaks.items()},
            "load": os.getloadavg()[0]}


def summary(rows: list[dict]) -> str:
    """Medians per checkout, and each run's time beyond the stages."""
    header = ("| checkout | runs | wall s | stages s | beyond the stages s (each run) | flow MB | largest other MB "
              "| Prefect server MB |")
    lines = [header, "|---|---|---|---|---|---|---|---|"]
    for side in dict.fromkeys(row["checkout"] for row in rows):
        runs = [row for row in rows if row["checkout"] == side]
        each = ", ".join(f"{row['beyond_stages_s']:.1f}" for row in runs)
        lines.append(
            f"| {side} | {len(runs)} | {statistics.median(r['wall_s'] for r in runs):.1f} "
            f"| {statistics.median(sum(r['stage_s'].values()) for r in runs):.1f} "
            f"| {statistics.median(r['beyond_stages_s'] for r in runs):.1f} ({each}) | "
            + " | ".join(f"{statistics.median(r['peak_rss_mb'][kind] for r in runs):.0f}"
                         for kind in ("flow", "largest other", "prefect server")) + " |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3, help="runs per checkout")
    parser.add_argument("--baseline", type=Path, help="another checkout, run alternately with this one")
    parser.add_argument("--out", type=Path, default=REPO_ROOT / "artifacts" / "bench" / "conductor.jsonl")
    parser.add_argument("overrides", nargs="*", default=["+experiment=minesweeper"])
    args = parser.parse_args(argv)
    checkouts = [REPO_ROOT, *([args.baseline.resolve()] if args.baseline else [])]
    args.out.parent.mkdir(parents=True, exist_ok=True)
    rows = []
    for run in range(args.runs):
        for checkout in checkouts:
            row = {"checkout": str(checkout), "run": run, **measure(checkout, args.overrides)}
            rows.append(row)
            with open(args.out, "a") as out:
                out.write(json.dumps(row) + "\n")
            print(f"{checkout}: run {run}: {row['wall_s']:.1f} s, {row['beyond_stages_s']:.1f} s beyond the stages",
                  flush=True)
    print(summary(rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
