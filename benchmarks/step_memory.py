"""Measures the memory and time of training epochs alone, for one batch size, in a fresh process (Figure 5).

    python -m benchmarks.step_memory CONFIG.json PREPROCESS_DIR EXPORT_DIR

The train stage's peak RSS also holds the interpreter, torch, the interaction graph and the scores, which
on graphs of Minesweeper's size outweigh a whole full-graph training step; the paper's Figure 5 is about
the step. So this process builds what the train stage builds, then resets its high-water mark (VmHWM,
through /proc/self/clear_refs) and trains a few epochs the way the train stage does: what it reports is
the memory the epochs add on top of the loaded data, and their time.
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

import torch
import torch.nn.functional as F

from sgt_core.export.scores import SCORES_DIR, read_attention_scores
from sgt_core.models import NodeExtras, Spexphormer
from sgt_core.optim import AdamW
from sgt_core.preprocess.interaction_graph import INTERACTION_GRAPH_FILE, NODE_KINDS, InteractionGraph
from sgt_core.sampling import LayerSampler
from sgt_core.seeding import seed_everything
from sgt_core.train.allocator import set_mmap_threshold

EPOCHS = 3


def memory_kb(field: str) -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(f"{field}:"):
            return int(line.split()[1])
    raise RuntimeError(f"/proc/self/status has no {field}")


def main(argv: list[str]) -> None:
    config_path, preprocess_dir, export_dir = argv
    cfg = json.loads(Path(config_path).read_text())
    model_cfg, options = cfg["model"], cfg["train"]
    # Every block of 64 KiB or more gets its own mapping, returned to the system when freed: the resident
    # set then follows live tensors instead of what a fragmented heap happens to keep.
    set_mmap_threshold(64)
    seed_everything(cfg["seed"])
    graph = InteractionGraph.load(Path(preprocess_dir) / INTERACTION_GRAPH_FILE)
    scores = read_attention_scores(Path(export_dir) / SCORES_DIR, graph.edge_index)
    extras = NodeExtras.from_graph(graph, NODE_KINDS.index("substructure"))
    generator = torch.Generator().manual_seed(cfg["seed"])
    sampler = LayerSampler(graph.edge_index, graph.edge_type, graph.ptr, scores, model_cfg["degrees"],
                           options["sampler"], generator, graph.edge_spd if graph.num_spd_buckets else None)
    model = Spexphormer(**graph.model_input_sizes(), hidden=model_cfg["hidden"], num_layers=model_cfg["num_layers"],
                        heads=model_cfg["heads"], dropout=model_cfg["dropout"], deepnorm=model_cfg["deepnorm"],
                        lpe_dim=model_cfg["lpe_dim"], lpe_layers=model_cfg["lpe_layers"],
                        lpe_heads=model_cfg["lpe_heads"])
    optimizer = AdamW(model.parameters(), lr=options["lr"], weight_decay=options["weight_decay"])
    train_nodes = graph.train_mask.nonzero().flatten()
    batch_size = options["batch_size"]

    def epoch() -> None:
        model.train()
        if batch_size is None:
            chunks = [train_nodes]
        else:  # as the train stage: shuffled batches, a last batch of one row merged into the one before
            chunks = list(train_nodes[torch.randperm(train_nodes.numel(), generator=generator)].split(batch_size))
            if len(chunks) > 1 and chunks[-1].numel() < 2:
                chunks[-2:] = [torch.cat(chunks[-2:])]
        for chunk in chunks:
            if batch_size is None:
                logits = model(graph.x, graph.node_kind, sampler.full(), extras)[chunk]
            else:
                input_nodes, layers = sampler.batch(chunk)
                logits = model(graph.x[input_nodes], graph.node_kind[input_nodes], layers, extras.select(input_nodes))
            loss = F.cross_entropy(logits, graph.y[chunk])
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()

    epoch()  # the optimizer's state and the allocator's pools exist from here on, as in a long run
    Path("/proc/self/clear_refs").write_text("5")  # VmHWM := VmRSS
    resident_kb = memory_kb("VmRSS")
    started = time.perf_counter()
    for _ in range(EPOCHS):
        epoch()
    seconds = (time.perf_counter() - started) / EPOCHS
    print(json.dumps({"batch_size": batch_size or "full graph", "resident_before_mb": resident_kb / 1024,
                      "epoch_peak_mb": memory_kb("VmHWM") / 1024,
                      "epoch_added_mb": (memory_kb("VmHWM") - resident_kb) / 1024, "seconds_per_epoch": seconds}))


if __name__ == "__main__":
    main(sys.argv[1:])
