"""PPRGo's top-k rows of APPNP's K-step propagation operator: the appnp branch's K hops as one fixed-width hop."""

from __future__ import annotations

import numpy as np
import scipy.sparse as sp
import torch
from torch import Tensor

from sgt_core.kernels import cpu_kernels
from sgt_core.layers import PropagationRows
from sgt_core.sampling.buckets import padded_buckets

# Entries each intermediate step keeps per row, as a multiple of top_k. A row of the exact K-step operator
# holds the node's whole K-hop neighbourhood, which on a large graph is most of it; PPRGo (Bojchevski et
# al., 2020) bounds it with the push algorithm's threshold epsilon, here with a fixed width per row, so
# that every step costs O((E + N) * width) and the operator fits the same [N, top_k] slots at any size.
WORKING_WIDTH = 4
# Rows of Â multiplied at once: chunks keep the product's peak near this many entries (~16 bytes each)
CHUNK_ENTRIES = 1 << 24


def appnp_top_k(source: Tensor, target: Tensor, num_nodes: int, steps: int, teleport: float,
                top_k: int) -> PropagationRows:
    r"""Each node's `top_k` largest weights in APPNP's propagation over the graph's edges, fixed width.

    The appnp branch with K steps and teleport alpha computes \(z_K = P z_0\) with
    \(P = M_K\), \(M_0 = I\), \(M_{t+1} = (1 - \alpha) \hat A M_t + \alpha I\), and
    \(\hat A = \hat D^{-1/2} (A + I) \hat D^{-1/2}\) from the real in-degrees (GCN's normalisation,
    `APPNPBranch`'s). Row i of P says how much of each node's z_0 reaches node i. PPRGo keeps the
    largest entries of each row and applies them in one sparse hop, so a node needs only its `top_k` most
    influential nodes rather than its whole K-hop neighbourhood: that is what Algorithm 2's batches can
    carry. Here the rows are computed by the recursion above, each intermediate row cut to its
    `WORKING_WIDTH * top_k` largest entries and the last to `top_k`: O(K (N + E) * WORKING_WIDTH * top_k)
    time and O(N * WORKING_WIDTH * top_k) memory. The compiled kernel `sgt::propagation_step` computes each
    step row by row on torch's threads; where it is not built SciPy's sparse products run, 15x slower at
    10^5 nodes. Both give the same float32 sums in the same order and cut ties alike, so the same rows bit
    for bit. The weights are not renormalised: with `top_k` at least every row's support nothing is cut, and
    the rows are P's exactly; otherwise a kept weight is at most P's entry (the cut drops paths' mass).

    Args:
        source: int [E] the source node of each of the input graph's edges (source -> target), without
            self-loops.
        target: int [E] the target node of each edge.
        num_nodes: N (nodes without edges get their own row, weight 1).
        steps: K >= 1.
        teleport: alpha in [0, 1).
        top_k: entries kept per row.

    Returns:
        `PropagationRows` [N, top_k]: each row's nodes by decreasing weight, padded with the node itself at
        weight 0. Deterministic: ties keep the lower node id first.
    """
    if steps < 1 or not 0.0 <= teleport < 1.0 or top_k < 1:
        raise ValueError(f"need steps >= 1, 0 <= teleport < 1 and top_k >= 1, got {steps}, {teleport}, {top_k}")
    if num_nodes == 0:
        return PropagationRows(torch.empty(0, top_k, dtype=torch.long), torch.empty(0, top_k))
    source = source.cpu().numpy().astype(np.int64, copy=False)
    target = target.cpu().numpy().astype(np.int64, copy=False)
    degree = np.bincount(target, minlength=num_nodes).astype(np.float64) + 1.0  # [N] d + 1: with the self-loop
    root = 1.0 / np.sqrt(degree)
    # (1 - alpha) Â, rows = targets: row i gathers from its in-neighbours and itself
    rows = np.concatenate([target, np.arange(num_nodes)])
    columns = np.concatenate([source, np.arange(num_nodes)])
    weights = ((1.0 - teleport) * root[rows] * root[columns]).astype(np.float32)
    step_matrix = sp.csr_matrix((weights, (rows, columns)), shape=(num_nodes, num_nodes))  # repeats summed
    width = WORKING_WIDTH * top_k
    kernels = cpu_kernels()
    if kernels is not None:
        return _by_decreasing_weight(*_steps_compiled(kernels, step_matrix, steps, teleport, width, top_k))
    operator = sp.identity(num_nodes, dtype=np.float32, format="csr")  # M_0 = I
    for step in range(steps):
        operator = _next_step(step_matrix, operator, teleport, top_k if step == steps - 1 else width)
    return _by_decreasing_weight(*_fixed_width(operator, top_k))


def _steps_compiled(kernels, step_matrix: sp.csr_matrix, steps: int, teleport: float, width: int,
                    top_k: int) -> tuple[np.ndarray, np.ndarray]:
    """The K steps by the compiled kernel (`sgt::propagation_step`), the same sums and cuts as `_next_step`.

    Each step reads the last one's fixed-width output as it is: two [N, width] operators in memory at a
    time, 8 bytes per node and slot each, and no packing between the steps. Returns the last one's
    slots, neighbours [N, top_k] and weights [N, top_k], unused ones (self, 0) as `_fixed_width`'s.
    """
    num_nodes = step_matrix.shape[0]
    step_csr = (torch.from_numpy(step_matrix.indptr.astype(np.int64)),
                torch.from_numpy(step_matrix.indices.astype(np.int32, copy=False)),
                torch.from_numpy(step_matrix.data.astype(np.float32, copy=False)))
    counts = torch.ones(num_nodes, dtype=torch.long)  # M_0 = I
    columns = torch.arange(num_nodes, dtype=torch.int32).unsqueeze(1)
    values = torch.ones(num_nodes, 1)
    for step in range(steps):
        keep = top_k if step == steps - 1 else width
        counts, columns, values = kernels.propagation_step(*step_csr, counts, columns, values, teleport, keep)
    return columns.numpy().astype(np.int64), values.numpy()


