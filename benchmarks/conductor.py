"""What the conductor costs: a computing `sgt run`'s wall time beyond its four stages, its memory, a cached rerun.

Runs `sgt run OVERRIDES` (fresh artifacts each time, so every stage computes and the MLflow store is new)
`--runs` times, alternating with the same command in another checkout (`--baseline PATH`, e.g. a `git
worktree` of an earlier commit) when one is given, so both sides see the same machine; then, with `--cached`,
the same command again on each run's artifacts (every stage served from the cache: `make run`'s second time).
For each run: its wall time (start to exit), each stage's seconds as `sgt report --json` gives them, the time
beyond the stages (wall minus their sum: start-up, the Prefect server, MLflow, the flow's bookkeeping, the end),
the peak RSS of the flow's process, of its largest other process (a stage's, the plotting process's) and of a
temporary Prefect server, and the peak over the run of the whole process tree's PSS (proportional set size:
shared pages split between the processes sharing them, so the sum is what the run holds), sampled every
0.1 s (RSS) and 0.3 s (PSS).
The shared Prefect server (`orchestration.prefect_server=shared`, the default) belongs to no run: its PSS is
reported apart, and whether the run started it or found it running.

    python -m benchmarks.conductor --runs 3 --cached --baseline /tmp/before \
        --baseline-prefect-home /tmp/before-prefect -- +experiment=minesweeper
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

from flows.temporary_server import SHARED_OPTION

REPO_ROOT = Path(__file__).resolve().parents[1]
SERVER_MARKS = ("flows.temporary_server", "uvicorn")
RSS_KINDS = ("flow", "largest other", "prefect server")
PSS_EVERY = 3  # ticks of 0.1 s between PSS samples


def _pss(process: psutil.Process) -> int:
    """A process's PSS in bytes (/proc/PID/smaps_rollup), or its RSS where the system gives no PSS."""
    try:
        return process.memory_full_info().pss
    except (AttributeError, psutil.AccessDenied):
        return process.memory_info().rss


def measure(checkout: Path, overrides: list[str], artifacts: str | None = None,
            environment: dict[str, str] | None = None) -> dict:
    """One run of `python -m flows.cli run OVERRIDES` in `checkout`, with fresh artifacts unless given, in this
    process's environment with `environment` on top."""
    artifacts = artifacts or tempfile.mkdtemp(prefix="sgt-conductor-")
    command = [sys.executable, "-m", "flows.cli", "run", f"paths.artifacts={artifacts}", *overrides]
    started = time.perf_counter()
    with tempfile.TemporaryFile() as output:
        process = subprocess.Popen(command, cwd=checkout, stdout=output, stderr=subprocess.STDOUT,
                                   env={**os.environ, "OMP_WAIT_POLICY": "PASSIVE", **(environment or {})})
        flow = psutil.Process(process.pid)
        peaks = {"flow": 0, "largest other": 0, "prefect server": 0, "tree pss": 0, "shared server pss": 0}
        tick = 0
        while process.poll() is None:
            # RSS every tick; PSS (which reads every mapping of a process) every PSS_EVERY ticks, so that the
            # sampling itself takes little of the machine it measures
            pss_now, tick = tick % PSS_EVERY == 0, tick + 1
            try:
                peaks["flow"] = max(peaks["flow"], flow.memory_info().rss)
                tree_pss = _pss(flow) if pss_now else 0
                for child in flow.children(recursive=True):
                    command = " ".join(child.cmdline())
                    if SHARED_OPTION in command:  # the shared server, while the run that started it lasts
                        continue
                    kind = "prefect server" if any(m in command for m in SERVER_MARKS) else "largest other"
                    peaks[kind] = max(peaks[kind], child.memory_info().rss)
                    tree_pss += _pss(child) if pss_now else 0
                if pss_now:
                    peaks["tree pss"] = max(peaks["tree pss"], tree_pss)
                    for server in shared_servers():
                        peaks["shared server pss"] = max(peaks["shared server pss"], _pss(server))
            except psutil.Error:  # a process ended between listing and reading it
                pass
            time.sleep(0.1)
        wall = time.perf_counter() - started
        output.seek(0)
        log = output.read().decode(errors="replace")
    if process.returncode != 0:
        raise SystemExit(f"{checkout}: sgt run exited with {process.returncode}:\n{log[-2000:]}")
    report = json.loads(subprocess.run([sys.executable, "-m", "flows.cli", "report", "--json",
                                        f"paths.artifacts={artifacts}"], cwd=checkout, capture_output=True,
                                       text=True, check=True, env={**os.environ, **(environment or {})}).stdout)
    stages = {stage["stage"]: stage["seconds"] for stage in report["stages"]}
    server = ("started the shared one" if "started the shared Prefect server" in log
              else "the shared one" if "using the shared Prefect server" in log
              else "temporary" if "temporary Prefect server" in log else "found or configured")
    return {"wall_s": wall, "stage_s": stages, "beyond_stages_s": wall - sum(stages.values()), "artifacts": artifacts,
            "prefect_server": server, "peak_rss_mb": {kind: peaks[kind] / 2**20 for kind in RSS_KINDS},
            "peak_pss_mb": {"tree": peaks["tree pss"] / 2**20, "shared server": peaks["shared server pss"] / 2**20},
            "load": os.getloadavg()[0]}


