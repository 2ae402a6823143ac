"""The MLflow tracking layer: runs, params, metrics and artifacts; stages never import MLflow."""

from __future__ import annotations

import contextlib
import json
import logging
import os
import socket
import tempfile
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import AbstractContextManager, nullcontext
from pathlib import Path
from typing import TYPE_CHECKING

import yaml
from filelock import FileLock
from mlflow.entities import Metric, Param, Run, RunTag
from mlflow.exceptions import MlflowException
from mlflow.tracking import MlflowClient

from flows.hooks import StageHooks, StageRun
from flows.interrupts import is_interrupt
from flows.locations import tracking_uri
from flows.mlflow_store import ensure_store
from sgt_core.artifacts import is_url, process_exists
from sgt_core.pipeline import StageResult, dataset_id

if TYPE_CHECKING:
    from matplotlib.figure import Figure

    from flows.memory import MemorySampler

log = logging.getLogger("sgt")

_BATCH = 100  # MLflow accepts at most 100 params per log_batch call
PLOTS_DIR = "plots"  # artifact folder of a run's figures
WORKER_TAG = "sgt.worker"  # where a stage ran: `<pool>@<host>` on a work pool, `local@<host>` in the flow
# MLflow's marker of an experiment's type (its UI writes it when one picks the type, its GenAI demo writes
# genai_development): SGT's experiments hold model-training runs. MLflow 3.17's UI opens an experiment by its
# own GenAI / Model training switch rather than by this tag (docs/operations/dashboards.md).
EXPERIMENT_KIND_TAG = "mlflow.experimentKind"
MODEL_TRAINING = "custom_model_development"


def flatten(value, prefix: str = "") -> dict[str, str]:
    """Nested config -> {"a.b.c": "value"}; lists stay whole (e.g. model.degrees=[12, 5, 5, 5])."""
    if isinstance(value, dict):
        items: dict[str, str] = {}
        for key, inner in value.items():
            items.update(flatten(inner, f"{prefix}{key}."))
        return items
    return {prefix.rstrip("."): json.dumps(value) if isinstance(value, list) else str(value)}


def owner_tags() -> dict[str, str]:
    """Tags naming the process that writes a run, so a later run can tell whether it died."""
    return {"sgt.host": socket.gethostname(), "sgt.pid": str(os.getpid())}


def _run_artifact_location(cfg: dict, uri: str) -> str | None:
    """Where a new experiment keeps its runs' files: `<artifacts>/mlruns`; with an object-store artifacts
    root, beside a sqlite store, else where the tracking server puts them (None)."""
    if not is_url(cfg["paths"]["artifacts"]):
        return (Path(cfg["paths"]["artifacts"]).resolve() / "mlruns").as_uri()
    if uri.startswith("sqlite:///"):
        return (Path(uri.removeprefix("sqlite:///")).parent / "mlruns").as_uri()
    return None


def _store_creation_lock(uri: str) -> AbstractContextManager:
    """An inter-process lock beside a sqlite store (`mlflow.db.lock`); a no-op for other stores.

    MLflow migrates a new sqlite file on first use, and two pipelines starting together on the same
    new file would both migrate it ("table _alembic_tmp_experiments already exists").
    """
    if not uri.startswith("sqlite:///"):
        return nullcontext()
    database = Path(uri.removeprefix("sqlite:///"))
    database.parent.mkdir(parents=True, exist_ok=True)
    return FileLock(database.with_name(database.name + ".lock"))


