"""The tracking layer on its own: what a stage declares, the logging thread and its errors, lazy plotting."""

from __future__ import annotations

import json
import subprocess
import sys
import threading

import pytest

from flows.memory import MemorySampler
from flows.tracking import EXPERIMENT_KIND_TAG, MODEL_TRAINING, Tracker
from sgt_core.estimate.outputs import ESTIMATOR_FILE
from sgt_core.export.outputs import SCORES_DIR
from sgt_core.pipeline import STAGE_BY_NAME, StageResult
from sgt_core.train.outputs import HISTORY_FILE, MODEL_FILE
from tests.conftest import REPO_ROOT


def test_a_stage_result_resolves_the_files_its_stage_declares(tmp_path):
    history = [{"epoch": 0, "loss": 0.9}, {"epoch": 1, "loss": 0.7}]
    (tmp_path / HISTORY_FILE).write_text(json.dumps(history))
    result = STAGE_BY_NAME["train"].result(tmp_path, {"test_roc_auc": 0.5})
    assert result == StageResult({"test_roc_auc": 0.5}, history, (tmp_path / MODEL_FILE,), tmp_path)

    assert STAGE_BY_NAME["estimate"].logged == (ESTIMATOR_FILE,)
    assert STAGE_BY_NAME["export"].result(tmp_path, {}).files == (tmp_path / SCORES_DIR,)
    preprocess = STAGE_BY_NAME["preprocess"].result(tmp_path, {})
    assert preprocess.history is None and preprocess.files == ()  # it declares no history file


@pytest.fixture
def tracker_and_run(tmp_path) -> tuple[Tracker, str]:
    tracker = Tracker({"paths": {"artifacts": str(tmp_path)}, "mlflow": {"tracking_uri": None, "experiment": "t"}})
    return tracker, tracker.start_stage("", "train", "k", False, {})


def test_the_experiments_runs_go_to_are_marked_model_training(tmp_path):
    """A new experiment carries MLflow's model-training kind; one without a kind (made by hand, or before SGT set
    it) gets it when a run reuses it; a kind chosen since in the UI stays."""

    def tracker(experiment: str) -> Tracker:
        return Tracker({"paths": {"artifacts": str(tmp_path)}, "mlflow": {"tracking_uri": None, "experiment": experiment}})

    def kind(experiment_id: str) -> str | None:
        return client.get_experiment(experiment_id).tags.get(EXPERIMENT_KIND_TAG)

    new = tracker("new")
    client = new.client  # the sqlite store under tmp_path
    assert kind(new.experiment_id) == MODEL_TRAINING
    older = client.create_experiment("older")
    assert kind(older) is None
    assert tracker("older").experiment_id == older and kind(older) == MODEL_TRAINING
    chosen = client.create_experiment("chosen", tags={EXPERIMENT_KIND_TAG: "genai_development"})
    assert tracker("chosen").experiment_id == chosen and kind(chosen) == "genai_development"


def test_queued_logging_runs_off_the_callers_thread_and_its_errors_surface_at_the_flush(tracker_and_run):
    tracker, run_id = tracker_and_run
    release, threads = threading.Event(), []

    def upload() -> None:
        threads.append(threading.current_thread())
        assert release.wait(30)

    def full_disk() -> None:
        raise OSError("No space left on device")

    tracker.later(run_id, upload)
    tracker.later(run_id, full_disk)
    tracker.later(run_id, tracker.log_results, run_id, {"after": 1.0})  # later jobs still run
    tracker.end(run_id)
    release.set()  # reached while `upload` waits: queuing never waits for a job
    with pytest.raises(OSError, match="No space left on device") as error:
        tracker.flush()
    assert threads and threads[0] is not threading.current_thread()
    assert error.value.__notes__ == [f"(while logging to the MLflow run {run_id} in the background)"]
    run = tracker.client.get_run(run_id)
    assert run.info.status == "FAILED"  # ended FINISHED first: the failed job's run does not stay so
    assert run.data.metrics["after"] == 1.0
    tracker.flush()  # an error is raised once


def test_failing_a_run_waits_for_its_queued_logging_and_raises_nothing(tracker_and_run):
    tracker, run_id = tracker_and_run
    logged = threading.Event()

    def full_disk() -> None:
        logged.set()
        raise OSError("No space left on device")

    tracker.later(run_id, full_disk)
    tracker.fail(run_id)  # the error that ended the run, not the upload's, is the one its caller raises
    assert logged.is_set() and tracker.client.get_run(run_id).info.status == "FAILED"


def test_a_stage_process_that_ended_before_it_was_followed_leaves_its_high_water_mark():
    ended = subprocess.Popen(["true"])
    ended.wait()
    with MemorySampler(interval=0.01) as memory:
        memory.follow(ended.pid)  # a tiny stage on a busy machine: gone before the flow process gets here
        memory.record(123.0)
    assert [rss for _, rss in memory.samples] == [123.0] and memory.peak_mb == 123.0


def test_importing_the_flow_loads_no_plotting_library():
    code = "import sys, flows.pipeline, flows.pools; print(sorted({'matplotlib', 'duckdb'} & set(sys.modules)))"
    completed = subprocess.run([sys.executable, "-c", code], cwd=REPO_ROOT, capture_output=True, text=True,
                               check=True)
    assert completed.stdout.split() == ["[]"]
