"""Reading and writing the attention-score Parquet files, and summarising them through DuckDB."""

from __future__ import annotations

import os
from pathlib import Path

import duckdb
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import torch
from torch import Tensor

from sgt_core.errors import SGTError

SCORES_DIR = "attention_scores"
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


def read_attention_scores(scores_dir: Path, edge_index: Tensor) -> Tensor:
    """Reads the per-layer scores back as float32 [L, E], checking they belong to this interaction graph."""
    paths = sorted(Path(scores_dir).glob("layer_*.parquet"), key=lambda p: int(p.stem.split("_")[1]))
    if not paths:
        raise SGTError(f"{scores_dir}: no attention-score files (layer_*.parquet) found")
    layers = []
    for path in paths:
        table = pq.read_table(path, columns=["src", "dst", "score"])
        src, dst = table["src"].to_numpy(), table["dst"].to_numpy()
        if len(src) != edge_index.shape[1] or not (
            np.array_equal(src, edge_index[0].numpy()) and np.array_equal(dst, edge_index[1].numpy())
        ):
            raise SGTError(f"{path}: its (src, dst) rows do not match the interaction graph's edges")
        layers.append(torch.from_numpy(table["score"].to_numpy().copy()))
    return torch.stack(layers)  # [L, E]


def summarise_scores(scores_dir: Path) -> dict[str, list[tuple]]:
    """Per layer, through DuckDB: attention mass per edge type, normalisation and mean per-node entropy.

    Mass is the mean over destination nodes of the score they give each edge type, so the types' masses
    in a layer add up to 1 (Spexphormer Appendix F.7).
    """
    files = scores_glob(scores_dir)
    with duckdb.connect() as con:
        mass = con.execute(
            f"""
            WITH per_node AS (
                SELECT layer, dst, CAST(edge_type AS VARCHAR) AS edge_type, SUM(score) AS mass
                FROM read_parquet('{files}') GROUP BY ALL
            ), nodes AS (SELECT layer, COUNT(DISTINCT dst) AS n FROM read_parquet('{files}') GROUP BY layer)
            SELECT layer, edge_type, SUM(mass) / ANY_VALUE(n) AS mass, COUNT(*) AS nodes_with_type
            FROM per_node JOIN nodes USING (layer) GROUP BY layer, edge_type ORDER BY layer, mass DESC
            """
        ).fetchall()
        per_layer = con.execute(
            f"""
            WITH per_node AS (
                SELECT layer, dst, SUM(score) AS total,
                       -SUM(CASE WHEN score > 0 THEN score * LN(score) ELSE 0 END) AS entropy,
                       COUNT(*) AS degree
                FROM read_parquet('{files}') GROUP BY layer, dst
            )
            SELECT layer, COUNT(*) AS nodes, AVG(entropy) AS mean_entropy, AVG(LN(degree)) AS mean_uniform_entropy,
                   MAX(ABS(total - 1)) AS max_normalisation_error
            FROM per_node GROUP BY layer ORDER BY layer
            """
        ).fetchall()
    return {"mass": mass, "per_layer": per_layer}


def format_summary(summary: dict[str, list[tuple]]) -> str:
    """A plain-text report of `summarise_scores` for the terminal."""
    lines = ["layer  nodes    mean entropy  (uniform)  max |sum-1|"]
    for layer, nodes, entropy, uniform, error in summary["per_layer"]:
        lines.append(f"{layer:>5}  {nodes:>7}  {entropy:>12.4f}  {uniform:>9.4f}  {error:>10.2e}")
    lines += ["", "layer  edge type     attention mass"]
    for layer, edge_type, mass, _ in summary["mass"]:
        lines.append(f"{layer:>5}  {edge_type:<12}  {mass:>14.4f}")
    return "\n".join(lines)