def open_store_early(cfg: dict, new: bool = True) -> bool:
    """Opens the run's sqlite MLflow store on a thread of its own (a new store's tables take seconds) while the
    run waits for its checks or its flow to start; returns whether it did. The run's Tracker then finds it
    open (MLflow keeps one store per URI), or waits on the store's lock until it is. A failure is left to the
    Tracker, which reports it. `new=False` opens only a store that exists: a run refused afterwards (its
    dataset's content) must leave nothing behind."""
    import threading

    uri = tracking_uri(cfg)
    if not uri.startswith("sqlite:///") or not (new or Path(uri.removeprefix("sqlite:///")).is_file()):
        return False

    def open_store() -> None:
        with contextlib.suppress(Exception), _store_creation_lock(uri):
            ensure_store(uri)
            MlflowClient(uri)

    threading.Thread(target=open_store, name="sgt-mlflow-store", daemon=True).start()
    return True


class Tracker:
    """Creates the pipeline's parent run and one nested child run per stage, through MlflowClient.

    The client API (explicit run ids, no active-run stack) keeps tracking correct whichever thread
    Prefect runs a task in, and lets two pipelines share one store without touching each other's runs.
    It also lets a stage's uploads and plots run on a logging thread of their own (`later`) while the
    next stage runs; whoever owns the tracker waits for them with `flush` before its run ends.
    """

    def __init__(self, cfg: dict, close_orphans: bool = True) -> None:
        if not is_url(cfg["paths"]["artifacts"]):
            Path(cfg["paths"]["artifacts"]).resolve().mkdir(parents=True, exist_ok=True)
        uri = tracking_uri(cfg)
        name = cfg["mlflow"]["experiment"] or f"sgt-{dataset_id(cfg)}"
        with _store_creation_lock(uri):  # a new store's tables are made once, by one process
            ensure_store(uri)
            self.client = MlflowClient(uri)
            experiment = self.client.get_experiment_by_name(name)
            if experiment is None:
                try:
                    self.experiment_id = self.client.create_experiment(
                        name, artifact_location=_run_artifact_location(cfg, uri),
                        tags={EXPERIMENT_KIND_TAG: MODEL_TRAINING},
                    )
                except MlflowException:  # another process created it first (a tracking server)
                    experiment = self.client.get_experiment_by_name(name)
            if experiment is not None:
                self.experiment_id = experiment.experiment_id
                # An experiment from before SGT set the kind (or made by hand) gets it; a kind someone chose
                # in the UI stays.
                if EXPERIMENT_KIND_TAG not in experiment.tags:
                    self.client.set_experiment_tag(self.experiment_id, EXPERIMENT_KIND_TAG, MODEL_TRAINING)
        self.closed_runs = self.close_orphaned_runs() if close_orphans else {}
        self._background: ThreadPoolExecutor | None = None
        self._queued: list[Future] = []

    def close_orphaned_runs(self) -> dict[str, dict[str, str]]:
        """Marks KILLED this experiment's RUNNING runs whose process on this machine has gone.

        A run killed outright (SIGKILL, out of memory, power loss) never closes its MLflow runs; the next
        pipeline that opens the experiment does it for them. Runs of other machines, and of processes that
        still exist, are left alone. Returns the tags of the runs it closed, by run id.
        """
        host, closed = socket.gethostname(), {}
        for run in self.client.search_runs([self.experiment_id], "attributes.status = 'RUNNING'", max_results=1000):
            tags = run.data.tags
            if tags.get("sgt.host") == host and "sgt.pid" in tags and not process_exists(int(tags["sgt.pid"])):
                self.client.set_terminated(run.info.run_id, "KILLED")
                closed[run.info.run_id] = tags
        return closed

    def start_pipeline(self, cfg: dict, keys: dict[str, str], tags: dict[str, str] | None = None) -> str:
        run = self.client.create_run(
            self.experiment_id,
            run_name=f"pipeline-{keys['train'][:8]}",
            tags={"sgt.stage": "pipeline", **{f"sgt.key.{stage}": key for stage, key in keys.items()}, **owner_tags(),
                  **(tags or {})},
        )
        self.log_params(run.info.run_id, flatten(cfg))
        with tempfile.TemporaryDirectory() as folder:
            path = Path(folder) / "config.yaml"
            path.write_text(yaml.safe_dump(cfg, sort_keys=False))
            self.client.log_artifact(run.info.run_id, str(path))
        return run.info.run_id

    def start_stage(self, parent_run_id: str, stage: str, key: str, cache_hit: bool, params: dict,
                    tags: dict[str, str] | None = None) -> str:
        run = self.client.create_run(
            self.experiment_id,
            run_name=stage,
            tags={
                "mlflow.parentRunId": parent_run_id,
                "sgt.stage": stage,
                "sgt.cache_hit": str(cache_hit).lower(),
                "sgt.cache_key": key,
                **owner_tags(),
                **(tags or {}),
            },
        )
        self.log_params(run.info.run_id, flatten(params))
        return run.info.run_id

    def stage_run(self, parent_run_id: str, stage: str) -> Run | None:
        """The child run of stage `stage` under the pipeline run `parent_run_id` (None if there is none)."""
        runs = self.client.search_runs(
            [self.experiment_id],
            f"tags.mlflow.parentRunId = '{parent_run_id}' AND tags.`sgt.stage` = '{stage}'",
            order_by=["attributes.start_time DESC"], max_results=1,
        )
        return runs[0] if runs else None

    def log_results(self, run_id: str, metrics: dict, history: list[dict] | None = None) -> None:
        """Numbers become metrics (history rows per epoch, as steps); strings become `sgt.*` tags."""
        values = [Metric(k, float(v), 0, 0) for k, v in metrics.items() if isinstance(v, (int, float))]
        for row in history or []:
            step = int(row["epoch"])
            values += [Metric(k, float(v), 0, step) for k, v in row.items() if k != "epoch"]
        for start in range(0, len(values), 1000):
            self.client.log_batch(run_id, metrics=values[start:start + 1000])
        for key, value in metrics.items():
            if isinstance(value, str):
                self.client.set_tag(run_id, f"sgt.{key}", value)

    def set_tags(self, run_id: str, tags: dict[str, str]) -> None:
        self.client.log_batch(run_id, tags=[RunTag(k, str(v)) for k, v in tags.items()])

    def log_metric_series(self, run_id: str, key: str, samples: list[tuple[float, float]], started_at: float) -> None:
        """(seconds since `started_at`, value) samples as one metric: step = milliseconds, timestamp = wall clock."""
        values = [Metric(key, float(value), int((started_at + seconds) * 1000), int(seconds * 1000))
                  for seconds, value in samples]
        for start in range(0, len(values), 1000):
            self.client.log_batch(run_id, metrics=values[start:start + 1000])

    def log_figures(self, run_id: str, figures: dict[str, Figure]) -> None:
        """Each figure as `plots/<name>.png` on the run."""
        for name, figure in figures.items():
            self.client.log_figure(run_id, figure, f"{PLOTS_DIR}/{name}.png")

    def log_figure_files(self, run_id: str, folder: Path) -> None:
        """Each figure drawn into `folder` (`<name>.png`) as `plots/<name>.png` on the run."""
        self.client.log_artifacts(run_id, str(folder), PLOTS_DIR)

    def log_artifact(self, run_id: str, path: Path, artifact_path: str | None = None) -> None:
        if path.is_dir():
            self.client.log_artifacts(run_id, str(path), artifact_path)
        else:
            self.client.log_artifact(run_id, str(path), artifact_path)

    def end(self, run_id: str, ok: bool = True) -> None:
        self.client.set_terminated(run_id, "FINISHED" if ok else "FAILED")

    def later(self, run_id: str, job: Callable[..., object], *args) -> None:
        """Runs `job(*args)` for the run `run_id` on the logging thread, after every job queued before it.

        The thread starts with the first job and stops at `flush`. A job that fails marks its run FAILED,
        also one that has ended already, and `flush` raises its error: a run must not lose its records
        silently.
        """
        if self._background is None:
            self._background = ThreadPoolExecutor(max_workers=1, thread_name_prefix="sgt-tracking")
        self._queued.append(self._background.submit(self._run_job, run_id, job, *args))

    def _run_job(self, run_id: str, job: Callable[..., object], *args) -> None:
        try:
            job(*args)
        except BaseException as error:
            with contextlib.suppress(Exception):
                self.end(run_id, ok=False)
            error.add_note(f"(while logging to the MLflow run {run_id} in the background)")
            raise

    def flush(self) -> None:
        """Waits for every queued job and stops the logging thread; raises the first job's error, logs the rest."""
        if self._background is None:
            return
        self._background.shutdown(wait=True)
        queued, self._queued, self._background = self._queued, [], None
        errors = [error for future in queued if (error := future.exception()) is not None]
        for error in errors[1:]:
            log.error("MLflow logging failed as well: %s", error)
        if errors:
            raise errors[0]

    def fail(self, run_id: str, killed: bool = False) -> None:
        """Marks a run FAILED (KILLED: `killed`, for an interrupted one) once the queued jobs are done, raising
        nothing: neither a failed upload nor a full disk may hide the error that ended the run."""
        try:
            self.flush()
        except Exception as error:  # noqa: BLE001 - one line: the error that ended the run is raised
            log.error("MLflow logging failed as well: %s", error)
        with contextlib.suppress(Exception):
            self.client.set_terminated(run_id, "KILLED" if killed else "FAILED")

    def log_params(self, run_id: str, params: dict[str, str]) -> None:
        items = [Param(k, v[:6000]) for k, v in params.items()]
        for start in range(0, len(items), _BATCH):
            self.client.log_batch(run_id, params=items[start:start + _BATCH])


