"""PyG's GPSConv against SGT on the same ZINC molecules: seconds per epoch, MAE, parameters, peak memory.

    python -m benchmarks.gps_zinc [--preset zinc_cpu] [--epochs N] [--batch-size B] [--seed 0]
                                  [--max-graphs N] [--skip-sgt] [--pairs N] [--out DIR]

The baseline is GraphGPS as PyTorch Geometric builds it for ZINC (GPSConv layers whose local branch is
GINEConv over the bond types, multi-head attention over each molecule, random-walk structural encodings of
20 steps; 10 layers of 64 channels, sum readout, L1 loss, Adam at 1e-3): Rampášek et al., "Recipe for a
General, Powerful, Scalable Graph Transformer", NeurIPS 2022. It reads the molecules through SGT's own
ZINC loader (sgt_core/data/zinc.py), so both models see the same graphs, split and targets (including the
stand-in training set when JT-VAE's train.txt is absent), the same batch size (the preset's
`train.batch_size` unless given) and the same number of epochs (the preset's unless given).

Each side runs in a fresh process with its own peak RSS (VmHWM). Seconds per epoch are both models' training
loop with the evaluation of validation and test each epoch (what SGT's train stage times); SGT's estimator
is reported beside it, also amortised over the preset's own budget (its epochs per wide-network epoch).
`--max-graphs N` keeps the first N molecules of each split for the baseline only (a smoke run; the SGT side
then still trains on all of them, and the report says so). Writes `<out>/gps_zinc.md` and `gps_zinc.json`.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

import numpy as np
import torch
from torch import nn
from torch_geometric.data import Data
from torch_geometric.loader import DataLoader
from torch_geometric.nn import GINEConv, GPSConv, global_add_pool
from torch_geometric.transforms import AddRandomWalkPE

REPO = Path(__file__).resolve().parents[1]
ZINC = "../shared/datasets/zinc"


class GPSZinc(nn.Module):
    r"""GraphGPS for ZINC from PyG's public layers: GPSConv(GINEConv local branch + global attention).

    Each atom's state is its type's embedding (width C - P) beside a linear map of its random-walk
    structural encoding (batch-normed return probabilities of walks of 1..K steps, width P); each bond's is
    its type's embedding (width C). Every layer is
    :math:`x \leftarrow \mathrm{MLP}(\mathrm{BN}(x + \mathrm{GINE}(x, e)) + \mathrm{BN}(x + \mathrm{MHA}(x)))`
    (GPSConv; attention only among the nodes of one molecule), and the graph's value is an MLP over the sum
    of its atoms' final states.

    Args:
        channels: C, the width of every layer.
        num_layers: GPSConv layers.
        pe_dim: P, the width of the structural encoding's share of the input.
        walk_length: K, the random-walk steps of the encoding (`AddRandomWalkPE`'s walk_length).
        heads: attention heads per layer.
        num_atom_types: atom type codes (ZINC's 28).
        num_bond_types: bond type codes (ZINC's 4, "none" included).
        attn_type: GPSConv's global attention, "multihead" or "performer".
    """

    def __init__(self, channels: int = 64, num_layers: int = 10, pe_dim: int = 8, walk_length: int = 20,
                 heads: int = 4, num_atom_types: int = 28, num_bond_types: int = 4,
                 attn_type: str = "multihead") -> None:
        super().__init__()
        self.atom_embedding = nn.Embedding(num_atom_types, channels - pe_dim)
        self.pe_norm = nn.BatchNorm1d(walk_length)
        self.pe_linear = nn.Linear(walk_length, pe_dim)
        self.bond_embedding = nn.Embedding(num_bond_types, channels)
        self.layers = nn.ModuleList()
        for _ in range(num_layers):
            local = GINEConv(nn.Sequential(nn.Linear(channels, channels), nn.ReLU(), nn.Linear(channels, channels)))
            self.layers.append(GPSConv(channels, local, heads=heads, attn_type=attn_type))
        self.head = nn.Sequential(nn.Linear(channels, channels // 2), nn.ReLU(),
                                  nn.Linear(channels // 2, channels // 4), nn.ReLU(), nn.Linear(channels // 4, 1))
        self.reset_parameters()

    def reset_parameters(self) -> None:
        for module in (self.atom_embedding, self.pe_norm, self.pe_linear, self.bond_embedding, *self.layers):
            module.reset_parameters()
        for module in self.head:
            if isinstance(module, nn.Linear):
                module.reset_parameters()

    def forward(self, atom: torch.Tensor, pe: torch.Tensor, edge_index: torch.Tensor, bond: torch.Tensor,
                batch: torch.Tensor) -> torch.Tensor:
        """atom int64 [N], pe float [N, K], edge_index int64 [2, E], bond int64 [E], batch int64 [N] -> [G, 1]."""
        x = torch.cat([self.atom_embedding(atom), self.pe_linear(self.pe_norm(pe))], dim=-1)  # [N, C]
        edge_attr = self.bond_embedding(bond)  # [E, C]
        for layer in self.layers:
            x = layer(x, edge_index, batch, edge_attr=edge_attr)  # [N, C]
        return self.head(global_add_pool(x, batch))  # [N, C] summed per graph -> [G, C] -> [G, 1]


def zinc_graphs(path: str = ZINC, walk_length: int = 20, max_graphs: int | None = None) -> dict[str, list[Data]]:
    """SGT's ZINC graph set (sgt_core/data/zinc.py) as PyG `Data` per molecule, by split, with their RWSE.

    Each Data: atom int64 [n], bond int64 [e], edge_index [2, e] (local numbering), y float [1, 1], pe [n, K].
    """
    from sgt_core.data.zinc import load_zinc

    graph_set = load_zinc(path)
    ptr = graph_set.graph_ptr.numpy()  # [G+1]
    source = graph_set.edge_index[0].numpy()
    # the loader's edges are sorted by source and never join two graphs: graph g's are one contiguous range
    edge_ptr = np.searchsorted(source, ptr)  # [G+1]
    add_pe = AddRandomWalkPE(walk_length=walk_length, attr_name="pe")
    splits: dict[str, list[Data]] = {}
    for split in ("train", "val", "test"):
        graphs = torch.nonzero(getattr(graph_set, f"{split}_mask")).flatten().tolist()
        for g in graphs[:max_graphs]:
            first, last, edges = ptr[g], ptr[g + 1], slice(edge_ptr[g], edge_ptr[g + 1])
            molecule = Data(atom=graph_set.x_cat[first:last, 0], bond=graph_set.edge_attr_cat[edges, 0],
                            edge_index=graph_set.edge_index[:, edges] - int(first), y=graph_set.y[g].view(1, 1),
                            num_nodes=int(last - first))
            splits.setdefault(split, []).append(add_pe(molecule))
    return splits


def mean_absolute_error(model: GPSZinc, loader: DataLoader) -> float:
    model.eval()
    total, count = 0.0, 0
    with torch.no_grad():
        for batch in loader:
            predicted = model(batch.atom, batch.pe, batch.edge_index, batch.bond, batch.batch)  # [G, 1]
            total += float((predicted - batch.y).abs().sum())
            count += batch.num_graphs
    return total / count


def train_gps(cfg: dict) -> dict:
    """Trains the baseline with `cfg` (epochs, batch_size, seed, max_graphs, path, model keys); its metrics."""
    torch.manual_seed(cfg["seed"])
    started = time.perf_counter()
    splits = zinc_graphs(cfg["path"], cfg["walk_length"], cfg["max_graphs"])
    prepare_s = time.perf_counter() - started
    loaders = {split: DataLoader(graphs, batch_size=cfg["batch_size"], shuffle=split == "train")
               for split, graphs in splits.items()}
    model = GPSZinc(channels=cfg["channels"], num_layers=cfg["num_layers"], pe_dim=cfg["pe_dim"],
                    walk_length=cfg["walk_length"], heads=cfg["heads"])
    optimizer = torch.optim.Adam(model.parameters(), lr=cfg["lr"], weight_decay=1e-5)
    scheduler = torch.optim.lr_scheduler.ReduceLROnPlateau(optimizer, mode="min", factor=0.5, patience=20,
                                                           min_lr=1e-5)
    best = {"val_mae": float("inf")}
    started = time.perf_counter()
    train_seconds = 0.0
    for epoch in range(cfg["epochs"]):
        model.train()
        epoch_started = time.perf_counter()
        for batch in loaders["train"]:
            optimizer.zero_grad()
            predicted = model(batch.atom, batch.pe, batch.edge_index, batch.bond, batch.batch)  # [G, 1]
            loss = (predicted - batch.y).abs().mean()
            loss.backward()
            optimizer.step()
        train_seconds += time.perf_counter() - epoch_started
        val_mae, test_mae = mean_absolute_error(model, loaders["val"]), mean_absolute_error(model, loaders["test"])
        scheduler.step(val_mae)
        if val_mae < best["val_mae"]:
            best = {"val_mae": val_mae, "test_mae": test_mae, "best_epoch": epoch}
    seconds = time.perf_counter() - started
    return {**best, "seconds": seconds, "seconds_per_epoch": seconds / max(1, cfg["epochs"]),
            "train_seconds_per_epoch": train_seconds / max(1, cfg["epochs"]), "prepare_seconds": prepare_s,
            "parameters": sum(p.numel() for p in model.parameters()),
            "graphs": {split: len(graphs) for split, graphs in splits.items()}}


def run_sgt(out: Path, preset: str, epochs: int, batch_size: int, seed: int, retrain: bool = False) -> dict:
    """SGT's preset on the same molecules through the benchmark harness (fresh process per stage, cached;
    `retrain`: the train stage trains again)."""
    from benchmarks.graph_level import run_one
    from benchmarks.run import open_benchmark_store
    from sgt_core.config import compose_config

    _folder, store = open_benchmark_store(str(out), "the GPS comparison")
    base = compose_config([f"+experiment={preset}"])
    settings = [] if batch_size == base["train"]["batch_size"] else [f"train.batch_size={batch_size}"]
    row = run_one(store, preset, "preset", seed, epochs if epochs != base["train"]["epochs"] else None, settings,
                  retrain=retrain)
    # graph_level's --epochs sets both networks' epochs
    estimator_epochs = epochs if epochs != base["train"]["epochs"] else base["estimator"]["epochs"]
    # the estimator's cost per wide-network epoch under the preset's own budget (its epochs / the train's)
    amortised = row["estimate_s"] / estimator_epochs * base["estimator"]["epochs"] / base["train"]["epochs"]
    return {**row, "estimate_s_per_train_epoch": amortised,
            "peak_mb": max(row[f"{stage}_peak_mb"] for stage in ("preprocess", "estimate", "export", "train"))}


def report(cfg: dict, gps: dict, sgt: dict | None, machine: str) -> str:
    lines = ["# PyG's GPSConv against SGT on ZINC", "", machine, "",
             (f"Same molecules (SGT's ZINC loader), batch size {cfg['batch_size']}, {cfg['epochs']} epochs each"
              + (f"; the baseline on the first {cfg['max_graphs']} molecules of each split only" if cfg["max_graphs"]
                 else "") + "."),
             "Re-run: `python -m benchmarks.gps_zinc " + " ".join(cfg["argv"]) + "`", "",
             ("| model | val MAE (best epoch) | test MAE | s/epoch | of which training | estimator s/epoch "
             "(amortised over the preset) | parameters | peak RSS MB |"), "|---|---|---|---|---|---|---|---|",
             (f"| PyG GPSConv (GINE + multi-head attention, {cfg['num_layers']} x {cfg['channels']}, RWSE "
              f"{cfg['walk_length']}) | {gps['val_mae']:.4f} | {gps['test_mae']:.4f} | {gps['seconds_per_epoch']:.2f} "
              f"| {gps['train_seconds_per_epoch']:.2f} | - | {gps['parameters']:,} | {gps['peak_rss_mb']:.0f} |")]
    if sgt:
        lines.append(f"| SGT, {sgt['preset']} ({sgt['budget']}) | {sgt['val']:.4f} | {sgt['test']:.4f} | "
                     f"{sgt['train_s_per_epoch']:.2f} | - | {sgt['estimate_s_per_train_epoch']:.2f} | "
                     f"{sgt['parameters']:,} | {sgt['peak_mb']:.0f} (largest stage) |")
        pairs = sgt.get("pairs") or [(gps["seconds_per_epoch"], sgt["train_s_per_epoch"])]
        ratio = statistics.median(sgt_s / gps_s for gps_s, sgt_s in pairs)
        with_estimator = (sgt["train_s_per_epoch"] + sgt["estimate_s_per_train_epoch"]) / gps["seconds_per_epoch"]
        each = ", ".join(f"{gps_s:.1f} / {sgt_s:.1f}" for gps_s, sgt_s in pairs)
        lines += ["", (f"- SGT's seconds per epoch / GPS's: **{ratio:.2f}×** (target ≤ 0.6×; the median over {len(pairs)} "
                      f"pair{'s' if len(pairs) > 1 else ''} run alternately, GPS / SGT s/epoch: {each}); with the "
                      f"estimator amortised: {with_estimator:.2f}×."),
                  f"- test MAE, SGT − GPS: {sgt['test'] - gps['test_mae']:+.4f} (target ≤ 0: no worse)."]
        for note in filter(None, (sgt.get("stand_in") or "").split(" | ")):
            lines.append(f"- Data (both models): {note}.")
    lines += ["", ("GPS preparation (loading, featurising, RWSE) took "
              f"{gps['prepare_seconds']:.0f} s, not counted in its epochs; molecules: {gps['graphs']}.")]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> None:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["gps"]:  # the worker: python -m benchmarks.gps_zinc gps CONFIG.json
        from benchmarks.stage_process import peak_rss_mb

        result = train_gps(json.loads(Path(argv[1]).read_text()))
        print(json.dumps({**result, "peak_rss_mb": peak_rss_mb()}))
        return
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--preset", default="zinc_cpu", choices=["zinc", "zinc_cpu"])
    parser.add_argument("--epochs", type=int, default=None, help="default: the preset's train.epochs")
    parser.add_argument("--batch-size", type=int, default=None, help="default: the preset's train.batch_size")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--max-graphs", type=int, default=None, help="the baseline's molecules per split (smoke)")
    parser.add_argument("--skip-sgt", action="store_true", help="the baseline only")
    parser.add_argument("--pairs", type=int, default=1,
                        help="runs of each side, alternating (GPS, SGT, GPS, ...); the report keeps the medians")
    parser.add_argument("--out", default=str(REPO / "artifacts" / "bench"))
    parser.add_argument("--report", action="store_true", help="only rewrite gps_zinc.md from gps_zinc.json")
    parser.add_argument("--reuse-gps", action="store_true",
                        help="take the baseline's result from <out>/gps_zinc.json when it ran with the same "
                             "epochs, batch size, molecules and seed (e.g. to compare another SGT preset)")
    args = parser.parse_args(argv)

    from benchmarks.graph_level import machine_line
    from benchmarks.run import run_in_process
    from sgt_core.artifacts import atomic_path
    from sgt_core.config import compose_config

    out = Path(args.out)
    if args.report:
        saved = json.loads((out / "gps_zinc.json").read_text())
        with atomic_path(out / "gps_zinc.md") as partial:
            partial.write_text(report(saved["config"], saved["gps"], saved["sgt"], saved.get("machine", "")))
        return
    base = compose_config([f"+experiment={args.preset}"])
    cfg = {"epochs": args.epochs or base["train"]["epochs"], "batch_size": args.batch_size or base["train"]["batch_size"],
           "seed": args.seed, "max_graphs": args.max_graphs, "path": base["dataset"]["path"], "channels": 64,
           "num_layers": 10, "pe_dim": 8, "walk_length": 20, "heads": 4, "lr": 1e-3, "argv": argv}
    out.mkdir(parents=True, exist_ok=True)
    saved = json.loads((out / "gps_zinc.json").read_text()) if (out / "gps_zinc.json").is_file() else None
    same = ("epochs", "batch_size", "seed", "max_graphs", "channels", "num_layers", "pe_dim", "walk_length", "heads")
    gps_runs, sgt_runs = [], []
    for pair in range(args.pairs):  # alternating, so that a slower spell of a shared machine weighs on both
        if args.reuse_gps and saved and all(saved["config"].get(key) == cfg[key] for key in same):
            gps_runs.append(saved["gps"])
        else:
            gps_runs.append(run_in_process("benchmarks.gps_zinc", "gps", cfg))
        print(json.dumps({"gps": {k: v for k, v in gps_runs[-1].items() if k != "graphs"}}), flush=True)
        if not args.skip_sgt:
            sgt_runs.append(run_sgt(out, args.preset, cfg["epochs"], cfg["batch_size"], args.seed, retrain=pair > 0))
    gps = {**gps_runs[0], **{key: statistics.median(run[key] for run in gps_runs)
                             for key in ("seconds_per_epoch", "train_seconds_per_epoch")}}
    sgt = None
    if sgt_runs:
        sgt = {**sgt_runs[0], "train_s_per_epoch": statistics.median(run["train_s_per_epoch"] for run in sgt_runs),
               "pairs": [(g["seconds_per_epoch"], s["train_s_per_epoch"]) for g, s in zip(gps_runs, sgt_runs)]}
    machine = machine_line()
    (out / "gps_zinc.json").write_text(json.dumps({"config": cfg, "gps": gps, "sgt": sgt, "machine": machine},
                                                  indent=2))
    with atomic_path(out / "gps_zinc.md") as partial:
        partial.write_text(report(cfg, gps, sgt, machine))
    print(f"wrote {out / 'gps_zinc.md'}")


if __name__ == "__main__":
    main()
