"""Summaries of the exported attention scores, computed by DuckDB straight from the Parquet files."""

from __future__ import annotations

import tempfile
from pathlib import Path

import duckdb

from sgt_core.export.scores import scores_glob

# DuckDB's working memory for the summaries; past it, its aggregates spill to a temporary folder, so the
# check runs out of core on score files larger than memory (Amazon2M: ~200 M rows per layer).
DUCKDB_MEMORY_LIMIT = "2GB"


def summarise_scores(scores_dir: Path) -> dict[str, list[tuple]]:
    """Per layer, through DuckDB: attention mass per edge type, normalisation and mean per-node entropy.

    Mass is the mean over destination nodes of the score they give each edge type, so the types' masses
    in a layer add up to 1 (Spexphormer Appendix F.7).
    """
    files = scores_glob(scores_dir)
    with tempfile.TemporaryDirectory(prefix="sgt-duckdb-") as spill, duckdb.connect(
        config={"memory_limit": DUCKDB_MEMORY_LIMIT, "temp_directory": spill, "preserve_insertion_order": False}
    ) as con:
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
