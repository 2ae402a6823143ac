"""Bad numbers, degenerate labels and a failing machine end in one `error:` line, exit 2, nothing written."""

from __future__ import annotations

import json
import logging
import os
import re
import subprocess
import uuid
from pathlib import Path

import numpy as np
import pytest
from mlflow.tracking import MlflowClient

from flows.cli import main
from sgt_core.artifacts import MANIFEST_FILE
from sgt_core.data.minesweeper import generate_minesweeper
from tests.conftest import TINY_MODEL, TINY_OVERRIDES
from tests.flows.cli_process import CliProcess, rank_process, session_env


@pytest.fixture(autouse=True)
def quiet_logging_errors(monkeypatch):
    """Prefect's console handler keeps the stderr of the test that first set it up, closed by now; its
    "--- Logging error ---" reports (with a traceback of their own) are pytest's, not the CLI's output."""
    monkeypatch.setattr(logging, "raiseExceptions", False)


def write_npz(path: Path, features_scale: float = 1.0, relabel=None) -> Path:
    """The tiny Minesweeper grid as a heterophilous .npz, its features scaled and its labels rewritten."""
    graph = generate_minesweeper(height=12, width=12, mine_fraction=0.2, hidden_fraction=0.5,
                                 split={"train": 0.5, "val": 0.25, "test": 0.25}, seed=0)
    labels = graph.y.numpy().copy()
    masks = {name: graph[f"{name}_mask"].numpy() for name in ("train", "val", "test")}
    if relabel is not None:
        relabel(labels, masks)
    np.savez(path, node_features=graph.x.numpy().astype(np.float64) * features_scale, node_labels=labels,
             edges=graph.edge_index.numpy().T, train_masks=masks["train"], val_masks=masks["val"],
             test_masks=masks["test"])
    return path


def run_cli(capfd, *arguments: str) -> tuple[int, str, str]:
    status = main(list(arguments))
    captured = capfd.readouterr()
    return status, captured.out, captured.err


def error_lines(err: str) -> list[str]:
    return [line for line in err.splitlines() if line.startswith("error:")]


def complete_folders(root: Path, stage: str) -> list[Path]:
    return [path for path in (root / stage).glob("*") if (path / MANIFEST_FILE).is_file()]


def leftovers(root: Path) -> list[Path]:
    """Staging or retired folders: what a half-finished write would leave behind."""
    return [path for path in root.glob("*/.*") if path.name.startswith((".tmp-", ".old-"))]


# --- numbers ----------------------------------------------------------------------------------------------


def test_a_non_finite_loss_stops_the_stage_with_one_error_and_writes_nothing(
        prefect_server, artifacts_dir, tmp_path, capfd, caplog):
    dataset = write_npz(tmp_path / "huge.npz", features_scale=1e30)
    with caplog.at_level(logging.WARNING, logger="sgt_core"):
        status, _, err = run_cli(capfd, "run", "dataset=npz", f"dataset.path={dataset}", *TINY_MODEL)
    assert status == 2
    (line,) = error_lines(err)
    assert line.startswith("error: estimate: the training loss is nan at epoch 0")
    assert "dataset.standardize=true" in line
    assert "Traceback" not in err
    assert any("dataset.standardize=true" in r.getMessage() for r in caplog.records)  # warned at loading
    assert complete_folders(artifacts_dir, "estimate") == [] and leftovers(artifacts_dir) == []

    # the suggested switch trains normally
    status, out, err = run_cli(capfd, "run", "dataset=npz", f"dataset.path={dataset}", "dataset.standardize=true",
                               *TINY_MODEL)
    assert status == 0, err
    assert "test_roc_auc = " in out


