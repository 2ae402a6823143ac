"""The rows of the attention's edge tables: each edge's type, distance bucket and feature code as one code.

Both networks' attention scales keys by E and shifts logits by B per edge (Exphormer, Spexphormer): a
learned row per edge type t, plus one per shortest-path-distance bucket s > 0 (AnchorGT's encoding on
anchor and k-hop edges), plus one per categorical edge-feature code a > 0 (bond types on the input graph's
own edges: Spexphormer's E = W_E e and B = W_B e of a one-hot feature e is a row per code). An edge's
terms are the sum E_t + E^spd_s + E^attr_a; the fused kernels read them as one table row, the edge's code

    c = (t * S + s) * A + a,

over S buckets and A feature codes (1 each where a graph has none, so that c = t, or t * S + s, as before).

Continuous edge features f [Fe] (ogbn-proteins' confidence scores) are no code: their rows, W_E^T [Fe, d]
and W_B^T [Fe, h], follow the code rows (`EdgeTypedAttention.with_feature_rows`), and the fused operators
add sum_k f_k of them to each edge's code row, per edge, inside the kernels.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor


def combined_code(edge_type: Tensor, edge_spd: Tensor | None, edge_attr: Tensor | None, num_spd: int,
                  num_attr: int) -> Tensor:
    """Each edge's (or slot's) row c = (t * S + s) * A + a in `code_tables`.

    The type itself (no copy) when there is neither an SPD bucket nor a feature code to add; otherwise
    computed in int64 (graphs may hold types as int8).

    Args:
        edge_type: [*] each edge's type t.
        edge_spd: [*] each edge's SPD bucket s; None where the model or the graph has none.
        edge_attr: [*] each edge's feature code a; None where the model or the graph has none.
        num_spd: S, the SPD buckets of the tables (1: none).
        num_attr: A, the feature codes of the tables (1: none).
    """
    if (edge_spd is None or num_spd <= 1) and (edge_attr is None or num_attr <= 1):
        return edge_type
    code = edge_type.long() * num_spd
    if edge_spd is not None and num_spd > 1:
        code = code + edge_spd.long()
    code = code * num_attr
    if edge_attr is not None and num_attr > 1:
        code = code + edge_attr.long()
    return code


def code_tables(scale: Tensor, bias: Tensor, spd_scale: Tensor | None, spd_bias: Tensor | None,
                attr_scale: Tensor | None = None, attr_bias: Tensor | None = None) -> tuple[Tensor, Tensor]:
    """The E and B rows of every code c = (t * S + s) * A + a: E_t + E^spd_s + E^attr_a, and B alike.

    Bucket 0 and feature code 0 (none) add nothing; a term whose table is None is absent (S or A = 1).

    Shapes:
        scale [T, d], bias [T, h]; spd_scale [S - 1, d], spd_bias [S - 1, h]; attr_scale [A - 1, d],
        attr_bias [A - 1, h] -> [T * S * A, d], [T * S * A, h].
    """
    for extra_scale, extra_bias in ((spd_scale, spd_bias), (attr_scale, attr_bias)):
        if extra_scale is None:
            continue
        extra_scale = torch.cat([extra_scale.new_zeros(1, extra_scale.shape[1]), extra_scale])  # [S, d]
        extra_bias = torch.cat([extra_bias.new_zeros(1, extra_bias.shape[1]), extra_bias])  # [S, h]
        scale = (scale[:, None] + extra_scale[None]).flatten(0, 1)  # [rows * S, d]
        bias = (bias[:, None] + extra_bias[None]).flatten(0, 1)  # [rows * S, h]
    return scale, bias


def one_hot_code_tables(scale: Tensor, bias: Tensor, spd_scale: Tensor | None, spd_bias: Tensor | None,
                        attr_scale: Tensor | None = None, attr_bias: Tensor | None = None) -> tuple[Tensor, Tensor]:
    """The E and B rows that `one_hot_codes`' columns select: types, then SPD buckets 1.., then codes 1..

    Shapes:
        as `code_tables` -> [T (+ S - 1) (+ A - 1), d], [..., h].
    """
    scales = [scale, *(t for t in (spd_scale, attr_scale) if t is not None)]
    biases = [bias, *(t for t in (spd_bias, attr_bias) if t is not None)]
    return torch.cat(scales), torch.cat(biases)


def one_hot_codes(edge_type: Tensor, edge_spd: Tensor | None, edge_attr: Tensor | None, num_edge_types: int,
                  num_spd: int, num_attr: int) -> Tensor:
    """One-hot columns of each edge's type, SPD bucket (1.., when S > 1) and feature code (1.., when A > 1).

    Summing the selected rows of `one_hot_code_tables` gives the edge's terms. Bucket 0 and code 0 have no
    column, so they add nothing.

    Shapes:
        edge_type [*], edge_spd [*] or None, edge_attr [*] or None -> int64 [*, T (+ S - 1) (+ A - 1)].
    """
    columns = [F.one_hot(edge_type.long(), num_edge_types)]  # [*, T]
    for values, count in ((edge_spd, num_spd), (edge_attr, num_attr)):
        if count > 1:
            present = torch.zeros_like(edge_type, dtype=torch.long) if values is None else values.long()
            columns.append(F.one_hot(present, count)[..., 1:])  # [*, count - 1]
    return torch.cat(columns, dim=-1)


def used_codes(code: Tensor, num_codes: int, limit: int) -> tuple[Tensor, Tensor | None]:
    """The codes renumbered 0..C'-1 over those that occur, with the table rows they stand for, when the
    full table has more than `limit` rows (the estimator's kernels read uint8 codes: 256 rows); else the
    codes as they are and None.

    Returns:
        (codes [E], rows int64 [C'] or None): row r of the compacted table is row rows[r] of the full one.
    """
    if num_codes <= limit:
        return code, None
    rows, compacted = torch.unique(code.long(), return_inverse=True)
    if rows.numel() > limit:
        raise ValueError(f"the graph's edges take {rows.numel()} distinct (type, distance, feature) codes; the "
                         f"attention operators take at most {limit}")
    return compacted, rows
