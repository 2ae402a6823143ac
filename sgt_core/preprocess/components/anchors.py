"""AnchorGT's receptive field: `anchor` and `khop` edges with SPD buckets, inside the graph or every graph."""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping

import numpy as np

from sgt_core.config.preprocess import AnchorsConfig
from sgt_core.preprocess.anchors import k_dominating_set, receptive_field_edges
from sgt_core.preprocess.components.base import ComponentOutput, GraphView
from sgt_core.preprocess.many_graphs.anchors import receptive_fields_per_graph

log = logging.getLogger(__name__)

# The anchors' random stream: numpy SeedSequence entropy [seed, stream], so switching another component on or
# off never changes what the anchors draw.
ANCHOR_STREAM = 1


class AnchorEdges:
    """Every node attends to its graph's k-dominating-set anchors and its k-hop nodes (AnchorGT, k = 2).

    One graph: `anchors.k_dominating_set` and `anchors.receptive_field_edges`. Many graphs: each graph's own
    anchors, anchor edges only to the node's own graph's anchors and SPDs from each graph's own distances
    (`many_graphs.anchors.receptive_fields_per_graph`). Either way an anchor or k-hop pair the expander already
    holds is dropped (the expander must stay regular; the pair is still attended, without its SPD), counted
    in `anchor_khop_pairs_on_expander`.
    """

    name = "anchors"

    def __init__(self, config: AnchorsConfig) -> None:
        self.config = config

    def __call__(self, graph: GraphView, earlier: Mapping[str, ComponentOutput]) -> ComponentOutput:
        started = time.perf_counter()
        config = self.config
        log.info("preprocess: anchors (k=%d) and k-hop edges", config.k)
        generator = np.random.default_rng([graph.seed, ANCHOR_STREAM])
        n = graph.num_real
        if graph.graphs is None:
            anchor_ids = k_dominating_set(graph.edges, n, config.k, generator)
            field = receptive_field_edges(
                graph.edges, n, anchor_ids, config.k, config.max_khop_per_node, generator,
                max_spd=config.max_spd, max_anchors_per_node=config.max_anchors_per_node,
            )
            edges = {name: (field[f"{name}_edge_index"], field[f"{name}_spd"]) for name in ("anchor", "khop")}
            field_stats = field["stats"]
        else:
            fields = receptive_fields_per_graph(
                graph.graphs, config.k, max_khop_per_node=config.max_khop_per_node,
                max_anchors_per_node=config.max_anchors_per_node, max_spd=config.max_spd, generator=generator)
            edges = {name: (np.stack([getattr(fields, f"{name}_src"), getattr(fields, f"{name}_dst")]),
                            getattr(fields, f"{name}_spd")) for name in ("anchor", "khop")}
            field_stats = fields.stats
        # Expander pairs take precedence (it must stay regular): drop anchor/k-hop pairs it already holds.
        taken = earlier["expander"].fields["pairs"] if "expander" in earlier else None
        blocks, kept, dropped = [], {}, 0
        for name in ("anchor", "khop"):
            pairs, spd = edges[name]  # [2, e], [e]
            if taken is not None and taken.size and pairs.size:
                keys = pairs[1] * n + pairs[0]  # [e]
                position = np.minimum(np.searchsorted(taken, keys), taken.size - 1)
                fresh = taken[position] != keys  # [e]
                dropped += int(np.count_nonzero(~fresh))
                pairs, spd = pairs[:, fresh], spd[fresh]
            blocks.append(graph.block(pairs[0], pairs[1], name, spd))
            kept[name] = int(spd.size)
        stats = {
            "num_anchors": field_stats["num_anchors"],
            # Table 3 of AnchorGT: the anchor count and the k-hop edges, as finally in the graph.
            "num_anchor_edges": kept["anchor"],
            "num_khop_edges": kept["khop"],
            "num_khop_saturated_nodes": field_stats["num_khop_saturated_nodes"],
            "num_uncovered_nodes": field_stats["num_uncovered_nodes"],
            "anchor_khop_pairs_on_expander": dropped,
            "seconds_anchors": time.perf_counter() - started,
        }
        return ComponentOutput(blocks=blocks, stats=stats)
