"""The appnp branch's top-k propagation rows for the train stage: computed once per graph and setting, kept in the store."""

from __future__ import annotations

import logging
import time
from pathlib import Path

import torch
import xxhash

from sgt_core.artifacts import ArtifactStore, fingerprint
from sgt_core.code_version import code_version
from sgt_core.config.model import ModelConfig
from sgt_core.layers import PropagationRows
from sgt_core.object_store import open_store
from sgt_core.preprocess.interaction_graph import GRAPH_EDGE_TYPE, InteractionGraph
from sgt_core.preprocess.outputs import INTERACTION_GRAPH_FILE
from sgt_core.sampling.propagation import appnp_top_k
from sgt_core.train.outputs import PROPAGATION, ROWS_FILE

__all__ = ["PROPAGATION", "ROWS_FILE", "ensure_propagation_rows", "kept_top_k", "propagation_key", "propagation_rows",
           "rows_key", "stored_key"]

log = logging.getLogger(__name__)

def graph_edges(graph: InteractionGraph) -> tuple[torch.Tensor, torch.Tensor]:
    """The input graph's own edges (source, target): with the node count, all that the rows depend on."""
    is_graph = graph.edge_type == GRAPH_EDGE_TYPE
    return graph.edge_index[0][is_graph], graph.edge_index[1][is_graph]


def propagation_rows(cfg: dict, graph: InteractionGraph) -> PropagationRows | None:
    """Every node's top-k rows for `model.local_top_k` (`kept_top_k`, in the store at `paths.artifacts`), else None."""
    setting = _setting(cfg)
    return None if setting is None else kept_top_k(open_store(cfg["paths"]["artifacts"]), *graph_edges(graph),
                                                   graph.num_nodes, *setting)


def propagation_key(cfg: dict, graph: InteractionGraph) -> str | None:
    """The store key of the rows `model.local_top_k` needs on `graph` (`rows_key`), None without it."""
    setting = _setting(cfg)
    return None if setting is None else rows_key(*graph_edges(graph), graph.num_nodes, *setting)


def stored_key(cfg: dict, preprocess_dir: Path) -> str | None:
    """`propagation_key` of the graph in the preprocess stage's folder: where `sgt stages` looks for the rows."""
    return None if _setting(cfg) is None else propagation_key(cfg, _load_graph(preprocess_dir))


def ensure_propagation_rows(cfg: dict, preprocess_dir: Path) -> None:
    """Computes and keeps the rows unless the store has them, without reading them: what a DDP run's train
    stage does once before its ranks start, so that every rank reads them rather than computing them."""
    setting = _setting(cfg)
    if setting is not None:
        graph = _load_graph(preprocess_dir)
        kept_top_k(open_store(cfg["paths"]["artifacts"]), *graph_edges(graph), graph.num_nodes, *setting, read=False)


def _load_graph(preprocess_dir: Path) -> InteractionGraph:
    return InteractionGraph.load(Path(preprocess_dir) / INTERACTION_GRAPH_FILE, compact=True)


def _setting(cfg: dict) -> tuple[int, float, int] | None:
    """(K, alpha, k) of the rows `model.local_top_k` asks for, None without them."""
    network = ModelConfig.from_dict(cfg["model"])
    if network.local_top_k is None:
        return None
    return network.local_steps, network.local_teleport, network.local_top_k


def rows_key(source: torch.Tensor, target: torch.Tensor, num_nodes: int, steps: int, teleport: float,
             top_k: int) -> str:
    """The rows' cache key: the graph's own edges and node count, K, alpha, k and the code that computes them.

    The edges, not the interaction graph's file: torch.save writes a new file for the same graph each time,
    and a preprocess option that leaves the graph's edges alone (the expander, virtual nodes, anchors)
    leaves the rows alone too.
    """
    edges = xxhash.xxh3_64()
    for column in (source, target):
        edges.update(column.contiguous().numpy())  # the array's own buffer: no copy of the edges
    return fingerprint({"graph_edges": edges.hexdigest(), "nodes": num_nodes, "local_steps": steps,
                        "local_teleport": teleport, "local_top_k": top_k,
                        "code": code_version("sgt_core.sampling.propagation")})


def kept_top_k(store: ArtifactStore, source: torch.Tensor, target: torch.Tensor, num_nodes: int, steps: int,
               teleport: float, top_k: int, read: bool = True) -> PropagationRows | None:
    """`appnp_top_k`'s rows, read from `store` when it has them for this graph and setting, else computed there.

    They are written atomically and checksummed like a stage's result, under `propagation/<rows_key>/`; a
    damaged copy is moved aside and computed again. Returns them, or None with `read=False` when the store
    had them already (only making sure that it has them).
    """
    key = rows_key(source, target, num_nodes, steps, teleport, top_k)
    if store.reuse(PROPAGATION, key, checksums=True):
        if not read:
            return None
        saved = torch.load(store.local(PROPAGATION, key) / ROWS_FILE, weights_only=True)
        log.info("top-%d propagation rows of %d nodes read from %s", top_k, num_nodes, store.location(PROPAGATION, key))
        return PropagationRows(saved["neighbours"].long(), saved["weights"])
    started = time.perf_counter()
    rows = appnp_top_k(source, target, num_nodes, steps, teleport, top_k)
    seconds = time.perf_counter() - started
    # int32 node ids where they fit: the file is a third smaller (8 bytes per slot, not 12)
    neighbours = rows.neighbours.int() if num_nodes < 2**31 else rows.neighbours
    with store.writing(PROPAGATION, key) as staging:
        torch.save({"neighbours": neighbours, "weights": rows.weights}, staging / ROWS_FILE)
        store.finish(staging, {"seconds": seconds, "nodes": num_nodes, "graph_edges": source.numel()},
                     {"stage": PROPAGATION, "key": key, "local_steps": steps, "local_teleport": teleport,
                      "local_top_k": top_k})
    log.info("top-%d propagation rows of %d nodes computed in %.1f s, kept at %s", top_k, num_nodes, seconds,
             store.location(PROPAGATION, key))
    return rows
