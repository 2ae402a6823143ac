"""The scale presets: a small generated graph end to end with `+experiment=scale`, and Amazon2M's settings."""

from __future__ import annotations

from sgt_core.config import compose_config
from tests.stage_runner import run_stages

SMALL_SCALE = ["+experiment=scale", "dataset.num_nodes=600", "dataset.avg_degree=8", "preprocess.expander.degree=6",
               "estimator.epochs=2", "train.epochs=2", "model.hidden=8", "model.heads=2"]


def test_a_small_generated_graph_runs_end_to_end_with_the_scale_preset(tmp_path):
    cfg, _, metrics = run_stages(tmp_path, SMALL_SCALE, base=())
    assert cfg["dataset"]["name"] == "synthetic" and cfg["model"]["degrees"] == [12, 10, 10, 10]
    train, preprocess = metrics["train"], metrics["preprocess"]
    assert 0.0 <= train["test_accuracy"] <= 1.0 and train["best_epoch"] in (0, 1)  # 5 classes: accuracy
    assert preprocess["num_nodes"] == 600 and preprocess["num_edges"] > 600 * (8 + 6)  # graph + expander + self


def test_the_amazon2m_preset_has_table_9s_settings_at_amazon2ms_size():
    cfg = compose_config(["+experiment=amazon2m"])
    dataset = cfg["dataset"]
    assert (dataset["name"], dataset["num_nodes"], dataset["num_features"], dataset["num_classes"]) == (
        "synthetic", 2_449_029, 100, 47)
    assert round(dataset["num_nodes"] * dataset["avg_degree"] / 2) == 61_862_473  # Amazon2M: 123.7 M directed
    assert cfg["preprocess"]["expander"]["degree"] == 30
    assert (cfg["estimator"]["num_layers"], cfg["estimator"]["width"]) == (2, 8)
    assert (cfg["model"]["hidden"], cfg["model"]["degrees"], cfg["train"]["batch_size"]) == (128, [10, 10], 1000)
