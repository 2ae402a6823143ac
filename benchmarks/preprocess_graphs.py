"""Time and memory of the preprocess stage's building on a dataset of many small graphs, per component.

    python -m benchmarks.preprocess_graphs --standin zinc [--graphs 12000] [OVERRIDES ...]
    python -m benchmarks.preprocess_graphs --standin pattern [--graphs 14000] preprocess.substructures.enabled=false
    python -m benchmarks.preprocess_graphs dataset=zinc [OVERRIDES ...]       # a dataset config (loaders' graphs)

Every component is on unless an override says otherwise (`ALL_ON`: the expander at the config's degree, one
virtual node per graph, AnchorGT's anchors with k = 2, DeepGraph's substructure tokens, SAN's LPE). The
graphs are a dataset config's (`dataset=...`, through `load_dataset`) or a seeded stand-in generated here
(`benchmarks.graph_standins`: ZINC-like molecules, PATTERN-like SBMs). The steps are the preprocess stage's
after loading: `stage.build_preprocessed` (tokens, then the interaction graph), saving both, the in-degree
histograms and the stage's graph statistics. Each step reports wall and CPU seconds and its own peak RSS
(VmHWM, reset before the step, and the RSS it started from); the build also its components' seconds (the builder's `seconds_*` stats),
nanoseconds per edge of each component's own edge type, and the interaction graph's bytes per edge (its
tensors in memory, and on disk). A watchdog thread ends the run (exit status 3) when the RSS passes
`--memory-limit-gb` (default 20), so a shared machine never runs out of memory. Prints one JSON record per
step on stderr and a summary (JSON, then the markdown table of benchmarks/results/) on stdout.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import threading
import time
from pathlib import Path

import torch

from benchmarks.graph_standins import pattern_like, zinc_like
from benchmarks.preprocess_scale import reset_peak
from flows.memory import status_mb
from sgt_core.config import compose_config
from sgt_core.config.preprocess import PreprocessConfig
from sgt_core.data import load_dataset
from sgt_core.preprocess.degrees import in_degree_histograms
from sgt_core.preprocess.stage import _graph_statistics, build_preprocessed, check_size_limits, limited_size

ALL_ON = ["preprocess.virtual_nodes=1", "preprocess.anchors.enabled=true", "preprocess.substructures.enabled=true",
          "preprocess.lpe.enabled=true"]
STANDINS = {"zinc": (zinc_like, 12_000), "pattern": (pattern_like, 14_000)}
# A component's seconds (the builder's stats) and the edge type its edges have.
COMPONENTS = {"substructures": ("seconds_substructures", "substructure"), "expander": ("seconds_expander", "expander"),
              "anchors": ("seconds_anchors", ("anchor", "khop")), "lpe": ("seconds_lpe", None),
              "edges (graph, self, virtual, merge)": ("seconds_edges", None)}


def watchdog(limit_gb: float, interval: float = 0.2) -> None:
    """Ends the process (exit status 3) once its RSS passes `limit_gb`, from a daemon thread."""
    import psutil

    process, limit = psutil.Process(), limit_gb * 2**30

    def run() -> None:
        while True:
            rss = process.memory_info().rss
            if rss > limit:
                print(json.dumps({"watchdog": f"RSS {rss / 2**30:.1f} GB passed {limit_gb} GB: stopped"}),
                      file=sys.stderr, flush=True)
                os._exit(3)
            time.sleep(interval)

    threading.Thread(target=run, name="memory-watchdog", daemon=True).start()


def tensor_bytes(value) -> int:
    """Bytes of the tensors in a dataclass's fields (lists and dicts of them included)."""
    if isinstance(value, torch.Tensor):
        return value.numel() * value.element_size()
    if isinstance(value, dict):
        return sum(tensor_bytes(item) for item in value.values())
    if isinstance(value, list | tuple):
        return sum(tensor_bytes(item) for item in value)
    return 0


