"""The exported Parquet: schema, one row per attention edge per layer, scores summing to 1 (via DuckDB)."""

from __future__ import annotations

import duckdb
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import torch

from sgt_core.export.scores import SCHEMA, SCORES_DIR, read_attention_scores
from sgt_core.export.summary import summarise_scores
from sgt_core.preprocess.interaction_graph import EDGE_TYPES, InteractionGraph
from tests.stage_runner import run_stages


@pytest.fixture(scope="module")
def exported(tmp_path_factory):
    cfg, outputs = run_stages(tmp_path_factory.mktemp("export"), until="export")
    graph = InteractionGraph.load(outputs["preprocess"] / "interaction_graph.pt")
    return cfg, graph, outputs["export"] / SCORES_DIR


def test_schema(exported):
    cfg, _graph, scores_dir = exported
    files = sorted(scores_dir.glob("layer_*.parquet"))
    assert len(files) == cfg["model"]["num_layers"]
    schema = pq.read_schema(files[0])
    assert schema.names == ["layer", "dst", "src", "edge_type", "score"]
    assert schema.field("layer").type == pa.int32()
    assert schema.field("dst").type == pa.int64() and schema.field("src").type == pa.int64()
    assert pa.types.is_dictionary(schema.field("edge_type").type)
    assert schema.field("score").type == pa.float32()
    assert schema.remove_metadata().equals(SCHEMA)


def test_rows_and_normalisation_in_duckdb(exported):
    cfg, graph, scores_dir = exported
    files = f"{scores_dir}/layer_*.parquet"
    with duckdb.connect() as con:
        rows = con.execute(f"SELECT layer, COUNT(*) FROM read_parquet('{files}') GROUP BY layer ORDER BY layer").fetchall()
        worst = con.execute(
            f"SELECT MAX(ABS(s - 1)), COUNT(*) FROM (SELECT layer, dst, SUM(score) AS s FROM read_parquet('{files}') GROUP BY layer, dst)"
        ).fetchone()
        types = {r[0] for r in con.execute(f"SELECT DISTINCT CAST(edge_type AS VARCHAR) FROM read_parquet('{files}')").fetchall()}
        duplicates = con.execute(
            f"SELECT COUNT(*) FROM (SELECT layer, dst, src FROM read_parquet('{files}') GROUP BY ALL HAVING COUNT(*) > 1)"
        ).fetchone()[0]
    assert rows == [(layer, graph.num_edges) for layer in range(cfg["model"]["num_layers"])]
    assert worst[0] < 1e-4 and worst[1] == graph.num_nodes * cfg["model"]["num_layers"]
    assert types == {"graph", "self", "expander"} and types <= set(EDGE_TYPES)
    assert duplicates == 0


def test_read_back_matches_and_summary_adds_up(exported):
    cfg, graph, scores_dir = exported
    scores = read_attention_scores(scores_dir, graph.edge_index)
    assert scores.shape == (cfg["model"]["num_layers"], graph.num_edges)
    summary = summarise_scores(scores_dir)
    for layer in range(cfg["model"]["num_layers"]):
        masses = [mass for l, _, mass, _ in summary["mass"] if l == layer]
        assert sum(masses) == pytest.approx(1.0, abs=1e-4)
    for layer, nodes, entropy, uniform, error in summary["per_layer"]:
        assert nodes == graph.num_nodes and 0 <= entropy <= uniform + 1e-6 and error < 1e-4


def test_scores_of_another_graph_are_rejected(exported):
    _, graph, scores_dir = exported
    with pytest.raises(Exception, match="do not match"):
        read_attention_scores(scores_dir, torch.flip(graph.edge_index, dims=[1]))