class MlflowHooks(StageHooks):
    """Records a stage as a child run of the pipeline's run: its config and where it runs as it starts; its
    metrics, history and result's folder as it ends, and ends it; then, on the logging thread, the files
    its stage declares and its memory trace (only where it computed).
    """

    def __init__(self, tracker: Tracker, parent_run_id: str, worker: dict[str, str] | None = None) -> None:
        self.tracker, self.parent_run_id = tracker, parent_run_id
        self.worker = worker if worker is not None else {WORKER_TAG: f"local@{socket.gethostname()}"}

    def before_stage(self, run: StageRun) -> None:
        run.run_id = self.tracker.start_stage(self.parent_run_id, run.stage.name, run.key, run.cache_hit,
                                              run.params, self.worker)

    def after_stage(self, run: StageRun, result: StageResult) -> None:
        tracker = self.tracker
        tracker.log_results(run.run_id, {**result.metrics, "stage_seconds": run.seconds}, result.history)
        tracker.set_tags(run.run_id, {"sgt.artifact_dir": run.location, "sgt.source_run_id": run.source_run_id})
        # Ended now, with the stage: a pipeline killed during the next stage leaves this one FINISHED, not
        # KILLED. Before anything is queued for it, so that a queued job that fails leaves it FAILED.
        tracker.end(run.run_id)
        if not run.cache_hit:  # a cache hit carries `sgt.artifact_dir` and `sgt.source_run_id`, not a second copy
            for path in result.files:
                folder = path.relative_to(result.out_dir).as_posix() if path.is_dir() else None
                tracker.later(run.run_id, tracker.log_artifact, run.run_id, path, folder)
            tracker.later(run.run_id, self._log_memory, run.run_id, run.memory)

    def on_stage_error(self, run: StageRun, error: BaseException) -> None:
        if run.run_id:
            self.tracker.fail(run.run_id, killed=is_interrupt(error))

    def _log_memory(self, run_id: str, memory: MemorySampler) -> None:
        self.tracker.log_metric_series(run_id, "rss_mb", memory.samples, memory.started_at)
        self.tracker.log_results(run_id, {"rss_peak_mb": memory.peak_mb})
