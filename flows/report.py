"""Reading a pipeline run back from MLflow for `sgt report`: its config, metrics, timings and artifacts; and
how a metric is printed."""

from __future__ import annotations

import datetime
import socket
import textwrap
from pathlib import Path

from mlflow.entities import Run
from mlflow.exceptions import MlflowException
from mlflow.tracking import MlflowClient

from flows.locations import tracking_uri
from sgt_core.artifacts import process_exists
from sgt_core.config import STAGE_NAMES, compose_config
from sgt_core.errors import SGTError
from sgt_core.pipeline import stage_keys


def format_metric(value: float | str) -> str:
    """A metric to four decimals; a word (`undefined`, on a split whose labels leave the metric undefined) as is."""
    return f"{value:.4f}" if isinstance(value, (int, float)) else str(value)


def selects_configuration(overrides: list[str]) -> bool:
    """Whether an override changes what runs; paths.*, mlflow.* and stage only say where or how much."""
    keys = [override.lstrip("+~").split("=", 1)[0] for override in overrides]
    return any(key != "stage" and not key.startswith(("paths.", "mlflow.")) for key in keys)


def find_pipeline_run(overrides: list[str], run_id: str | None = None) -> tuple[MlflowClient, Run]:
    """The client and the pipeline run to report: `run_id`, else the newest run matching the overrides.

    Overrides that select a configuration narrow the search to runs with that configuration's train key
    (which covers every upstream key); without them, the newest pipeline run of any experiment is taken.
    """
    cfg = compose_config(overrides)
    uri = tracking_uri(cfg)
    database = uri.removeprefix("sqlite:///")
    if uri.startswith("sqlite:///") and not Path(database).is_file():
        # Opening a missing sqlite store would create an empty one; a report must not write anything.
        raise SGTError(f"{database}: no MLflow store, so no pipeline run yet; run `sgt run` first")
    client = MlflowClient(uri)
    if run_id:
        return client, _pipeline_run_by_id(client, run_id)
    query = "tags.`sgt.stage` = 'pipeline'"
    which = ""
    if selects_configuration(overrides):
        query += f" AND tags.`sgt.key.train` = '{stage_keys(cfg)['train']}'"
        which = " of this configuration"
    experiments = [experiment.experiment_id for experiment in client.search_experiments()]
    runs = client.search_runs(experiments, query, order_by=["attributes.start_time DESC"], max_results=1)
    if not runs:
        raise SGTError(f"{uri}: no pipeline run{which} yet; run `sgt run` first")
    return client, runs[0]


def _pipeline_run_by_id(client: MlflowClient, run_id: str) -> Run:
    """The pipeline run `run_id`, or the pipeline a stage's run `run_id` belongs to."""
    try:
        run = client.get_run(run_id)
    except MlflowException:
        raise SGTError(f"--run-id {run_id}: no such run in {client.tracking_uri}") from None
    parent = run.data.tags.get("mlflow.parentRunId")
    if run.data.tags.get("sgt.stage") != "pipeline" and parent:
        run = client.get_run(parent)
    if run.data.tags.get("sgt.stage") != "pipeline":
        raise SGTError(f"--run-id {run_id}: not an sgt pipeline run")
    return run


# A stage's state in a report, from its child run's MLflow status; "ran" and "cached" are FINISHED runs.
STATES = {"FAILED": "failed", "KILLED": "killed", "RUNNING": "running", "SCHEDULED": "running"}
MISSING = "missing"  # no child run: the pipeline ended before the stage


def run_status(run: Run) -> str:
    """The run's MLflow status, but KILLED for a run still RUNNING whose process on this machine is gone
    (SIGKILL, out of memory): the next `sgt run` of its experiment records it so, and a report says it now."""
    tags, pid = run.data.tags, run.data.tags.get("sgt.pid", "")
    if (run.info.status == "RUNNING" and tags.get("sgt.host") == socket.gethostname() and pid.isdigit()
            and not process_exists(int(pid))):
        return "KILLED"
    return run.info.status


