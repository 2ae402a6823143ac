"""`sgt serve`: a run triggered through Prefect's API runs the pipeline and lands in MLflow like `sgt run`."""

from __future__ import annotations

import httpx
import pytest
from mlflow.tracking import MlflowClient

from flows.cli import main
from flows.serve import DEPLOYMENT_NAME, hydra_overrides, sgt_run
from sgt_core.config import STAGE_NAMES, compose_config
from tests.ui.conftest import free_port


def pipeline_runs(tracking_uri: str) -> list:
    client = MlflowClient(tracking_uri)
    experiments = [e.experiment_id for e in client.search_experiments()]
    return client.search_runs(experiments, "tags.`sgt.stage` = 'pipeline'")


def test_parameters_become_the_clis_overrides():
    assert hydra_overrides(None, None, ["seed=3"]) == ["seed=3"]
    # a preset brings its own dataset unless the dataset parameter overrides it
    preset = compose_config(hydra_overrides(None, "tolokers", ["train.epochs=5"]))
    assert preset["dataset"]["path"].endswith("tolokers.npz") and preset["train"]["epochs"] == 5
    assert compose_config(hydra_overrides("long_range", None, []))["dataset"]["name"] == "long_range"


def test_serve_without_a_server_gives_one_clear_error(monkeypatch, capsys):
    monkeypatch.setenv("PREFECT_API_URL", "unused")  # restored afterwards; `sgt serve` sets it
    api_url = f"http://127.0.0.1:{free_port()}/api"
    assert main(["serve", "--api-url", api_url]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"error: {api_url}: no Prefect server answers") and "Traceback" not in err


# Starts a Prefect server, the MLflow UI and `sgt serve` as real processes (about a minute on 2 cores):
# in the default suite, since it needs nothing beyond the project's own dependencies.
@pytest.mark.server
def test_served_run_is_tracked_in_mlflow(ui_stack, served_run):
    parents = pipeline_runs(ui_stack.tracking_uri)
    assert len(parents) == 1
    parent = parents[0]
    assert parent.info.status == "FINISHED"
    assert {"val_roc_auc", "test_roc_auc"} <= set(parent.data.metrics)
    assert parent.data.params["model.degrees"] == "[6, 4]"  # the tiny overrides arrived through Prefect
    client = MlflowClient(ui_stack.tracking_uri)
    stages = client.search_runs([parent.info.experiment_id], f"tags.mlflow.parentRunId = '{parent.info.run_id}'")
    assert sorted(run.data.tags["sgt.stage"] for run in stages) == sorted(STAGE_NAMES)
    # the Prefect run points at its MLflow run
    artifacts = httpx.post(f"{ui_stack.api_url}/artifacts/filter",
                           json={"flow_runs": {"id": {"any_": [str(served_run.id)]}}}).json()
    assert [a["key"] for a in artifacts] == ["sgt-mlflow-run"]
    assert parent.info.run_id in artifacts[0]["data"]


@pytest.mark.server
def test_invalid_parameters_fail_with_the_clis_error(ui_stack, capsys):
    before = len(pipeline_runs(ui_stack.tracking_uri))
    flow_run = ui_stack.trigger(dataset="nope")
    assert main(["run", "dataset=nope"]) == 2
    cli_error = capsys.readouterr().err.strip()
    assert flow_run.state.is_failed()
    assert flow_run.state.message == cli_error
    assert cli_error.startswith("error: ") and "'nope'" in cli_error
    assert len(pipeline_runs(ui_stack.tracking_uri)) == before  # nothing recorded


@pytest.mark.server
def test_serve_without_pools_registers_no_stage_deployment(ui_stack, monkeypatch, capsys):
    """Stage deployments that no worker serves show as Not Ready in the UI: `sgt serve` registers them only
    with --pools."""
    deployments = httpx.post(f"{ui_stack.api_url}/deployments/filter", json={}).json()
    assert [d["name"] for d in deployments] == [DEPLOYMENT_NAME]
    flow = httpx.get(f"{ui_stack.api_url}/flows/{deployments[0]['flow_id']}").json()
    assert flow["name"] == sgt_run.name
    monkeypatch.setenv("PREFECT_API_URL", ui_stack.api_url)  # restored afterwards; `sgt serve` sets it
    assert main(["serve", "--api-url", ui_stack.api_url, "orchestration.pools.train=sgt-cpu"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: sgt serve orchestration.pools.train=sgt-cpu: ") and "--pools" in err
    assert len(httpx.post(f"{ui_stack.api_url}/deployments/filter", json={}).json()) == 1
