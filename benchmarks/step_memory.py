"""Measures the memory and time of training epochs alone, for one batch size, in a fresh process (Figure 5).

    python -m benchmarks.step_memory CONFIG.json PREPROCESS_DIR EXPORT_DIR

The train stage's peak RSS also holds the interpreter, torch, the interaction graph and the scores, which
on graphs of Minesweeper's size outweigh a whole full-graph training step; the paper's Figure 5 is about
the step. So this process builds what the train stage builds (`WideNetworkTraining`), then resets its
high-water mark (VmHWM, through /proc/self/clear_refs) and trains a few epochs: what it reports is the
memory the epochs add on top of the loaded data, and their time. `make bench` starts it with glibc's
MALLOC_MMAP_THRESHOLD_ at 64 KiB (benchmarks/run.py), so that its resident set follows live tensors.
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

import torch

from flows.memory import status_mb
from sgt_core.export.outputs import SCORES_DIR
from sgt_core.export.scores import read_attention_scores
from sgt_core.preprocess.interaction_graph import InteractionGraph
from sgt_core.preprocess.outputs import INTERACTION_GRAPH_FILE
from sgt_core.seeding import seed_everything
from sgt_core.train.stage import WideNetworkTraining

EPOCHS = 3


def main(argv: list[str]) -> None:
    config_path, preprocess_dir, export_dir = argv
    cfg = json.loads(Path(config_path).read_text())
    seed_everything(cfg["seed"])
    graph = InteractionGraph.load(Path(preprocess_dir) / INTERACTION_GRAPH_FILE)
    scores = read_attention_scores(Path(export_dir) / SCORES_DIR, graph.edge_index)
    training = WideNetworkTraining.build(cfg, graph, scores, torch.device("cpu"))
    train_nodes = graph.train_mask.nonzero().flatten()

    training.train_epoch(train_nodes)  # the optimizer's state and the allocator's pools exist from here on
    Path("/proc/self/clear_refs").write_text("5")  # VmHWM := VmRSS
    resident_mb = status_mb("VmRSS")
    started = time.perf_counter()
    for _ in range(EPOCHS):
        training.train_epoch(train_nodes)
    seconds = (time.perf_counter() - started) / EPOCHS
    peak_mb = status_mb("VmHWM")
    print(json.dumps({"batch_size": training.batch_size or "full graph", "resident_before_mb": resident_mb,
                      "epoch_peak_mb": peak_mb, "epoch_added_mb": peak_mb - resident_mb,
                      "seconds_per_epoch": seconds}))


if __name__ == "__main__":
    main(sys.argv[1:])
