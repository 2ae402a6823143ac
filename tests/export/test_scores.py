"""The exported Parquet: schema, one row per attention edge per layer, scores summing to 1 (via DuckDB)."""

from __future__ import annotations

import duckdb
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import torch

from sgt_core.config import compose_config
from sgt_core.errors import ConfigError
from sgt_core.export.outputs import SCORES_DIR
from sgt_core.export.scores import (
    SCHEMA,
    read_attention_scores,
    top_candidates,
    write_attention_scores,
)
from sgt_core.export.summary import summarise_scores
from sgt_core.preprocess.interaction_graph import EDGE_TYPES, InteractionGraph
from tests.conftest import TINY_OVERRIDES
from tests.stage_runner import run_stages


@pytest.fixture(scope="module")
def exported(tmp_path_factory):
    cfg, outputs, _ = run_stages(tmp_path_factory.mktemp("export"), until="export")
    graph = InteractionGraph.load(outputs["preprocess"] / "interaction_graph.pt")
    return cfg, graph, outputs["export"] / SCORES_DIR


def test_schema(exported):
    cfg, _graph, scores_dir = exported
    files = sorted(scores_dir.glob("layer_*.parquet"))
    assert len(files) == cfg["model"]["num_layers"]
    schema = pq.read_schema(files[0])
    assert schema.names == ["layer", "dst", "src", "edge_type", "score", "graph_id"]
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


# --- export.max_candidates_per_node: each node's best candidates only -----------------------------------


def test_top_candidates_keep_the_best_and_renormalise():
    ptr = torch.tensor([0, 3, 4, 8])  # three destinations with 3, 1 and 4 candidates
    scores = torch.tensor([0.2, 0.5, 0.3, 1.0, 0.1, 0.4, 0.1, 0.4])
    positions, kept = top_candidates(scores, ptr, keep=2)
    assert positions.tolist() == [1, 2, 3, 5, 7]  # of the 4th node's tied 0.4s both stay; of 0.1s none
    assert torch.allclose(kept, torch.tensor([0.5 / 0.8, 0.3 / 0.8, 1.0, 0.5, 0.5]))


def test_a_capped_export_is_a_renormalised_subset_that_reads_back_with_zeros(exported, tmp_path):
    _, graph, scores_dir = exported
    full = read_attention_scores(scores_dir, graph.edge_index)  # [L, E]
    keep = 5
    write_attention_scores(full, graph.edge_index, graph.edge_type, EDGE_TYPES, tmp_path, keep)
    capped = read_attention_scores(tmp_path, graph.edge_index)
    degree = graph.ptr.diff()
    destination = torch.repeat_interleave(torch.arange(graph.num_nodes), degree)
    for layer in range(full.shape[0]):
        kept = capped[layer] > 0
        per_node = torch.bincount(destination[kept], minlength=graph.num_nodes)
        assert torch.equal(per_node, degree.clamp(max=keep))
        sums = torch.zeros(graph.num_nodes).index_add_(0, destination, capped[layer])
        assert torch.allclose(sums, torch.ones(graph.num_nodes), atol=1e-5)
        # every kept score is at least every dropped score of its node
        lowest_kept = torch.full((graph.num_nodes,), 2.0).scatter_reduce(
            0, destination[kept], full[layer][kept], "amin")
        highest_dropped = torch.full((graph.num_nodes,), -1.0).scatter_reduce(
            0, destination[~kept], full[layer][~kept], "amax")
        assert bool((lowest_kept >= highest_dropped).all())
    summary = summarise_scores(tmp_path)  # DuckDB's normalisation check holds on the subset
    assert all(error < 1e-4 for *_, error in summary["per_layer"])


def test_the_pipeline_trains_on_capped_scores(tmp_path):
    _, outputs, _ = run_stages(tmp_path, ["export.max_candidates_per_node=6"])
    rows = pq.ParquetFile(outputs["export"] / SCORES_DIR / "layer_0.parquet").metadata.num_rows
    graph = InteractionGraph.load(outputs["preprocess"] / "interaction_graph.pt")
    assert rows == int(graph.ptr.diff().clamp(max=6).sum()) < graph.num_edges
    assert (outputs["train"] / "model.pt").is_file()


def test_a_cap_below_the_sampled_degree_is_refused():
    with pytest.raises(ConfigError, match="export.max_candidates_per_node"):
        compose_config([*TINY_OVERRIDES, "export.max_candidates_per_node=3"])  # model.degrees=[6,4]