def test_report_text_and_json_agree_on_each_stage_of_a_failed_run(prefect_server, artifacts_dir, tmp_path, capfd):
    dataset = write_npz(tmp_path / "huge.npz", features_scale=1e30)  # estimate fails at epoch 0
    assert run_cli(capfd, "run", "dataset=npz", f"dataset.path={dataset}", *TINY_MODEL)[0] == 2

    status, text, _ = run_cli(capfd, "report")
    assert status == 0
    status, as_json, _ = run_cli(capfd, "report", "--json")
    assert status == 0
    report = json.loads(as_json)
    expected = {"preprocess": "ran", "estimate": "failed", "export": "missing", "train": "missing"}
    assert {stage["stage"]: stage["state"] for stage in report["stages"]} == expected
    timings = text.split("timings")[1].split("artifacts:")[0]
    for stage, state in expected.items():  # the text says what the JSON says, stage by stage
        assert re.search(rf"^\s+{stage}\s+{state}\b", timings, re.MULTILINE), text
    assert report["status"] == "FAILED" and "(failed, started" in text


# --- a failed DDP rank ---------------------------------------------------------------------------------------

DDP = [*(o for o in TINY_OVERRIDES if not o.startswith("train.epochs=")), "train.epochs=400", "train.batch_size=16",
       "train.distributed.nproc_per_node=2"]


def test_a_killed_ddp_rank_is_one_error_line_and_its_details_go_to_the_stage_log(prefect_server, tmp_path):
    artifacts = tmp_path / "artifacts"
    cli = CliProcess(["run", *DDP], session_env(artifacts), tmp_path / "run.log")
    try:
        cli.wait_for_line("train epoch 1/400")  # rank 0 is training
        cli.wait_for(lambda: rank_process(cli, 1) is not None, "rank 1")
        rank_process(cli, 1).kill()
        status = cli.finish()
    finally:
        if cli.process.poll() is None:
            cli.kill_all()
    output = cli.output()
    assert status == 2, output[-3000:]
    (line,) = error_lines(output)
    assert line.startswith("error: train: rank 1 of 2 was killed by SIGKILL"), line
    assert "Traceback" not in output, output[-3000:]
    log_file = Path(line.split("the stage's log: ")[1])
    details = log_file.read_text()
    assert "train failed: DistributedTrainingError: train: rank 1 of 2 was killed by SIGKILL" in details
    assert "rank      : 1 (local_rank: 1)" in details and "exitcode  : -9" in details  # torchrun's report
    assert not list((artifacts / "train").glob(".*")) and not complete_folders(artifacts, "train")

    client = MlflowClient(f"sqlite:///{artifacts / 'mlflow.db'}")
    (train,) = client.search_runs([e.experiment_id for e in client.search_experiments()], "tags.`sgt.stage` = 'train'")
    assert train.info.status == "FAILED" and train.data.tags["sgt.log_file"] == str(log_file)
    assert [a.path for a in client.list_artifacts(train.info.run_id, "logs")] == [f"logs/{log_file.name}"]


# --- degenerate labels ------------------------------------------------------------------------------------


def test_a_single_class_training_set_is_refused_before_any_stage(prefect_server, artifacts_dir, tmp_path, capfd):
    def all_ones(labels, masks):
        labels[:] = 1

    dataset = write_npz(tmp_path / "ones.npz", relabel=all_ones)
    status, _, err = run_cli(capfd, "run", "dataset=npz", f"dataset.path={dataset}", *TINY_MODEL)
    assert status == 2
    (line,) = error_lines(err)
    assert "only one class" in line and "Traceback" not in err
    assert not (artifacts_dir / "preprocess").exists()  # refused before preprocessing: nothing cached


def test_one_class_evaluation_splits_report_an_undefined_metric_and_select_by_validation_loss(
        prefect_server, artifacts_dir, tmp_path, capfd, caplog):
    def one_class_evaluation(labels, masks):
        labels[masks["val"]] = 0
        labels[masks["test"]] = 1

    dataset = write_npz(tmp_path / "one_class.npz", relabel=one_class_evaluation)
    with caplog.at_level(logging.WARNING, logger="sgt_core"):
        status, out, err = run_cli(capfd, "run", "dataset=npz", f"dataset.path={dataset}", *TINY_MODEL)
    assert status == 0, err
    assert "val_roc_auc = undefined" in out and "test_roc_auc = undefined" in out
    assert "val_accuracy = " in out and "test_accuracy = " in out
    warnings = [r.getMessage() for r in caplog.records if "undefined" in r.getMessage()]
    assert any("train: the test split has only class 1" in w for w in warnings)
    assert any("train: the val split has only class 0" in w and "validation loss" in w for w in warnings)
    for stage in ("estimate", "train"):
        (folder,) = complete_folders(artifacts_dir, stage)
        metrics = json.loads((folder / "metrics.json").read_text())
        assert metrics["selected_by"] == "val_loss" and metrics["test_roc_auc"] == "undefined"
        assert metrics["best_epoch"] >= 0
    history = json.loads((complete_folders(artifacts_dir, "train")[0] / "history.json").read_text())
    assert all("val_loss" in row and "val_roc_auc" not in row for row in history)


