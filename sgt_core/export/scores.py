"""Reading and writing the attention-score Parquet files (one per layer)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import torch
from torch import Tensor

from sgt_core.artifacts import atomic_path
from sgt_core.errors import SGTError

COLUMN_DTYPES = {"src": np.int64, "dst": np.int64, "score": np.float32}  # what the reader takes, as NumPy
READ_BATCH_ROWS = 1 << 16
SCHEMA = pa.schema(
    [
        ("layer", pa.int32()),
        ("dst", pa.int64()),
        ("src", pa.int64()),
        ("edge_type", pa.dictionary(pa.int8(), pa.string())),
        ("score", pa.float32()),
        # the graph of the edge (both ends lie in it) in a dataset of many graphs; 0 for one graph
        ("graph_id", pa.int32()),
    ]
)


WRITE_ROW_GROUP = 1 << 20  # rows per Parquet row group: what the writer holds in memory at a time


def top_candidates(scores: Tensor, ptr: Tensor, keep: int) -> tuple[Tensor, Tensor]:
    """Each destination's `keep` highest-scored candidates, their scores renormalised to sum to 1.

    Spexphormer suggests this for large graphs: the wide network samples a few neighbours per node, so the
    candidates it would almost never draw need not be stored. Ties keep the earlier edge.

    Args:
        scores: float [E], one destination's scores contiguous per `ptr` segment, each summing to 1.
        ptr: int64 [N + 1] CSR offsets of the destinations' segments.
        keep: candidates kept per destination (all of them where it has fewer).

    Returns:
        (positions int64 [E'] of the kept edges in ascending order, their renormalised scores float32 [E']).
    """
    degree = ptr.diff()
    destination = torch.repeat_interleave(torch.arange(degree.numel()), degree)  # [E]
    # One stable sort by (destination, -score) puts each segment's best first; rank within the segment.
    order = torch.argsort(-scores.double(), stable=True)
    order = order[torch.argsort(destination[order], stable=True)]
    rank = torch.arange(scores.numel()) - ptr[destination[order]]
    positions = torch.sort(order[rank < keep]).values
    kept = scores[positions].double()
    totals = torch.zeros(degree.numel(), dtype=torch.float64).index_add_(0, destination[positions], kept)
    return positions, (kept / totals[destination[positions]]).float()


def destination_offsets(dst: Tensor) -> Tensor:
    """CSR offsets int64 [max(dst) + 2] of edges sorted by destination: node d's edges are ptr[d]:ptr[d+1]."""
    counts = torch.bincount(dst.long(), minlength=int(dst.max()) + 1 if dst.numel() else 0)
    return torch.cat([torch.zeros(1, dtype=torch.int64), counts.cumsum(0)])


def write_attention_scores(
    layer_scores: Tensor, edge_index: Tensor, edge_type: Tensor, edge_type_names: tuple[str, ...], out_dir: Path,
    max_candidates_per_node: int | None = None, ptr: Tensor | None = None, node_graph: Tensor | None = None,
) -> list[Path]:
    """Writes one Parquet file per layer: one row per attention edge, in the interaction graph's edge order.

    Streamed in row groups of `WRITE_ROW_GROUP` rows, so the writer holds one row group's columns, not a
    layer's. With `max_candidates_per_node`, only each destination's highest-scored candidates are written
    (see `top_candidates`).

    Args:
        layer_scores: float [L, E].
        edge_index: int [2, E] (src, dst), sorted by dst then src.
        edge_type: int [E] indices into `edge_type_names`.
        ptr: the graph's CSR offsets by destination (`InteractionGraph.ptr`); derived from `edge_index`
            when not given. Read only with `max_candidates_per_node`.
        node_graph: int [N] the graph of every node of a dataset of many graphs (the `graph_id` column is
            its destination's); None: one graph, `graph_id` 0.
    """
    out_dir.mkdir(parents=True, exist_ok=True)
    names = pa.array(list(edge_type_names))
    if max_candidates_per_node is not None and ptr is None:
        ptr = destination_offsets(edge_index[1])
    paths = []
    for layer, scores in enumerate(layer_scores):
        if max_candidates_per_node is None:
            positions, kept_scores = None, scores.float()
        else:
            positions, kept_scores = top_candidates(scores, ptr, max_candidates_per_node)
        rows = kept_scores.numel()
        path = out_dir / f"layer_{layer}.parquet"
        # readers never see a half-written file
        with atomic_path(path) as partial, pq.ParquetWriter(partial, SCHEMA, compression="zstd") as writer:
            for start in range(0, rows, WRITE_ROW_GROUP):
                end = min(rows, start + WRITE_ROW_GROUP)
                edges = slice(start, end) if positions is None else positions[start:end]
                writer.write_table(pa.table([
                    pa.array(np.full(end - start, layer, dtype=np.int32)),
                    pa.array(edge_index[1, edges].numpy().astype(np.int64, copy=False)),
                    pa.array(edge_index[0, edges].numpy().astype(np.int64, copy=False)),
                    pa.DictionaryArray.from_arrays(pa.array(edge_type[edges].numpy().astype(np.int8)), names),
                    pa.array(kept_scores[start:end].numpy()),
                    pa.array(np.zeros(end - start, dtype=np.int32) if node_graph is None
                             else node_graph[edge_index[1, edges].long()].numpy().astype(np.int32, copy=False)),
                ], schema=SCHEMA))
        paths.append(path)
    return paths