def shared_servers() -> list[psutil.Process]:
    """The shared Prefect servers running (flows/temporary_server.py with --idle-minutes)."""
    found = []
    for process in psutil.process_iter(["cmdline"]):
        command = process.info["cmdline"] or []
        if "flows.temporary_server" in command and SHARED_OPTION in command:
            found.append(process)
    return found


def summary(rows: list[dict]) -> str:
    """Medians per checkout (and computing or cached), and each run's time beyond the stages."""
    header = ("| checkout | runs | wall s | stages s | beyond the stages s (each run) | flow MB | largest other MB "
              "| Prefect server MB | whole run's PSS MB | shared server's PSS MB | Prefect server (each run) |")
    lines = [header, "|---|---|---|---|---|---|---|---|---|---|---|"]
    for side in dict.fromkeys((row["checkout"], row.get("cached", False)) for row in rows):
        runs = [row for row in rows if (row["checkout"], row.get("cached", False)) == side]
        each = ", ".join(f"{row['beyond_stages_s']:.1f}" for row in runs)
        pss = {kind: statistics.median(r.get("peak_pss_mb", {}).get(kind, float("nan")) for r in runs)
               for kind in ("tree", "shared server")}
        lines.append(
            f"| {side[0]}{' (cached rerun)' if side[1] else ''} | {len(runs)} | "
            f"{statistics.median(r['wall_s'] for r in runs):.1f} "
            f"| {statistics.median(sum(r['stage_s'].values()) for r in runs):.1f} "
            f"| {statistics.median(r['beyond_stages_s'] for r in runs):.1f} ({each}) | "
            + " | ".join(f"{statistics.median(r['peak_rss_mb'][kind] for r in runs):.0f}" for kind in RSS_KINDS)
            + f" | {pss['tree']:.0f} | {pss['shared server']:.0f} | "
            + ", ".join(r.get("prefect_server", "-") for r in runs) + " |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3, help="runs per checkout")
    parser.add_argument("--baseline", type=Path, help="another checkout, run alternately with this one")
    parser.add_argument("--cached", action="store_true", help="then rerun each run's command on its artifacts")
    parser.add_argument("--baseline-prefect-home", type=Path,
                        help="the baseline's $PREFECT_HOME: an earlier checkout stops the shared Prefect server of "
                             "its Prefect home as an orphan, so give it another (a copy of the database saves "
                             "its migrations)")
    parser.add_argument("--out", type=Path, default=REPO_ROOT / "artifacts" / "bench" / "conductor.jsonl")
    parser.add_argument("overrides", nargs="*", default=["+experiment=minesweeper"])
    args = parser.parse_args(argv)
    checkouts = [REPO_ROOT, *([args.baseline.resolve()] if args.baseline else [])]
    environments = {str(REPO_ROOT): {}}
    if args.baseline:
        environments[str(args.baseline.resolve())] = (
            {"PREFECT_HOME": str(args.baseline_prefect_home.resolve())} if args.baseline_prefect_home else {})
    args.out.parent.mkdir(parents=True, exist_ok=True)
    rows = []
    for run in range(args.runs):
        for checkout in checkouts:
            row = {"checkout": str(checkout), "run": run,
                   **measure(checkout, args.overrides, environment=environments[str(checkout)])}
            rows.append(row)
            with open(args.out, "a") as out:
                out.write(json.dumps(row) + "\n")
            print(f"{checkout}: run {run}: {row['wall_s']:.1f} s, {row['beyond_stages_s']:.1f} s beyond the stages",
                  flush=True)
    for computed in list(rows) if args.cached else []:
        row = {"checkout": computed["checkout"], "run": computed["run"], "cached": True,
               **measure(Path(computed["checkout"]), args.overrides, computed["artifacts"],
                         environments[computed["checkout"]])}
        # no stage computes: `sgt report` repeats the seconds the stages took when they did
        row["stage_s"], row["beyond_stages_s"] = dict.fromkeys(row["stage_s"], 0.0), row["wall_s"]
        rows.append(row)
        with open(args.out, "a") as out:
            out.write(json.dumps(row) + "\n")
        print(f"{row['checkout']}: cached rerun {row['run']}: {row['wall_s']:.1f} s", flush=True)
    print(summary(rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