def run_steps(cfg: dict, standin: str | None, num_graphs: int | None, seed: int, out_dir: Path) -> list[dict]:
    records = []

    def step(name: str, work):
        reset_peak()
        before = status_mb("VmRSS") or 0.0
        started, cpu_started = time.perf_counter(), time.process_time()
        result = work()
        records.append({"step": name, "seconds": round(time.perf_counter() - started, 2),
                        "cpu_seconds": round(time.process_time() - cpu_started, 2),
                        "peak_rss_mb": round(status_mb("VmHWM") or 0.0), "rss_before_mb": round(before)})
        print(json.dumps(records[-1]), file=sys.stderr, flush=True)
        return result

    if standin:
        make, default_count = STANDINS[standin]
        graph = step("generate", lambda: make(num_graphs or default_count, seed))
    else:
        graph = step("load", lambda: load_dataset(cfg["dataset"], seed=seed))
    preprocess = PreprocessConfig.from_dict(cfg["preprocess"])
    check_size_limits(preprocess, *limited_size(graph))
    ptr = getattr(graph, "graph_ptr", None)
    records[-1].update(graphs=1 if ptr is None else int(ptr.numel() - 1), nodes=graph.num_nodes,
                       input_edges=int(graph.edge_index.shape[1]))
    interaction_graph, tokens, metrics = step("build", lambda: build_preprocessed(preprocess, graph, seed))
    stats = {**interaction_graph.stats, **metrics}
    edges = interaction_graph.num_edges
    build = records[-1]
    build.update(edges=edges, nodes_with_added=interaction_graph.num_nodes,
                 edge_counts=interaction_graph.edge_type_counts(),
                 bytes_per_edge_in_memory=round(tensor_bytes(vars(interaction_graph)) / max(edges, 1), 1),
                 ns_per_edge=round(build["seconds"] * 1e9 / max(edges, 1), 1),
                 cpu_ns_per_edge=round(build["cpu_seconds"] * 1e9 / max(edges, 1), 1),
                 peak_rss_increase_bytes_per_edge=round(
                     (build["peak_rss_mb"] - build["rss_before_mb"]) * 2**20 / max(edges, 1), 1))
    components = {}
    for name, (key, types) in COMPONENTS.items():
        if key not in stats:
            continue
        own = sum(interaction_graph.edge_type_counts()[t] for t in ((types,) if isinstance(types, str) else types or ()))
        components[name] = {"seconds": round(stats[key], 2), "edges": own,
                            "ns_per_own_edge": round(stats[key] * 1e9 / own, 1) if own else None,
                            "ns_per_edge": round(stats[key] * 1e9 / max(edges, 1), 1)}
    build["components"] = components
    build["stats"] = {key: value for key, value in stats.items()
                      if key.startswith(("expander_", "num_anchors", "num_tokens", "lpe_", "num_khop"))}
    path = out_dir / "interaction_graph.pt"
    step("save", lambda: (interaction_graph.save(path), tokens.save(out_dir / "substructures.npz") if tokens else None))
    records[-1]["file_bytes_per_edge"] = round(path.stat().st_size / max(edges, 1), 1)
    step("in_degree_histograms", lambda: in_degree_histograms(
        interaction_graph.edge_index, interaction_graph.edge_type, interaction_graph.num_nodes))
    step("graph_statistics", lambda: _graph_statistics(graph.edge_index, graph.num_nodes, interaction_graph))
    return records


def markdown(summary: dict) -> str:
    """The summary as the tables of benchmarks/results/."""
    build = next(r for r in summary["records"] if r["step"] == "build")
    lines = [f"#### {summary['dataset']}: {build.get('edges'):,} interaction-graph edges",
             "", "| step | wall s | CPU s | peak RSS MB |", "|---|---:|---:|---:|"]
    lines += [f"| {r['step']} | {r['seconds']} | {r['cpu_seconds']} | {r['peak_rss_mb']} |" for r in summary["records"]]
    lines += ["", "| component | s (wall) | own edges | ns per own edge | ns per edge of H |", "|---|---:|---:|---:|---:|"]
    lines += [f"| {name} | {c['seconds']} | {c['edges']:,} | {c['ns_per_own_edge'] or '-'} | {c['ns_per_edge']} |"
              for name, c in build["components"].items()]
    lines += ["", f"build: {build['ns_per_edge']} ns per edge (wall), {build['cpu_ns_per_edge']} (CPU); "
              f"{build['bytes_per_edge_in_memory']} bytes per edge in memory, peak RSS growth "
              f"{build['peak_rss_increase_bytes_per_edge']} bytes per edge; edges by type: "
              + ", ".join(f"{k} {v:,}" for k, v in build["edge_counts"].items())]
    return "\n".join(lines)


def main(argv: list[str]) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--standin", choices=sorted(STANDINS), help="generate a stand-in set instead of a dataset")
    parser.add_argument("--graphs", type=int, help="graphs of the stand-in (default: the full set's)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--memory-limit-gb", type=float, default=20.0)
    parser.add_argument("overrides", nargs="*", help="Hydra overrides on top of ALL_ON, e.g. dataset=zinc")
    args = parser.parse_args(argv)
    watchdog(args.memory_limit_gb)
    cfg = compose_config([*ALL_ON, *args.overrides])
    with tempfile.TemporaryDirectory() as tmp:
        records = run_steps(cfg, args.standin, args.graphs, args.seed, Path(tmp))
    summary = {"dataset": f"{args.standin}-like stand-in" if args.standin else cfg["dataset"]["name"],
               "overrides": [*ALL_ON, *args.overrides], "torch_threads": torch.get_num_threads(),
               "cpus": os.cpu_count(), "records": records,
               "seconds_after_loading": round(sum(r["seconds"] for r in records[1:]), 2),
               "cpu_seconds_after_loading": round(sum(r["cpu_seconds"] for r in records[1:]), 2)}
    print(json.dumps(summary))
    print(markdown(summary))
    return summary


if __name__ == "__main__":
    main(sys.argv[1:])
