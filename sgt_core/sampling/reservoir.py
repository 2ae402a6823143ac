"""Vectorised reservoir sampling of a fixed number of neighbours per node from attention scores."""

from __future__ import annotations

import torch
from torch import Tensor

from sgt_core.kernels import cpu_kernels, draw_seed, usable
from sgt_core.layers import FullLayer, PropagationRows, SampledLayer
from sgt_core.sampling.buckets import padded_buckets

SAMPLERS = ("reservoir", "uniform", "topk")  # their codes in the compiled kernel are their positions here
# "full" skips sampling: every layer attends over the whole interaction graph (Exphormer-style baseline)
TRAIN_SAMPLERS = (*SAMPLERS, "full")


def sample_neighbours(
    ptr: Tensor,
    scores: Tensor,
    degree: int,
    *,
    nodes: Tensor | None = None,
    method: str = "reservoir",
    generator: torch.Generator | None = None,
) -> tuple[Tensor, Tensor]:
    r"""Draws `degree` incoming edges per node without replacement, all nodes at once.

    Reservoir sampling (Efraimidis & Spirakis 2006; Spexphormer Algorithm 1): with u ~ U(0, 1) per
    candidate edge, the `degree` edges with the largest keys log(u) / a are a weighted sample without
    replacement with weights a. The paper makes this GPU-friendly by padding every node's candidates to
    the largest neighbourhood and taking one top-k; on skewed graphs (a hub with thousands of
    neighbours) that matrix is huge, so here nodes are grouped by in-degree into power-of-two buckets
    (`padded_buckets`), each padded only to its own width and given one batched top-k.
    On the CPU the compiled kernel (`sgt::sample_neighbours`, sgt_core/kernels/sampling.cpp) does the
    same per node with a counter-based generator seeded from `generator`: no padding, and ~20x faster
    than torch's serial Mersenne Twister plus top-k.

    Nodes with fewer candidates than `degree` keep all of them and the remaining slots are masked
    (rather than filled by drawing with replacement, as the paper's reference code does): masking keeps
    the attention over a small neighbourhood exact instead of double-counting repeated neighbours.

    Args:
        ptr: int64 [N+1] CSR pointer over destination nodes; node i's candidates are edges ptr[i]:ptr[i+1].
        scores: float [E] sampling weight of each edge (the estimator's attention scores).
        degree: neighbours to draw per node.
        nodes: int64 [Q] nodes to sample for (default: all N).
        method: "reservoir" (weighted by scores), "uniform" (ignores them) or "topk" (the `degree`
            highest-scored edges, the paper's "max" ablation; ties broken at random).
        generator: torch random generator on the scores' device.

    Returns:
        edges: int64 [Q, degree] sampled edge ids (-1 in masked slots).
        mask: bool [Q, degree] True where a slot holds an edge.
    """
    if method not in SAMPLERS:
        raise ValueError(f"unknown sampler {method!r}; expected one of {SAMPLERS}")
    device = scores.device
    if usable(ptr, scores) and scores.dtype == torch.float32:
        return _sample_compiled(ptr, scores, degree, nodes, method, generator)
    if nodes is None:
        nodes = torch.arange(ptr.numel() - 1, device=device)
    starts = ptr[nodes]  # [Q]
    counts = ptr[nodes + 1] - starts  # [Q]
    edges = torch.full((nodes.numel(), degree), -1, dtype=torch.long, device=device)  # [Q, degree]

    for rows, candidates, valid in padded_buckets(starts, counts, padding=0):  # candidates [n_b, w] edge ids
        keys = _sampling_keys(scores[candidates], method, generator)  # [n_b, w]
        keys = keys.masked_fill(~valid, float("-inf"))  # padding ranks below every real candidate
        _picked_keys, picked = keys.topk(min(degree, candidates.shape[1]), dim=1)  # [n_b, k]
        picked_edges = candidates.gather(1, picked)  # [n_b, k]
        picked_edges = picked_edges.masked_fill(~valid.gather(1, picked), -1)
        edges[rows, : picked.shape[1]] = picked_edges
    return edges, edges >= 0


def _sample_compiled(
    ptr: Tensor, scores: Tensor, degree: int, nodes: Tensor | None, method: str, generator: torch.Generator | None
) -> tuple[Tensor, Tensor]:
    """`sample_neighbours` through the compiled kernel: the same keys, one node per loop iteration."""
    nodes = nodes.contiguous() if nodes is not None else None
    edges = cpu_kernels().sample_neighbours(ptr.contiguous(), scores.contiguous(), nodes, degree,
                                            SAMPLERS.index(method), draw_seed(generator))  # [Q, degree]
    return edges, edges >= 0


def _sampling_keys(weights: Tensor, method: str, generator: torch.Generator | None) -> Tensor:
    """Per-candidate keys whose top-k is the sample; real candidates always stay above -inf padding."""
    uniform = torch.rand(weights.shape, device=weights.device, generator=generator).clamp_min_(1e-12)
    if method == "uniform":
        return uniform
    if method == "topk":  # highest score first; the uniform term only breaks exact ties
        return weights.double() + uniform.double() * 1e-12
    # log(u) / a; a zero weight gives -inf, clamped to the lowest finite value so it is drawn last
    # but still before padding.
    return (uniform.log() / weights).clamp_min(torch.finfo(weights.dtype).min)