def stage_state(child: Run | None) -> str:
    """ran, cached, failed, killed, running, or missing: what the text and the JSON both say."""
    if child is None:
        return MISSING
    status = run_status(child)
    if status in STATES:
        return STATES[status]
    return "cached" if child.data.tags.get("sgt.cache_hit") == "true" else "ran"


def pipeline_report(client: MlflowClient, run: Run) -> dict:
    """A pipeline run as plain data: config, metrics, and every stage's state, timing, cache hit and folder.

    Every stage of the pipeline is listed, in order; one the run never reached is `missing`, with no key,
    time or folder.
    """
    children = client.search_runs([run.info.experiment_id], f"tags.mlflow.parentRunId = '{run.info.run_id}'")
    by_stage = {child.data.tags.get("sgt.stage"): child for child in children}
    stages = [
        {
            "stage": name,
            "state": stage_state(child),
            "cache_hit": child is not None and child.data.tags.get("sgt.cache_hit") == "true",
            "seconds": child.data.metrics.get("stage_seconds") if child else None,
            "key": child.data.tags.get("sgt.cache_key") if child else None,
            "artifact_dir": child.data.tags.get("sgt.artifact_dir") if child else None,
            "status": run_status(child) if child else None,
            "log_file": child.data.tags.get("sgt.log_file") if child else None,
        }
        for name in STAGE_NAMES
        for child in (by_stage.get(name),)
    ]
    started = datetime.datetime.fromtimestamp(run.info.start_time / 1000).isoformat(" ", "seconds")
    return {
        "run_id": run.info.run_id,
        "experiment": client.get_experiment(run.info.experiment_id).name,
        "status": run_status(run),
        "started": started,
        "tracking_uri": client.tracking_uri,
        "config": dict(sorted(run.data.params.items())),
        "metrics": {k: v for k, v in sorted(run.data.metrics.items()) if k.startswith(("val_", "test_"))},
        "pipeline_seconds": run.data.metrics.get("pipeline_seconds"),
        "stages": stages,
        "notes": {k.removeprefix("sgt.note."): v for k, v in sorted(run.data.tags.items()) if k.startswith("sgt.note.")},
    }


def format_report(report: dict) -> str:
    """The report as text: the config one wrapped line per section, then metrics, timings and folders."""
    lines = [f"pipeline run {report['run_id']} ({report['status'].lower()}, started {report['started']})",
             f"experiment {report['experiment']} in {report['tracking_uri']}", "", "config:"]
    sections: dict[str, list[str]] = {}
    for name, value in report["config"].items():
        section, _, rest = name.partition(".")
        sections.setdefault(section if rest else "", []).append(f"{rest or section}={value}")
    for section, values in sections.items():
        lines += textwrap.wrap(" ".join(values), 110, initial_indent=f"  {section or '(top)':<11} ",
                               subsequent_indent=" " * 14, break_on_hyphens=False)
    lines += ["", "metrics:"] + [f"  {name} = {value:.4f}" for name, value in report["metrics"].items()]
    lines += [f"  note ({name}): {text}" for name, text in report.get("notes", {}).items()]
    total = report["pipeline_seconds"]
    lines += ["", f"timings (pipeline {total:.1f} s):" if total is not None else "timings:"]
    for stage in report["stages"]:
        seconds = f"{stage['seconds']:.1f} s" if stage["seconds"] is not None else "-"
        log_file = f"  log: {stage['log_file']}" if stage["state"] in ("failed", "killed") and stage["log_file"] else ""
        lines.append(f"  {stage['stage']:<11} {stage['state']:<7} {seconds:>9}{log_file}")
    lines += ["", "artifacts:"]
    for stage in report["stages"]:
        if stage["state"] in ("ran", "cached"):
            absent = "" if stage["artifact_dir"] and Path(stage["artifact_dir"]).is_dir() else "  (missing)"
            lines.append(f"  {stage['stage']:<11} {stage['artifact_dir'] or '-'}{absent}")
        else:  # nothing was kept of a stage that did not finish
            lines.append(f"  {stage['stage']:<11} - ({stage['state']}: no result)")
    return "\n".join(lines)
