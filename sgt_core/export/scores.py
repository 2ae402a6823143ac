"""Reading and writing the attention-score Parquet files (one per layer)."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import torch
from torch import Tensor

from sgt_core.errors import SGTError

SCORES_DIR = "attention_scores"
COLUMN_DTYPES = {"src": np.int64, "dst": np.int64, "score": np.float32}  # what the reader takes, as NumPy
READ_BATCH_ROWS = 1 << 16
SCHEMA = pa.schema(
    [
        ("layer", pa.int32()),
        ("dst", pa.int64()),
        ("src", pa.int64()),
        ("edge_type", pa.dictionary(pa.int8(), pa.string())),
        ("score", pa.float32()),
    ]
)


def write_attention_scores(
    layer_scores: Tensor, edge_index: Tensor, edge_type: Tensor, edge_type_names: tuple[str, ...], out_dir: Path
) -> list[Path]:
    """Writes one Parquet file per layer: one row per attention edge, in the interaction graph's edge order.

    Args:
        layer_scores: float [L, E].
        edge_index: int64 [2, E] (src, dst).
        edge_type: int64 [E] indices into `edge_type_names`.
    """
    out_dir.mkdir(parents=True, exist_ok=True)
    src, dst = edge_index.numpy()
    edge_type_column = pa.DictionaryArray.from_arrays(
        pa.array(edge_type.numpy().astype(np.int8)), pa.array(list(edge_type_names))
    )
    paths = []
    for layer, scores in enumerate(layer_scores):
        table = pa.table(
            [
                pa.array(np.full(src.shape, layer, dtype=np.int32)),
                pa.array(dst),
                pa.array(src),
                edge_type_column,
                pa.array(scores.numpy().astype(np.float32)),
            ],
            schema=SCHEMA,
        )
        path = out_dir / f"layer_{layer}.parquet"
        partial = path.with_suffix(".parquet.partial")
        pq.write_table(table, partial, compression="zstd")
        os.replace(partial, path)  # readers never see a half-written file
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


def read_attention_scores(scores_dir: Path, edge_index: Tensor) -> Tensor:
    """Reads the per-layer scores back as float32 [L, E], checking they belong to this interaction graph."""
    paths = sorted(Path(scores_dir).glob("layer_*.parquet"), key=lambda p: int(p.stem.split("_")[1]))
    if not paths:
        raise SGTError(f"{scores_dir}: no attention-score files (layer_*.parquet) found")
    num_edges = edge_index.shape[1]
    src_expected, dst_expected = edge_index.numpy()
    layer_scores = np.empty((len(paths), num_edges), dtype=np.float32)  # [L, E]
    for layer, path in enumerate(paths):
        # Batch by batch, so reading needs a batch's memory rather than a whole layer's three columns
        # (Arrow's allocator keeps what it once held: whole tables cost the train stage ~100 MB for good).
        row = 0
        reader = pq.ParquetFile(path, pre_buffer=False)
        for batch in reader.iter_batches(batch_size=READ_BATCH_ROWS, columns=["src", "dst", "score"], use_threads=False):
            end = row + batch.num_rows
            src, dst, scores = (_values(path, name, batch.column(name)) for name in ("src", "dst", "score"))
            if end > num_edges or not (
                np.array_equal(src, src_expected[row:end]) and np.array_equal(dst, dst_expected[row:end])
            ):
                raise SGTError(f"{path}: its (src, dst) rows do not match the interaction graph's edges")
            layer_scores[layer, row:end] = scores
            row = end
        if row != num_edges:
            raise SGTError(f"{path}: {row} rows for an interaction graph of {num_edges} edges")
    pa.default_memory_pool().release_unused()
    return torch.from_numpy(layer_scores)
