"""The whole flow through Prefect with its MLflow runs: tags, metrics, artifacts, caching, stage re-runs."""

from __future__ import annotations

import json

import pytest
from mlflow.tracking import MlflowClient

from flows.pipeline import sgt_pipeline
from flows.stage_log import LOGS_FOLDER
from flows.tracking import PLOTS_DIR, Tracker
from sgt_core.artifacts import METRICS_FILE
from sgt_core.config import STAGE_NAMES
from sgt_core.pipeline import STAGE_BY_NAME
from sgt_core.train.outputs import HISTORY_FILE, MODEL_FILE
from tests.conftest import TINY_OVERRIDES


@pytest.fixture(scope="module")
def pipeline(prefect_server, tmp_path_factory):
    root = tmp_path_factory.mktemp("pipeline") / "artifacts"
    overrides = [*TINY_OVERRIDES, f"paths.artifacts={root}", "mlflow.tracking_uri=null"]

    def run(*extra: str) -> dict:
        return sgt_pipeline([*overrides, *extra])

    first = run()
    client = MlflowClient(first["tracking_uri"])
    return run, first, client, root


def children(client: MlflowClient, parent_run_id: str) -> dict:
    parent = client.get_run(parent_run_id)
    runs = client.search_runs([parent.info.experiment_id], f"tags.mlflow.parentRunId = '{parent_run_id}'")
    return {run.data.tags["sgt.stage"]: run for run in runs}


def test_first_run_is_tracked_in_mlflow(pipeline):
    _, first, client, root = pipeline
    assert first["tracking_uri"] == f"sqlite:///{root.resolve() / 'mlflow.db'}"
    parent = client.get_run(first["run_id"])
    assert client.get_experiment(parent.info.experiment_id).name == "sgt-minesweeper"
    assert parent.info.status == "FINISHED"
    assert parent.data.tags["sgt.stage"] == "pipeline"
    assert {"val_roc_auc", "test_roc_auc"} <= set(parent.data.metrics)
    # The parent run's metrics are what the train stage returned: its best validation epoch's. (On this
    # tiny grid they are near chance, 0.27-0.76 over seeds, so no threshold on the value itself.)
    train_dir = root / "train" / first["keys"]["train"]
    reported = json.loads((train_dir / METRICS_FILE).read_text())
    history = json.loads((train_dir / HISTORY_FILE).read_text())
    val = [row["val_roc_auc"] for row in history]
    assert reported["best_epoch"] == val.index(max(val))
    for name in ("val_roc_auc", "test_roc_auc"):
        assert parent.data.metrics[name] == first["metrics"][name] == reported[name]
    assert parent.data.metrics["val_roc_auc"] == val[reported["best_epoch"]]
    assert parent.data.params["model.degrees"] == "[6, 4]" and parent.data.params["seed"] == "0"
    assert "config.yaml" in {a.path for a in client.list_artifacts(first["run_id"])}

    stages = children(client, first["run_id"])
    assert set(stages) == set(STAGE_NAMES)
    for name, run in stages.items():
        assert run.data.tags["sgt.cache_hit"] == "false", name
        assert run.data.tags["sgt.cache_key"] == first["keys"][name]
        assert run.info.status == "FINISHED"
    assert stages["train"].data.tags["sgt.device"] == "cpu"
    # the sampler and optimiser groups are logged with the rest of the config, and with the stage that reads them
    for run in (parent, stages["train"]):
        assert run.data.params["sampler.method"] == "reservoir" and run.data.params["optimizer.lr"] == "0.01"
    assert "attention_scores" in {a.path for a in client.list_artifacts(stages["export"].info.run_id)}
    assert "model.pt" in {a.path for a in client.list_artifacts(stages["train"].info.run_id)}
    # per-epoch metrics, one step per epoch
    loss_history = client.get_metric_history(stages["train"].info.run_id, "loss")
    assert sorted(m.step for m in loss_history) == [0, 1, 2, 3]
    assert len(client.get_metric_history(stages["estimate"].info.run_id, "temperature")) == 6


def test_identical_run_is_served_from_cache(pipeline):
    run, first, client, _ = pipeline
    second = run()
    assert all(stage["cache_hit"] for stage in second["stages"].values())
    assert second["keys"] == first["keys"]
    assert second["metrics"] == first["metrics"]
    assert all(r.data.tags["sgt.cache_hit"] == "true" for r in children(client, second["run_id"]).values())
    # the parent of a fully cached run still carries the test metric
    assert client.get_run(second["run_id"]).data.metrics["test_roc_auc"] == first["metrics"]["test_roc_auc"]


