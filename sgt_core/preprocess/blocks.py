"""Edge blocks: one sparse matrix per edge type, valued by type and SPD bucket, merged into H's sorted edges."""

from __future__ import annotations

import numpy as np
import scipy.sparse
import torch

from sgt_core.preprocess.adjacency import sorted_csr
from sgt_core.preprocess.interaction_graph import EDGE_TYPES, NO_SPD

__all__ = ["TYPE_SLOTS", "edge_block", "merge_blocks", "table_block"]

# Edge values in the merge: type + 1 + TYPE_SLOTS * SPD bucket (see merge_blocks), so (value - 1) splits
# into the type (remainder) and the SPD bucket (quotient).
TYPE_SLOTS = len(EDGE_TYPES)


def edge_block(
    src: np.ndarray, dst: np.ndarray, type_name: str, num_nodes: int, code_dtype: type, spd: np.ndarray | None = None
) -> scipy.sparse.csr_matrix:
    """One edge type's block: CSR [N, N], row dst and column src, valued type + 1 + TYPE_SLOTS * spd."""
    code = np.full(src.size, EDGE_TYPES.index(type_name) + 1, dtype=code_dtype)
    if spd is not None:
        code += spd.astype(code_dtype) * TYPE_SLOTS
    return sorted_csr(dst, src, code, num_nodes)


def table_block(table: np.ndarray, type_name: str, num_nodes: int, code_dtype: type) -> scipy.sparse.csr_matrix:
    """The block of a neighbour table whose row v lists v's sources ascending (v < its rows): CSR as is."""
    rows, width = table.shape
    indptr = np.full(num_nodes + 1, rows * width, dtype=np.int64)
    indptr[: rows + 1] = np.arange(0, rows * width + 1, width)
    code = np.full(rows * width, EDGE_TYPES.index(type_name) + 1, dtype=code_dtype)
    return scipy.sparse.csr_matrix((code, table.ravel(), indptr), shape=(num_nodes, num_nodes))


def merge_blocks(
    blocks: list[scipy.sparse.csr_matrix], num_nodes: int, index_dtype: torch.dtype, compact: bool, with_spd: bool
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """The union of disjoint edge blocks, sorted by (dst, src): edge_index [2, E], edge_type [E], edge_spd [E].

    The blocks (`edge_block`: a counting sort over destinations, and none for a block already in that
    order, as all but the input graph's are) have sorted rows, so adding them merges rows in one linear
    pass: O(N + E) overall, with no sort of all edges. A block's values are type + 1 + TYPE_SLOTS * spd,
    never 0, which the sum would drop. Every (dst, src) pair occurs once in all blocks together (a repeat
    would merge two entries, which the entry count catches).

    Empties `blocks`, so that each block is freed as soon as it is merged.
    """
    small_dtype, spd_dtype = (np.int8, np.int16) if compact else (np.int64, np.int64)
    # Smallest first: every addition copies the running total, which then grows as slowly as it can.
    blocks[:] = sorted((block for block in blocks if block.nnz), key=lambda block: block.nnz, reverse=True)
    expected = sum(block.nnz for block in blocks)
    if not blocks:
        return (torch.zeros(2, 0, dtype=index_dtype), torch.from_numpy(np.zeros(0, small_dtype)),
                torch.from_numpy(np.zeros(0, spd_dtype)))
    total = blocks.pop()
    while blocks:
        total = total + blocks.pop()
    if total.nnz != expected:  # pragma: no cover - the blocks are disjoint by construction
        raise RuntimeError("internal error: two interaction-graph edge blocks share a (dst, src) pair")
    numpy_index = np.int32 if index_dtype == torch.int32 else np.int64
    edge_index = np.empty((2, total.nnz), dtype=numpy_index)
    edge_index[0] = total.indices
    edge_index[1] = np.repeat(np.arange(num_nodes, dtype=numpy_index), np.diff(total.indptr))
    code = total.data
    del total
    code -= 1
    edge_type = (code % TYPE_SLOTS if with_spd else code).astype(small_dtype)
    edge_spd = (code // TYPE_SLOTS).astype(spd_dtype) if with_spd else np.full(code.size, NO_SPD, spd_dtype)
    return torch.from_numpy(edge_index), torch.from_numpy(edge_type), torch.from_numpy(edge_spd)
