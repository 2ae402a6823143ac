"""The `all_components` preset end to end on a small grid: all seven edge types reach the exported scores."""

from __future__ import annotations

import json

import duckdb
import pytest

from sgt_core.config import compose_config
from sgt_core.errors import ConfigError
from sgt_core.export.outputs import SCORES_DIR
from sgt_core.export.scores import scores_glob
from sgt_core.preprocess.interaction_graph import EDGE_TYPES, InteractionGraph
from sgt_core.preprocess.outputs import INTERACTION_GRAPH_FILE
from sgt_core.preprocess.substructure_tokens import SUBSTRUCTURES_FILE
from sgt_core.train.outputs import HISTORY_FILE
from tests.conftest import TINY_OVERRIDES
from tests.stage_runner import run_stages

PRESET = ["+experiment=all_components", *TINY_OVERRIDES]


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    return run_stages(tmp_path_factory.mktemp("all_components"), PRESET, base=())


def test_preset_switches_every_component_on():
    preprocess = compose_config(PRESET)["preprocess"]
    assert preprocess["expander"]["enabled"] and preprocess["virtual_nodes"] == 1
    assert all(preprocess[name]["enabled"] for name in ("anchors", "substructures", "lpe"))
    assert preprocess["anchors"]["max_anchors_per_node"] is not None  # the uncapped field is too large


def test_exported_scores_hold_all_seven_edge_types(run):
    _, outputs, _ = run
    files = scores_glob(outputs["export"] / SCORES_DIR)
    with duckdb.connect() as con:
        types = {row[0] for row in con.execute(
            f"SELECT DISTINCT CAST(edge_type AS VARCHAR) FROM read_parquet('{files}')").fetchall()}
        worst = con.execute(
            f"SELECT MAX(ABS(total - 1)) FROM (SELECT layer, dst, SUM(score) AS total "
            f"FROM read_parquet('{files}') GROUP BY layer, dst)").fetchone()[0]
        layers = con.execute(f"SELECT COUNT(DISTINCT layer) FROM read_parquet('{files}')").fetchone()[0]
    assert types == set(EDGE_TYPES)
    assert worst < 1e-4
    assert layers == 2


def test_preprocess_reports_anchor_khop_and_token_counts(run):
    _, outputs, metrics = run
    stats = metrics["preprocess"]
    assert stats["num_anchors"] > 0 and stats["num_khop_edges"] > 0 and stats["num_tokens"] > 0
    assert any(name.startswith("tokens_") for name in stats)
    graph = InteractionGraph.load(outputs["preprocess"] / INTERACTION_GRAPH_FILE)
    counts = graph.edge_type_counts()
    assert stats["num_khop_edges"] == counts["khop"] and stats["num_anchor_edges"] == counts["anchor"]
    assert stats["num_tokens"] == graph.num_tokens
    assert (outputs["preprocess"] / SUBSTRUCTURES_FILE).is_file()  # the cached substructures


@pytest.mark.parametrize("stage", ["estimate", "train"])
def test_both_networks_train_with_every_component_and_report_their_best_epoch(run, stage):
    # On this 12x12 grid after a few epochs the ROC-AUCs are near chance (0.27-0.76 over seeds 0-2), so
    # what is checked is that the reported metrics are the best validation epoch's, as the history says.
    cfg, outputs, metrics = run
    history = json.loads((outputs[stage] / HISTORY_FILE).read_text())
    epochs = cfg["estimator" if stage == "estimate" else "train"]["epochs"]
    assert [row["epoch"] for row in history] == list(range(epochs))
    val = [row["val_roc_auc"] for row in history]
    best = metrics[stage]["best_epoch"]
    assert metrics[stage]["selected_by"] == "val_roc_auc"
    assert best == val.index(max(val)) and metrics[stage]["val_roc_auc"] == val[best]
    assert isinstance(metrics[stage]["test_roc_auc"], float)


def test_export_reports_every_edge_types_attention_mass(run):
    _, _, metrics = run
    assert all(f"mass_{name}_layer_0" in metrics["export"] for name in EDGE_TYPES)


@pytest.mark.parametrize("override, message", [
    ("preprocess.anchors.max_spd=2", "max_spd"),
    ("preprocess.anchors.max_anchors_per_node=-1", "max_anchors_per_node"),
    ("+preprocess.substructures.types.hexagon=3", "types.hexagon: unknown key"),
    ("preprocess.lpe.m=0", "preprocess.lpe.m"),
    ("model.lpe_heads=3", "lpe_heads"),
])
def test_bad_component_values_fail_before_anything_runs(override, message):
    with pytest.raises(ConfigError, match=message):
        compose_config([*PRESET, override])
