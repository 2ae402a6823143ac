"""Time and peak memory of the appnp branch's top-k propagation rows (`model.local_top_k`) on random graphs.

    python -m benchmarks.propagation_scale --nodes 10000 100000 [--degree 20] [--steps 10] [--teleport 0.1]
                                           [--top-k 32] [--scipy] [--store] [--out artifacts/bench/propagation.jsonl]

For each size, a seeded uniform random graph of `--degree` average degree (benchmarks.preprocess_scale's),
then `appnp_top_k` as the train stage calls it: its seconds (wall and CPU), nanoseconds per graph edge (each
edge is one row entry of Â, so this is the cost per edge of all K steps) and its own peak RSS above the
graph's (VmHWM, reset before the call), per node. `--scipy` times the SciPy path as well (the compiled kernel
switched off), which gives the same rows bit for bit: the script checks that. `--store` also times what a
train stage pays for them through the artifact store (`sgt_core.train.propagation_rows.kept_top_k`, in a
temporary folder): the first call computes and writes them, the second finds and reads them; the record
holds both times, the file's size and whether the rows read back are the computed ones. One JSON line per
size and path is printed and appended to `--out`. Above 10^5 nodes run it under a memory cap on a shared machine,
e.g. `bash -c 'ulimit -v 16000000; .venv/bin/python -m benchmarks.propagation_scale --nodes 1000000'`.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

import torch

from benchmarks.preprocess_scale import random_graph, reset_peak
from benchmarks.run import REPO, cpu_model
from flows.memory import status_mb
from sgt_core.object_store import open_store
from sgt_core.sampling import propagation
from sgt_core.train.propagation_rows import PROPAGATION, ROWS_FILE, kept_top_k


def measure(edge_index: torch.Tensor, num_nodes: int, args: argparse.Namespace, path: str):
    """One call of `appnp_top_k` on `path` ("compiled" or "scipy"): (its rows, its record)."""
    baseline = status_mb("VmRSS") or 0.0
    reset_peak()
    started, cpu_started = time.perf_counter(), time.process_time()
    rows = propagation.appnp_top_k(edge_index[0], edge_index[1], num_nodes, args.steps, args.teleport, args.top_k)
    seconds = time.perf_counter() - started
    peak = (status_mb("VmHWM") or 0.0) - baseline
    edges = edge_index.shape[1]
    return rows, {
        "nodes": num_nodes, "graph_edges": edges, "steps": args.steps, "teleport": args.teleport,
        "top_k": args.top_k, "working_width": propagation.WORKING_WIDTH * args.top_k, "path": path,
        "seconds": round(seconds, 2), "cpu_seconds": round(time.process_time() - cpu_started, 2),
        "ns_per_edge": round(seconds / edges * 1e9), "peak_mb_above_graph": round(peak),
        "bytes_per_node": round(peak * 2**20 / num_nodes), "threads": torch.get_num_threads(), "cpu": cpu_model(),
    }


def same_rows(first, second) -> bool:
    """Whether two sets of propagation rows are the same, bit for bit."""
    return bool(torch.equal(first.neighbours, second.neighbours) and torch.equal(first.weights, second.weights))


def report(record: dict, out: Path) -> None:
    """Prints one record and appends it to `out` at once, so that a run cut short keeps what it measured."""
    print(json.dumps(record), flush=True)
    with out.open("a") as handle:
        handle.write(json.dumps(record) + "\n")


def through_store(edge_index: torch.Tensor, num_nodes: int, args: argparse.Namespace) -> dict:
    """Two calls of `kept_top_k` on a fresh store: computed and written, then found and read."""
    (REPO / "artifacts").mkdir(exist_ok=True)
    with tempfile.TemporaryDirectory(dir=REPO / "artifacts") as folder:
        store = open_store(folder)
        keep = (store, edge_index[0], edge_index[1], num_nodes, args.steps, args.teleport, args.top_k)
        started = time.perf_counter()
        computed = kept_top_k(*keep)
        kept = time.perf_counter()
        rows = kept_top_k(*keep)
        seconds = [kept - started, time.perf_counter() - kept]
        (rows_file,) = Path(folder).glob(f"{PROPAGATION}/*/{ROWS_FILE}")
        file_bytes = rows_file.stat().st_size
    return {
        "nodes": num_nodes, "graph_edges": edge_index.shape[1], "steps": args.steps, "top_k": args.top_k,
        "path": "store", "compute_and_write_seconds": round(seconds[0], 2), "read_seconds": round(seconds[1], 3),
        "rows_file_bytes": file_bytes, "bytes_per_slot": round(file_bytes / (num_nodes * args.top_k), 2),
        "read_equals_computed": same_rows(rows, computed),
        "threads": torch.get_num_threads(), "cpu": cpu_model(),
    }


def main(argv: list[str]) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, nargs="+", default=[10_000, 100_000])
    parser.add_argument("--degree", type=float, default=20.0, help="average degree of the random graph")
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--teleport", type=float, default=0.1)
    parser.add_argument("--top-k", type=int, default=32)
    parser.add_argument("--scipy", action="store_true", help="also time the SciPy path (no compiled kernel)")
    parser.add_argument("--store", action="store_true", help="also time computing, keeping and reading them "
                        "through the artifact store, as the train stage does")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", default=str(REPO / "artifacts" / "bench" / "propagation.jsonl"))
    args = parser.parse_args(argv)
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    choose_kernels, compiled = propagation.cpu_kernels, propagation.cpu_kernels()
    for num_nodes in args.nodes:
        edge_index = random_graph(num_nodes, args.degree, args.seed).edge_index
        paths = (["compiled"] if compiled is not None else []) + (["scipy"] if args.scipy or compiled is None else [])
        results = {}
        for path in paths:
            # the path is chosen by what the module's `cpu_kernels` answers (the tests monkeypatch it alike)
            propagation.cpu_kernels = (lambda: compiled) if path == "compiled" else (lambda: None)
            results[path], record = measure(edge_index, num_nodes, args, path)
            if len(results) == 2:
                first, second = results.values()
                record["same_rows_as_compiled"] = same_rows(first, second)
            report(record, out)
        propagation.cpu_kernels = choose_kernels  # the store's rows take the path a train stage takes
        if args.store:
            report(through_store(edge_index, num_nodes, args), out)


if __name__ == "__main__":
    main(sys.argv[1:])