# --- the machine: permissions, a full disk, a store that cannot be opened -----------------------------------


@pytest.fixture
def mount_tmpfs(tmp_path):
    """Mounts a tmpfs of the given size and options (root only; skips where mounting is not allowed)."""
    mounted = []

    def mount(size: str, options: str = "") -> Path:
        point = tmp_path / f"mnt-{uuid.uuid4().hex[:6]}"
        point.mkdir()
        result = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}{',' + options if options else ''}",
                                 "tmpfs", str(point)], capture_output=True, text=True, check=False)
        if result.returncode:
            pytest.skip(f"cannot mount a tmpfs here ({result.stderr.strip() or 'not root'})")
        mounted.append(point)
        return point

    yield mount
    for point in mounted:
        subprocess.run(["umount", "-l", str(point)], check=False)


def test_an_unwritable_artifacts_folder_is_one_error_line(prefect_server, tmp_path, capfd, mount_tmpfs):
    if os.geteuid() == 0:  # root ignores permission bits: a read-only file system refuses root too
        root = mount_tmpfs("1m", "ro")
        expected = "Read-only file system"
    else:
        root = tmp_path / "locked"
        root.mkdir(mode=0o555)
        expected = "Permission denied"
    status, _, err = run_cli(capfd, "run", *TINY_OVERRIDES, f"paths.artifacts={root / 'artifacts'}",
                             "mlflow.tracking_uri=null")
    assert status == 2
    (line,) = error_lines(err)
    assert line.startswith(f"error: {root}") and expected in line, err
    assert "Traceback" not in err


@pytest.mark.parametrize("when", ["creating the MLflow store", "writing a stage"])
def test_a_full_disk_is_one_error_line_and_leaves_nothing_half_written(
        prefect_server, monkeypatch, capfd, mount_tmpfs, when):
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    disk = mount_tmpfs("600k" if when == "creating the MLflow store" else "4m")
    root = disk / "artifacts"
    run = ["run", *TINY_OVERRIDES, f"paths.artifacts={root}", "mlflow.tracking_uri=null"]
    if when == "writing a stage":
        assert main(run) == 0
        capfd.readouterr()
        free = os.statvfs(disk).f_bavail * os.statvfs(disk).f_frsize
        (disk / "filler").write_bytes(b"\0" * max(0, free - 16 * 1024))  # leaves 16 KiB
        before = {stage: complete_folders(root, stage) for stage in ("preprocess", "estimate", "export", "train")}
        run.append("stage=preprocess")  # every stage again, forced, into the full disk
    status, _, err = run_cli(capfd, *run)
    assert status == 2
    (line,) = error_lines(err)
    assert line.startswith(f"error: {root}") and ("disk is full" in line or "No space left" in line), err
    assert "Traceback" not in err
    assert leftovers(root) == [] if root.exists() else True
    if when == "writing a stage":  # the forced stages' earlier results are untouched
        for stage, folders in before.items():
            assert complete_folders(root, stage) == folders


def test_an_artifacts_folder_that_cannot_exist_is_one_error_line(prefect_server, tmp_path, capfd):
    blocker = tmp_path / "a-file"
    blocker.write_text("not a folder")
    status, _, err = run_cli(capfd, "run", *TINY_OVERRIDES, f"paths.artifacts={blocker / 'artifacts'}",
                             "mlflow.tracking_uri=null")
    assert status == 2
    (line,) = error_lines(err)
    assert line.startswith(f"error: {blocker}") and "Not a directory" in line and "Traceback" not in err
