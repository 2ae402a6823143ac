"""Time and peak memory of the preprocess stage's graph construction on a random graph of a given size.

    python -m benchmarks.preprocess_scale --nodes 1000000 [--degree 20] [--expander-degree 30] [--profile]

The graph has `--nodes` nodes and `--degree` average degree (uniform random pairs, deduplicated, both
directions, sorted and coalesced as `sgt_core.data.validate.build_graph` leaves them), a few random
features, two classes and a random 50/25/25 split, all seeded. The steps are the preprocess stage's after
loading: `build_interaction_graph` with the Tolokers preset's options (self-loops, expander degree 30, no
virtual nodes), `InteractionGraph.save`, the in-degree histograms and the stage's graph statistics. Each
step reports its seconds (wall and CPU) and its own peak RSS (the high-water mark VmHWM, reset through
/proc/self/clear_refs before the step); the builder's own `seconds_*` stats split the build further.
The whole stage in a fresh process, loading included, is what `make bench-scale` (benchmarks/scale.py)
measures; this script is for finding where the preprocess time and memory go (`--profile`).

Run graphs above 10^5 nodes under a memory cap on a shared machine, e.g.
`bash -c 'ulimit -v 12000000; .venv/bin/python -m benchmarks.preprocess_scale --nodes 1000000'`.
"""

from __future__ import annotations

import argparse
import cProfile
import json
import pstats
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import torch
from torch_geometric.data import Data

from flows.memory import status_mb
from sgt_core.config.preprocess import ExpanderConfig
from sgt_core.preprocess.builder import build_interaction_graph
from sgt_core.preprocess.degrees import in_degree_histograms
from sgt_core.preprocess.stage import _graph_statistics

NUM_FEATURES = 8


def reset_peak() -> None:
    """Starts a new VmHWM high-water mark at the current RSS (Linux; elsewhere a no-op)."""
    try:
        Path("/proc/self/clear_refs").write_text("5")
    except OSError:
        pass


def random_graph(num_nodes: int, mean_degree: float, seed: int) -> Data:
    """A seeded uniform random simple graph as a PyG `Data`, edges both ways and sorted by (src, dst)."""
    rng = np.random.default_rng(seed)
    target = round(num_nodes * mean_degree / 2)  # undirected edges
    keys = np.empty(0, dtype=np.int64)
    # Draw a little more than needed: self-pairs and repeats are dropped, then the surplus is cut.
    while keys.size < target:
        draw = int((target - keys.size) * 1.01) + 16
        u, v = rng.integers(0, num_nodes, size=(2, draw))
        u, v = np.minimum(u, v), np.maximum(u, v)
        keys = np.concatenate([keys, (u * num_nodes + v)[u != v]])
        del u, v
        keys.sort()  # then drop repeats; not np.unique, whose hash table is ~10x slower on 10^7 keys
        keys = keys[np.concatenate([[True], keys[1:] != keys[:-1]])]
    keys = keys[np.sort(rng.permutation(keys.size)[:target])]
    # Both directions, sorted and without repeats: what build_graph's to_undirected gives.
    both = np.concatenate([keys, (keys % num_nodes) * num_nodes + keys // num_nodes])
    del keys
    both.sort()
    edge_index = torch.from_numpy(np.stack([both // num_nodes, both % num_nodes]))
    del both
    split = rng.random(num_nodes)
    return Data(
        x=torch.from_numpy(rng.standard_normal((num_nodes, NUM_FEATURES), dtype=np.float32)),
        y=torch.from_numpy(rng.integers(0, 2, num_nodes)),
        edge_index=edge_index,
        train_mask=torch.from_numpy(split < 0.5),
        val_mask=torch.from_numpy((split >= 0.5) & (split < 0.75)),
        test_mask=torch.from_numpy(split >= 0.75),
        num_classes=2,
    )


def run_steps(args: argparse.Namespace, out_dir: Path) -> list[dict]:
    """Runs the steps one after another; one record per step: seconds, its peak RSS, and details."""
    records = []

    def step(name: str, work):
        reset_peak()
        started, cpu_started = time.perf_counter(), time.process_time()
        result = work()
        # CPU seconds of all threads too: on a shared machine they vary less than wall time
        records.append({"step": name, "seconds": round(time.perf_counter() - started, 3),
                        "cpu_seconds": round(time.process_time() - cpu_started, 3),
                        "peak_rss_mb": round(status_mb("VmHWM") or 0.0)})
        print(json.dumps(records[-1]), file=sys.stderr, flush=True)
        return result

    graph = step("generate", lambda: random_graph(args.nodes, args.degree, args.seed))
    expander = ExpanderConfig(degree=args.expander_degree, ramanujan_slack=0.1, max_tries=20, per_component=False)
    options = {"self_loops": True, "expander": expander, "virtual_nodes": 0, "seed": args.seed, "compact": True}
    interaction_graph = step("build", lambda: build_interaction_graph(graph, **options))
    records[-1].update({key: round(value, 3) for key, value in interaction_graph.stats.items()
                        if key.startswith(("seconds_", "expander_"))})
    records[-1]["num_edges"] = interaction_graph.num_edges
    path = out_dir / "interaction_graph.pt"
    step("save", lambda: interaction_graph.save(path))
    records[-1]["file_mb"] = round(path.stat().st_size / 2**20, 1)
    step("in_degree_histograms", lambda: in_degree_histograms(
        interaction_graph.edge_index, interaction_graph.edge_type, interaction_graph.num_nodes))
    step("graph_statistics", lambda: _graph_statistics(graph.edge_index, graph.num_nodes, interaction_graph))
    return records


def main(argv: list[str]) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, required=True)
    parser.add_argument("--degree", type=float, default=20.0, help="average degree of the random graph")
    parser.add_argument("--expander-degree", type=int, default=30)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--profile", action="store_true", help="print the 25 costliest functions (cProfile)")
    args = parser.parse_args(argv)
    profiler = cProfile.Profile() if args.profile else None
    with tempfile.TemporaryDirectory() as tmp:
        if profiler:
            profiler.enable()
        started = time.perf_counter()
        records = run_steps(args, Path(tmp))
        total = time.perf_counter() - started
        if profiler:
            profiler.disable()
    summary = {
        "nodes": args.nodes, "mean_degree": args.degree, "expander_degree": args.expander_degree,
        "seconds_after_generate": round(total - records[0]["seconds"], 2),
        "peak_rss_mb_after_generate": max(r["peak_rss_mb"] for r in records[1:]),
        "steps": records,
    }
    print(json.dumps(summary))
    if profiler:
        pstats.Stats(profiler, stream=sys.stderr).sort_stats("cumulative").print_stats(25)


if __name__ == "__main__":
    main(sys.argv[1:])
