"""A dataset of many graphs through the whole flow: Prefect, MLflow's graph-level metrics, scores per graph."""

from __future__ import annotations

import duckdb
import pytest
from mlflow.tracking import MlflowClient

from flows.pipeline import sgt_pipeline
from flows.report import format_report, pipeline_report
from tests.data.test_tu import tiny_graphs, write_tu

GRAPH_LEVEL = ["model.hidden=16", "model.heads=2", "model.num_layers=2", "model.degrees=[6,6]", "model.local=gine",
               "model.readout=mean", "estimator.epochs=3", "estimator.batch_size=8", "train.epochs=3",
               "train.batch_size=8", "dataset.num_folds=4", "preprocess.virtual_nodes=1"]


@pytest.fixture(scope="module")
def graph_run(prefect_server, tmp_path_factory):
    root = tmp_path_factory.mktemp("graph-level")
    folder = write_tu(root / "TOY", tiny_graphs(40))
    overrides = ["dataset=tu", f"dataset.path={folder}", *GRAPH_LEVEL, f"paths.artifacts={root / 'artifacts'}",
                 "mlflow.tracking_uri=null"]
    return sgt_pipeline(overrides), root / "artifacts"


def test_a_graph_classification_run_is_tracked_with_its_task_metrics(graph_run):
    result, _ = graph_run
    client = MlflowClient(result["tracking_uri"])
    parent = client.get_run(result["run_id"])
    assert client.get_experiment(parent.info.experiment_id).name == "sgt-tu-toy"
    assert {"val_accuracy", "test_accuracy"} <= set(parent.data.metrics)
    assert 0.0 <= parent.data.metrics["test_accuracy"] <= 1.0
    stages = {run.data.tags["sgt.stage"]: run for run in client.search_runs(
        [parent.info.experiment_id], f"tags.mlflow.parentRunId = '{result['run_id']}'")}
    assert stages["preprocess"].data.tags["sgt.task"] == "graph_classification"
    assert stages["preprocess"].data.metrics["num_graphs"] == 40
    assert stages["train"].data.tags["sgt.selected_by"] == "val_accuracy"
    # the dataset's notes (here: how TU's labels became classes) are on the run and in its report
    assert result["notes"] and parent.data.tags[f"sgt.note.{next(iter(result['notes']))}"]
    assert "note (" in format_report(pipeline_report(client, parent))


def test_the_exported_scores_answer_per_graph(graph_run):
    result, root = graph_run
    files = root / "export" / result["keys"]["export"] / "attention_scores" / "layer_*.parquet"
    per_graph = duckdb.sql(f"SELECT graph_id, SUM(score) FROM read_parquet('{files}') WHERE layer = 0 "
                           "GROUP BY graph_id ORDER BY graph_id").fetchall()
    sizes = [3 + graph % 4 + 1 for graph in range(40)]  # and each graph's own virtual node
    # each node's scores sum to 1, so a graph's sum to its node count
    assert [graph for graph, _ in per_graph] == list(range(40))
    assert [round(total, 3) for _, total in per_graph] == [float(size) for size in sizes]