def _next_step(step_matrix: sp.csr_matrix, operator: sp.csr_matrix, teleport: float, keep: int) -> sp.csr_matrix:
    """(1 - alpha) Â M + alpha I with each row cut to its `keep` largest entries, in chunks of rows."""
    num_nodes = step_matrix.shape[0]
    # a chunk's product has at most sum over its rows of (entries of Â's row) * (widest row of M) entries
    widest = int(np.diff(operator.indptr).max(initial=1))
    bound = np.cumsum(np.diff(step_matrix.indptr) * widest)  # [N]
    ends = np.unique(np.append(np.searchsorted(bound, np.arange(1, bound[-1] // CHUNK_ENTRIES + 1)
                                               * CHUNK_ENTRIES), num_nodes))
    parts, start = [], 0
    for end in ends.tolist():
        if end <= start:
            continue
        product = step_matrix[start:end] @ operator  # [chunk, N]
        if teleport:
            product = _plus_on_diagonal(product, start, teleport)
        parts.append(_largest_per_row(product, keep))
        start = end
    return sp.vstack(parts, format="csr")


def _plus_on_diagonal(product: sp.csr_matrix, first_row: int, value: float) -> sp.csr_matrix:
    """product + value at (i, first_row + i) for every row i. Row i nearly always holds that entry already
    (Â has self-loops and M's rows keep their large own entry), and adding it in place avoids a sparse sum,
    which took a fifth of the time; rows without it go through the sparse sum."""
    row = np.repeat(np.arange(product.shape[0]), np.diff(product.indptr))
    own = np.flatnonzero(product.indices == row + first_row)
    product.data[own] += np.float32(value)
    lacking = np.ones(product.shape[0], dtype=bool)
    lacking[row[own]] = False
    if lacking.any():
        rows = np.flatnonzero(lacking)
        extra = sp.csr_matrix((np.full(rows.size, value, dtype=np.float32), (rows, rows + first_row)),
                              shape=product.shape)
        product = product + extra
    return product


def _largest_per_row(matrix: sp.csr_matrix, keep: int) -> sp.csr_matrix:
    """The matrix with each row cut to its `keep` largest entries (ties: lower column); rows keep their order.

    Rows are sorted a bucket at a time (`padded_buckets`, as `sample_neighbours` groups its candidates): no
    Python loop over rows, and a row's result depends on its own entries only, so it is the same whatever
    the chunking. A lexsort of all entries was 5x slower.
    """
    counts = np.diff(matrix.indptr)
    over = np.flatnonzero(counts > keep)
    if over.size == 0:
        return matrix
    kept = torch.ones(matrix.nnz, dtype=torch.bool)
    padding = matrix.nnz  # the entry id of padding slots: past every column, below every value
    data = torch.cat([torch.from_numpy(matrix.data), torch.tensor([-np.inf], dtype=torch.float32)])
    column_of = torch.cat([torch.from_numpy(matrix.indices.astype(np.int64)), torch.tensor([matrix.shape[1]])])
    starts = torch.from_numpy(matrix.indptr[over].astype(np.int64))
    for _rows, entries, valid in padded_buckets(starts, torch.from_numpy(counts[over]), padding):
        # by column, then by decreasing value, stably: ties go to the lower column, as in the compiled kernel
        entries = entries.gather(1, column_of[entries].argsort(dim=1, stable=True))
        order = data[entries].sort(dim=1, descending=True, stable=True).indices[:, :keep]
        kept[entries[valid]] = False
        kept[entries.gather(1, order).flatten()] = True
    kept = kept.numpy()
    indptr = np.concatenate([[0], np.cumsum(np.minimum(counts, keep))])
    return sp.csr_matrix((matrix.data[kept], matrix.indices[kept], indptr), shape=matrix.shape)


def _fixed_width(operator: sp.csr_matrix, top_k: int) -> tuple[np.ndarray, np.ndarray]:
    """CSR rows of at most top_k entries as slots, neighbours [N, top_k] and weights [N, top_k], padded
    with (self, 0)."""
    num_nodes = operator.shape[0]
    counts = np.diff(operator.indptr)
    row = np.repeat(np.arange(num_nodes), counts)
    slot = np.arange(operator.nnz) - operator.indptr[row]  # each entry's position within its row
    neighbours = np.repeat(np.arange(num_nodes)[:, None], top_k, axis=1)  # [N, k]
    weights = np.zeros((num_nodes, top_k), dtype=np.float32)
    neighbours[row, slot] = operator.indices
    weights[row, slot] = operator.data
    return neighbours, weights


def _by_decreasing_weight(neighbours: np.ndarray, weights: np.ndarray) -> PropagationRows:
    """Each row's slots by decreasing weight, ties in column order: the same rows however the steps ordered
    their entries."""
    by_column = np.argsort(neighbours, axis=1, kind="stable")
    neighbours = np.take_along_axis(neighbours, by_column, 1)
    weights = np.take_along_axis(weights, by_column, 1)
    order = np.argsort(-weights, axis=1, kind="stable")
    return PropagationRows(torch.from_numpy(np.take_along_axis(neighbours, order, 1)),
                           torch.from_numpy(np.take_along_axis(weights, order, 1)))