def test_stage_train_reruns_only_training(pipeline):
    run, first, _client, root = pipeline
    model_file = root / "train" / first["keys"]["train"] / "model.pt"
    before = model_file.stat().st_mtime_ns
    rerun = run("stage=train")
    hits = {name: stage["cache_hit"] for name, stage in rerun["stages"].items()}
    assert hits == {"preprocess": True, "estimate": True, "export": True, "train": False}
    assert model_file.stat().st_mtime_ns != before
    # deterministic on CPU: the re-trained network reaches the very same metric
    assert rerun["metrics"] == first["metrics"]


def test_changed_training_option_reruns_only_training(pipeline):
    run, first, _, root = pipeline
    changed = run("optimizer.lr=0.02")
    hits = {name: stage["cache_hit"] for name, stage in changed["stages"].items()}
    assert hits == {"preprocess": True, "estimate": True, "export": True, "train": False}
    assert changed["keys"]["train"] != first["keys"]["train"]
    assert {k: v for k, v in changed["keys"].items() if k != "train"} == {
        k: v for k, v in first["keys"].items() if k != "train"
    }
    assert (root / "train" / changed["keys"]["train"] / "manifest.json").is_file()


def test_changed_estimator_option_reruns_estimate_and_after(pipeline):
    run, first, _, _ = pipeline
    changed = run("estimator.lr=0.02")
    hits = {name: stage["cache_hit"] for name, stage in changed["stages"].items()}
    assert hits == {"preprocess": True, "estimate": False, "export": False, "train": False}
    assert changed["keys"]["preprocess"] == first["keys"]["preprocess"]


@pytest.mark.e2e  # three more pipeline runs; make test keeps the single-run flow tests
def test_multirun_over_seeds_summarises(prefect_server, tmp_path, capsys):
    from flows.cli import main

    root = tmp_path / "artifacts"
    assert main(["run", "-m", *TINY_OVERRIDES, f"paths.artifacts={root}", "mlflow.tracking_uri=null", "seed=0,1"]) == 0
    out = capsys.readouterr().out
    assert "summary over seeds (mean ± std):" in out and "[2 runs]" in out and "test_roc_auc = " in out
    client = MlflowClient(f"sqlite:///{root.resolve() / 'mlflow.db'}")
    experiment = client.get_experiment_by_name("sgt-minesweeper")
    parents = client.search_runs([experiment.experiment_id], "tags.`sgt.stage` = 'pipeline'")
    assert sorted(run.data.params["seed"] for run in parents) == ["0", "1"]


def test_computing_runs_log_the_files_their_stage_declares(pipeline):
    _, first, client, _ = pipeline
    for name, run in children(client, first["run_id"]).items():
        logged = {artifact.path for artifact in client.list_artifacts(run.info.run_id)} - {PLOTS_DIR, LOGS_FOLDER}
        assert logged == set(STAGE_BY_NAME[name].logged), name
        (log_file,) = client.list_artifacts(run.info.run_id, LOGS_FOLDER)  # the stage's own log
        assert log_file.path == f"{LOGS_FOLDER}/{run.info.run_id}.log"


def test_a_failed_background_upload_fails_the_pipeline(pipeline, monkeypatch):
    run, first, client, _ = pipeline

    def full_disk(*_):
        raise OSError("No space left on device")

    monkeypatch.setattr(Tracker, "log_figure_files", full_disk)  # runs on the logging thread, after train returned
    with pytest.raises(OSError, match="No space left on device") as error:
        run("stage=train")
    assert any("in the background" in note for note in error.value.__notes__)
    experiment = client.get_run(first["run_id"]).info.experiment_id
    parent = client.search_runs([experiment], "tags.`sgt.stage` = 'pipeline'",
                                order_by=["attributes.start_time DESC"], max_results=1)[0]
    assert parent.info.status == "FAILED"
    stages = children(client, parent.info.run_id)
    assert stages["train"].info.status == "FAILED"  # the stage whose records are incomplete
    assert stages["export"].info.status == "FINISHED"
    assert MODEL_FILE in {artifact.path for artifact in client.list_artifacts(stages["train"].info.run_id)}
