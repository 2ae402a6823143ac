"""`sgt serve`: the pipeline as a Prefect deployment whose dataset, preset and overrides the Prefect UI fills in."""

from __future__ import annotations

from prefect import flow, get_run_logger
from prefect.artifacts import create_markdown_artifact
from prefect.states import Failed, State

from flows.pipeline import sgt_pipeline
from flows.preflight import preflight
from flows.report import format_metric
from sgt_core.errors import SGTError

DEPLOYMENT_NAME = "sgt"  # triggered as "sgt-run/sgt": <flow name>/<deployment name>


def hydra_overrides(dataset: str | None, preset: str | None, overrides: tuple[str, ...]) -> list[str]:
    """The deployment's parameters as the Hydra overrides `sgt run` takes."""
    chosen = [f"dataset={dataset}"] if dataset else []
    chosen += [f"+experiment={preset}"] if preset else []
    return [*chosen, *overrides]


@flow(name="sgt-run", persist_result=False)
def sgt_run(dataset: str | None = None, preset: str | None = None, overrides: tuple[str, ...] = ()) -> dict | State:
    """Runs the pipeline (preprocess -> estimate -> export -> train) as `sgt run` would, tracked in MLflow.

    Args:
        dataset: a conf/dataset/ option, e.g. minesweeper (generated), npz or long_range; empty keeps the
            preset's dataset, else minesweeper.
        preset: a conf/experiment/ preset, e.g. tolokers, cora or long_range (the paper's settings).
        overrides: further Hydra overrides, as on the `sgt run` command line, e.g. "train.epochs=50".
    """
    run_overrides = hydra_overrides(dataset, preset, overrides)
    try:
        preflight(run_overrides)  # bad parameters fail here, before any stage runs or MLflow run exists
        result = sgt_pipeline(run_overrides)
    except SGTError as error:
        # The CLI's one-line message, as the run's log line and its failed state, without a traceback.
        get_run_logger().error("error: %s", error)
        return Failed(message=f"error: {error}")
    create_markdown_artifact(mlflow_summary(result), key="sgt-mlflow-run", description="the run in MLflow")
    return result


def mlflow_summary(result: dict) -> str:
    """Markdown for the Prefect UI pointing at the run's MLflow parent run, with its final metrics."""
    rows = "".join(f"| {name} | {format_metric(value)} |\n" for name, value in result["metrics"].items())
    return (f"MLflow parent run `{result['run_id']}` in `{result['tracking_uri']}`\n\n"
            f"| metric | value |\n|---|---|\n{rows}")


def serve(overrides: list[str] | None = None, pools: bool = False) -> None:
    """Registers the deployments on the Prefect API and runs the pipeline's flow runs until Ctrl-C.

    `flow.serve` polls the API itself, so the pipeline needs no work pool or worker. With `pools`, the stage
    deployments (`sgt-stage/<stage>@<pool>`, pools from `orchestration=pools` and `overrides`) are registered
    too, and the pipeline deployment's `overrides` parameter defaults to `orchestration=pools` and
    `overrides`, so that runs started from the UI send their stages to those pools unless the user changes
    it; workers on those pools (`sgt workers`) run them. Without it, no stage deployment is registered: one
    no worker serves shows as Not Ready in the UI, and a run with `orchestration=pools` registers its own.

    Raises:
        SGTError: `overrides` without `pools`, where they would choose nothing.
    """
    if overrides and not pools:
        raise SGTError(f"sgt serve {' '.join(overrides)}: the overrides choose the stages' pools and the UI "
                       "runs' defaults, which need --pools (sgt serve --pools ...)")
    defaults = None
    if pools:
        from flows.pools import register_stage_deployments, stage_pools
        from sgt_core.config import compose_config

        pool_overrides = ["orchestration=pools", *(overrides or [])]
        for name in register_stage_deployments(stage_pools(compose_config(pool_overrides))):
            print(f"registered the stage deployment {name}", flush=True)
        defaults = {"overrides": pool_overrides}
    sgt_run.serve(name=DEPLOYMENT_NAME, tags=["sgt"], parameters=defaults)