def scores_glob(scores_dir: Path) -> str:
    return str(Path(scores_dir) / "layer_*.parquet")


def _values(path: Path, name: str, array: pa.Array) -> np.ndarray:
    """A score file column's values as a NumPy view of its Arrow buffer (the schema's type, no nulls).

    Not Array.to_numpy() (nor DataType.to_pandas_dtype()): they import pandas, ~40 MB that the train
    stage would then carry to its end.
    """
    expected = SCHEMA.field(name).type
    if array.type != expected:
        raise SGTError(f"{path}: column {name} is {array.type}, expected {expected}")
    if array.null_count:
        raise SGTError(f"{path}: column {name} has {array.null_count} missing values")
    dtype = COLUMN_DTYPES[name]
    return np.frombuffer(array.buffers()[1], dtype=dtype, count=array.offset + len(array))[array.offset:]


def read_attention_scores(scores_dir: Path, edge_index: Tensor, ptr: Tensor | None = None) -> Tensor:
    """Reads the per-layer scores back as float32 [L, E], checking they belong to this interaction graph.

    A file with fewer rows than the graph has edges (written with `export.max_candidates_per_node`) gives
    its rows' scores and 0 to every candidate it left out, which the samplers then never draw; `ptr`, the
    graph's CSR offsets by destination, is then used (derived from `edge_index` when not given).
    """
    paths = sorted(Path(scores_dir).glob("layer_*.parquet"), key=lambda p: int(p.stem.split("_")[1]))
    if not paths:
        raise SGTError(f"{scores_dir}: no attention-score files (layer_*.parquet) found")
    num_edges = edge_index.shape[1]
    src_expected, dst_expected = edge_index.numpy()
    layer_scores = np.empty((len(paths), num_edges), dtype=np.float32)  # [L, E]
    offsets = None if ptr is None else ptr.numpy()
    for layer, path in enumerate(paths):
        # Batch by batch, so reading needs a batch's memory rather than a whole layer's three columns
        # (Arrow's allocator keeps what it once held, so whole tables would stay in the train stage's memory).
        reader = pq.ParquetFile(path, pre_buffer=False)
        subset = reader.metadata.num_rows < num_edges
        if subset:
            layer_scores[layer] = 0.0
            offsets = destination_offsets(edge_index[1]).numpy() if offsets is None else offsets
        row = 0
        for batch in reader.iter_batches(batch_size=READ_BATCH_ROWS, columns=["src", "dst", "score"], use_threads=False):
            end = row + batch.num_rows
            src, dst, scores = (_values(path, name, batch.column(name)) for name in ("src", "dst", "score"))
            if subset:
                layer_scores[layer, _positions(path, src, dst, src_expected, dst_expected, offsets)] = scores
            elif end > num_edges or not (
                np.array_equal(src, src_expected[row:end]) and np.array_equal(dst, dst_expected[row:end])
            ):
                raise SGTError(f"{path}: its (src, dst) rows do not match the interaction graph's edges")
            else:
                layer_scores[layer, row:end] = scores
            row = end
        if row != num_edges and not subset:
            raise SGTError(f"{path}: {row} rows for an interaction graph of {num_edges} edges")
    pa.default_memory_pool().release_unused()
    return torch.from_numpy(layer_scores)


def _positions(path: Path, src: np.ndarray, dst: np.ndarray, src_expected: np.ndarray, dst_expected: np.ndarray,
               ptr: np.ndarray) -> np.ndarray:
    """Positions in the graph's edge order of a batch of (src, dst) rows; an error if one is not an edge.

    Only the edges of the batch's destinations are searched, so the work and memory follow the batch.
    """
    if dst.size == 0:
        return np.empty(0, dtype=np.int64)
    first, last = int(dst.min()), int(dst.max())
    if first < 0 or last + 1 >= ptr.size:
        raise SGTError(f"{path}: destination {last if first >= 0 else first} is not a node of the interaction graph")
    low, high = int(ptr[first]), int(ptr[last + 1])
    width = int(max(src.max(), src_expected[low:high].max(initial=0))) + 1
    keys = dst_expected[low:high].astype(np.int64) * width + src_expected[low:high]  # sorted: by dst, then src
    wanted = dst.astype(np.int64) * width + src
    found = np.minimum(np.searchsorted(keys, wanted), max(keys.size - 1, 0))
    if keys.size == 0 or not np.array_equal(keys[found], wanted):
        raise SGTError(f"{path}: some (src, dst) rows are not edges of the interaction graph")
    return low + found