class LayerSampler:
    """Holds a graph and its per-layer scores; samples full-graph layers or a batch's layers on demand.

    Args:
        edge_index (Tensor): [2, E] the interaction graph's edges (src, dst), sorted by dst, on the target
            device; int64 or a compact graph's narrower dtype, as `edge_type` (sampled slots are int64
            either way).
        edge_type (Tensor): [E] each edge's type.
        ptr (Tensor): [N + 1] the CSR offsets of the edges over dst.
        layer_scores (Tensor): float [L, E] sampling weights per layer.
        degrees (Iterable[int]): deg_l per layer.
        method (str): "reservoir", "uniform", "topk" or "full".
        generator (torch.Generator | None): torch generator on the same device.
        edge_spd (Tensor | None): int64 [E] SPD buckets carried into the sampled layers (None: no SPD
            encoding).
        edge_attr (Tensor | None): [E] categorical edge-feature codes carried into the sampled layers (None:
            none).
        edge_features (Tensor | None): float [E, Fe] continuous edge features carried into the sampled
            layers, [Q, deg, Fe] per layer (None: none).
        propagation: every node's top-k propagation rows [N, k] (`appnp_top_k`), carried into every layer for
            the local branch, or None. Not sampled: a batch's layers add each query's k rows to their input.
    """

    def __init__(
        self, edge_index, edge_type, ptr, layer_scores, degrees, method, generator, edge_spd=None,
        propagation: PropagationRows | None = None, edge_attr=None, edge_features=None,
    ) -> None:
        self.edge_index, self.edge_type, self.ptr, self.edge_spd = edge_index, edge_type, ptr, edge_spd
        self.edge_attr, self.edge_features = edge_attr, edge_features
        self.propagation = propagation
        self.layer_scores, self.degrees, self.method, self.generator = layer_scores, list(degrees), method, generator
        self._full_layer: FullLayer | None = None
        self._position: Tensor | None = None  # `_positions`' table, allocated on first use

    def layer(self, scores: Tensor, degree: int, nodes: Tensor | None = None) -> tuple:
        """Samples one layer, `degree` neighbours weighted by `scores` [E], for `nodes` (default all).

        Returns:
            Global neighbour ids, edge types, SPD buckets (None without `edge_spd`), mask and feature codes
            (None without `edge_attr`), each [Q, deg]; and the continuous features [Q, deg, Fe] (None without
            `edge_features`).
        """
        edges, mask = sample_neighbours(self.ptr, scores, degree, nodes=nodes, method=self.method,
                                        generator=self.generator)
        safe_edges = edges.clamp_min(0)  # [Q, deg] masked slots point at edge 0 and are ignored through the mask
        types, spd, attr, features = self.edge_columns(safe_edges)
        return self.edge_index[0][safe_edges].long(), types, spd, mask, attr, features

    def edge_columns(self, edges: Tensor) -> tuple[Tensor, Tensor | None, Tensor | None, Tensor | None]:
        """The type, SPD bucket, feature code and continuous features of `edges` (any shape [...]): int64 per
        entry, whatever the graph holds (a compact graph's int32 / int8 / int16), and None for what it lacks."""
        spd = self.edge_spd[edges].long() if self.edge_spd is not None else None
        attr = self.edge_attr[edges].long() if self.edge_attr is not None else None
        features = self.edge_features[edges] if self.edge_features is not None else None  # [..., Fe]
        return self.edge_type[edges].long(), spd, attr, features

    def full(self) -> list[SampledLayer | FullLayer]:
        """Every layer's graph for all nodes at once (full-graph training and inference)."""
        if self.method == "full":
            if self._full_layer is None:  # int64 edges, as the full-graph attention takes them: built once
                spd = self.edge_spd.long() if self.edge_spd is not None else None
                attr = self.edge_attr.long() if self.edge_attr is not None else None
                self._full_layer = FullLayer(self.edge_index.long(), self.edge_type.long(), self.ptr.diff(), spd,
                                             self.propagation, attr, self.edge_features)
            return [self._full_layer] * len(self.degrees)
        all_nodes = torch.arange(self.ptr.numel() - 1, device=self.edge_index.device)
        layers: list[SampledLayer | FullLayer] = []
        for scores, degree in zip(self.layer_scores, self.degrees):
            neighbours, types, spd, mask, attr, features = self.layer(scores, degree)
            layers.append(SampledLayer(all_nodes, neighbours, types, mask, spd, self.propagation, attr, features))
        return layers

    def _positions(self, nodes: Tensor, queries: Tensor) -> Tensor:
        """A table of every node's row: node nodes[r] at r (`queries` = 0..n-1); other entries are stale.

        One [N] table kept across batches and written at the batch's n entries only: O(n) per batch, where
        a fresh table would be O(N) and searching the sorted ids O(slots log n).
        """
        if self._position is None or self._position.device != nodes.device:
            self._position = torch.zeros(self.ptr.numel() - 1, dtype=torch.int64, device=nodes.device)
        self._position[nodes] = queries
        return self._position

    def closed_batch(self, nodes: Tensor) -> list[SampledLayer]:
        """Every layer for a node set that holds all its nodes' candidates (whole graphs of a dataset of many).

        Algorithm 2 with every node of the set a target: each layer's queries are all of `nodes`, and since
        no candidate lies outside the set, no layer needs more rows, so the layers are the set's own
        full-graph layers, sampled for its nodes only, in the local numbering of `nodes` (ascending).
        """
        queries = torch.arange(nodes.numel(), device=nodes.device)
        position = self._positions(nodes, queries)
        layers = []
        for scores, degree in zip(self.layer_scores, self.degrees):
            neighbours, types, spd, mask, attr, features = self.layer(scores, degree, nodes=nodes)
            local = position[neighbours]  # [n, deg]
            local = torch.where(mask, local, queries.unsqueeze(1))  # masked slots point at the query itself
            layers.append(SampledLayer(queries, local, types, mask, spd, None, attr, features))
        return layers

    def closed_whole(self, nodes: Tensor) -> SampledLayer:
        """Every candidate of every node of a closed set (whole graphs) as one layer's slots: sampler=full's
        layer for a batch of graphs, in the local numbering of `nodes` (ascending).

        Sampling is the identity when the degree keeps every neighbour, so no draw is made: the slots are
        each node's incoming edges in edge order, padded to the set's largest in-degree and masked. The same
        attention as the edge-list form (`SampledAttention.forward_full`), run by the fused slot kernels
        instead of a dozen [E, D] elementwise passes; every layer shares it. O(n * widest) per batch, which on
        graphs of similar sizes is a small multiple of their edges.
        """
        starts = self.ptr[nodes]
        in_degree = self.ptr[nodes + 1] - starts  # [n]
        width = int(in_degree.max()) if nodes.numel() else 0
        slots = torch.arange(width, device=nodes.device)  # [w]
        mask = slots < in_degree.unsqueeze(1)  # [n, w]
        # padding points at the node's first edge (or edge 0) and is ignored through the mask
        edges = torch.where(mask, starts.unsqueeze(1) + slots, starts.clamp_max(self.ptr[-1] - 1).unsqueeze(1))
        queries = torch.arange(nodes.numel(), device=nodes.device)
        local = self._positions(nodes, queries)[self.edge_index[0][edges].long()]  # [n, w]
        local = torch.where(mask, local, queries.unsqueeze(1))  # masked slots point at the query itself
        types, spd, attr, features = self.edge_columns(edges)
        return SampledLayer(queries, local, types, mask, spd, None, attr, features)

    def batch(self, targets: Tensor) -> tuple[Tensor, list[SampledLayer]]:
        """Layer-wise neighbourhood sampling for a batch of target nodes (Spexphormer Algorithm 2).

        Working backwards from the last layer: the queries of layer l are the nodes layer l+1 needs
        (the targets for l = L); each samples deg_l neighbours, and the layer's input node set is the union
        of queries and sampled neighbours (and, with `propagation`, each query's k propagation rows). Only
        those nodes are computed, so a batch costs at most |B| * prod(deg_l + k + 1) node updates however
        large the graph is.

        Returns:
            input_nodes: int64 [N_1] global ids of the first layer's input rows (sorted).
            layers: per layer, a SampledLayer in the local row numbering of that layer's input; the last
                layer's output rows are the targets, in the order given.
        """
        needed = targets  # global ids of the rows layer l must output, V^(l+1)
        layers: list[SampledLayer] = []
        # By index: reversed() on a tensor is flip(0), a copy of every layer's scores for every batch.
        for layer in reversed(range(len(self.degrees))):
            neighbours, types, spd, mask, attr, features = self.layer(self.layer_scores[layer],
                                                                      self.degrees[layer], nodes=needed)
            # Masked slots point at the query itself, so every id below is in the layer's node set.
            neighbours = torch.where(mask, neighbours, needed.unsqueeze(1))  # [Q, deg]
            reached = self.propagation.neighbours[needed] if self.propagation is not None else None  # [Q, k]
            # V^(l) = Q^(l) ∪ K^(l); torch.unique sorts, so searchsorted maps global ids to local rows.
            inputs = torch.unique(torch.cat([needed, neighbours.flatten(),
                                             *(() if reached is None else (reached.flatten(),))]))  # [N_l]
            layers.append(SampledLayer(
                queries=torch.searchsorted(inputs, needed),  # [Q]
                neighbours=torch.searchsorted(inputs, neighbours),  # [Q, deg]
                neighbour_type=types,
                neighbour_mask=mask,
                neighbour_spd=spd,
                propagation=None if reached is None else PropagationRows(
                    torch.searchsorted(inputs, reached), self.propagation.weights[needed]),  # [Q, k] each
                neighbour_attr=attr,
                neighbour_features=features,
            ))
            needed = inputs
        layers.reverse()
        return needed, layers
