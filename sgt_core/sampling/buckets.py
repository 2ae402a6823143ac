"""Ragged CSR segments padded in power-of-two buckets: per-row top-k and sorting without a loop over rows."""

from __future__ import annotations

from collections.abc import Iterator

import torch
from torch import Tensor


def padded_buckets(starts: Tensor, counts: Tensor, padding: int) -> Iterator[tuple[Tensor, Tensor, Tensor]]:
    """Segments starts[i] .. starts[i] + counts[i] grouped by length into power-of-two buckets.

    A hub with thousands of entries would pad every row of one [rows, widest] matrix to its width; bucket b
    holds the segments with 2^(b-1) < count <= 2^b (count 0 goes with 1), padded only to 2^b, at most twice
    their entries. A Python loop over ~log2(widest) buckets, never over rows; it runs unchanged on CUDA.

    Yields, per bucket: rows int64 [r] (positions in `starts`), entries int64 [r, 2^b] (starts[row] + slot,
    `padding` past the segment's end) and valid bool [r, 2^b] (False on padding).
    """
    bucket = torch.ceil(torch.log2(counts.clamp_min(1).double())).long()  # [Q]
    order = torch.argsort(bucket)  # [Q]
    bucket_ids, bucket_sizes = torch.unique_consecutive(bucket[order], return_counts=True)
    for rows, width_exponent in zip(order.split(bucket_sizes.tolist()), bucket_ids.tolist()):
        slots = torch.arange(1 << width_exponent, device=starts.device)  # [w]
        valid = slots < counts[rows].unsqueeze(1)  # [r, w]
        yield rows, torch.where(valid, starts[rows].unsqueeze(1) + slots, padding), valid
