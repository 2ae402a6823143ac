"""Each stage in a process of its own: same results as in the flow's process, logs and errors carried back."""

from __future__ import annotations

import ctypes.util
import logging
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from flows.isolation import StageProcessDied, call_in_stage_process, run_stage_in_process
from sgt_core.artifacts import ArtifactError
from sgt_core.config import compose_config
from sgt_core.errors import DatasetError
from sgt_core.estimate.outputs import SCORES_FILE
from sgt_core.pipeline import STAGE_BY_NAME, stage_environment
from sgt_core.preprocess.outputs import INTERACTION_GRAPH_FILE
from tests.conftest import REPO_ROOT, TINY_OVERRIDES
from tests.flows.cli_process import session_env
from tests.stage_runner import run_stages


@pytest.fixture(scope="module")
def inline(tmp_path_factory):
    """The tiny config's preprocess and estimate run in this process, as the reference."""
    return run_stages(tmp_path_factory.mktemp("inline"), until="estimate")


def test_a_stage_in_its_own_process_gives_the_same_results_and_reports_its_memory(inline, tmp_path, caplog):
    cfg, outputs, _ = inline
    pids = []
    out = tmp_path / "estimate"
    out.mkdir()
    with caplog.at_level(logging.INFO, logger="sgt_core"):
        metrics, peak_mb = run_stage_in_process("estimate", cfg, {"preprocess": outputs["preprocess"]}, out,
                                                on_start=pids.append)
    assert pids and pids[0] != os.getpid()
    assert torch.equal(torch.load(out / SCORES_FILE, weights_only=True),
                       torch.load(outputs["estimate"] / SCORES_FILE, weights_only=True))  # same seed, same scores
    assert metrics["best_epoch"] >= 0 and peak_mb > 50
    # its log records come back under their own logger names (Prefect captures them in the task's logs)
    assert any(r.name == "sgt_core.estimate.stage" and "estimate epoch" in r.getMessage() for r in caplog.records)


def test_a_stage_error_comes_back_as_the_same_exception(tmp_path):
    preprocess = tmp_path / "preprocess"
    preprocess.mkdir()
    (preprocess / INTERACTION_GRAPH_FILE).write_bytes(b"damaged")
    out = tmp_path / "estimate"
    out.mkdir()
    with pytest.raises(ArtifactError, match="stage=preprocess"):
        run_stage_in_process("estimate", compose_config(TINY_OVERRIDES), {"preprocess": preprocess}, out)


def test_a_stage_process_killed_outright_is_reported(tmp_path):
    with pytest.raises(StageProcessDied, match="SIGKILL"):
        run_stage_in_process("preprocess", compose_config(TINY_OVERRIDES), {}, tmp_path,
                             on_start=lambda pid: os.kill(pid, signal.SIGKILL))


def test_the_stage_processes_carry_no_orchestration_libraries():
    # what the stage processes are forked from: the isolation module and the stages it preloads
    code = ("import sys, flows.isolation as i; from sgt_core.pipeline import STAGES; "
            "[__import__(s.module) for s in STAGES]; "
            "print(sorted({m.split('.')[0] for m in sys.modules} & {'prefect', 'mlflow', 'matplotlib'}))")
    completed = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO_ROOT,
                               check=True)
    assert completed.stdout.strip() == "[]"


def test_a_call_in_a_stage_process_answers_there_and_raises_its_error(tmp_path):
    assert call_in_stage_process("os:getpid") != os.getpid()
    os.environ["SGT_TEST_MARK"] = "now"  # the flow's environment as it is at the call, not at the server's start
    try:
        assert call_in_stage_process("os:getenv", "SGT_TEST_MARK") == "now"
    finally:
        del os.environ["SGT_TEST_MARK"]
    cfg = compose_config(["dataset=npz", f"dataset.path={tmp_path / 'missing.npz'}", f"paths.artifacts={tmp_path}"])
    with pytest.raises(DatasetError, match="missing.npz"):
        call_in_stage_process("flows.preflight:load_dataset_unless_cached", cfg)


# The flow's own process, running a whole computing pipeline: which of the heavy libraries it imported.
FLOW_PROCESS = """
import sys
from flows.cli import main
status = main(sys.argv[1:])
print("imported:", sorted({m.split(".")[0] for m in sys.modules} & {"torch", "torch_geometric", "matplotlib", "duckdb"}))
sys.exit(status)
"""


def test_the_flows_process_conducts_without_torch_or_plotting(prefect_server, tmp_path):
    """The stages, the dataset's check, the kernel backend in the keys and the figures all run in processes of
    their own: the flow's process holds Prefect and MLflow only, so the run's largest process is a stage."""
    artifacts = tmp_path / "artifacts"
    done = subprocess.run([sys.executable, "-c", FLOW_PROCESS, "run", *TINY_OVERRIDES], cwd=REPO_ROOT,
                          capture_output=True, text=True, env=session_env(artifacts), timeout=600, check=False)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert "imported: []" in done.stdout
    assert "test_roc_auc" in done.stdout  # it computed every stage
    assert len(list(artifacts.glob("mlruns/*/artifacts/plots/*.png"))) >= 8  # and drew their figures


# A training loop's pattern, in a fresh process: a freed 1.5 MB block (which raises glibc's default mmap
# threshold), then many such blocks, each followed by a small long-lived one that pins the heap above it,
# then the big ones freed. Prints how much resident memory freeing them gave back.
FREED_BLOCKS = """
import torch

def rss_mb():
    for line in open("/proc/self/status"):
        if line.startswith("VmRSS"):
            return int(line.split()[1]) / 1024

warm = torch.ones(393_216)  # 1.5 MB
del warm
blocks, pins = [], []
for _ in range(60):
    blocks.append(torch.ones(393_216))
    pins.append(torch.ones(64))
before = rss_mb()
blocks.clear()
print(before - rss_mb())
"""
GLIBC = sys.platform.startswith("linux") and "libc.so" in (ctypes.util.find_library("c") or "")


def _threshold(kilobytes: int | None) -> dict:
    return compose_config([*TINY_OVERRIDES, f"orchestration.train_malloc_mmap_threshold_kb={kilobytes or 'null'}"])


def test_the_malloc_threshold_is_an_environment_variable_of_the_train_stage_only():
    train, others = STAGE_BY_NAME["train"], [STAGE_BY_NAME[name] for name in ("preprocess", "estimate", "export")]
    assert stage_environment(train, _threshold(1024)) == {"MALLOC_MMAP_THRESHOLD_": str(1024 * 1024)}
    assert stage_environment(train, _threshold(None)) == {}
    assert all(stage_environment(stage, _threshold(1024)) == {} for stage in others)


@pytest.mark.skipif(not GLIBC, reason="MALLOC_MMAP_THRESHOLD_ is glibc's")
def test_the_malloc_threshold_returns_freed_blocks_to_the_system():
    def released_mb(kilobytes: int | None) -> float:
        environment = {name: value for name, value in os.environ.items() if name != "MALLOC_MMAP_THRESHOLD_"}
        environment |= stage_environment(STAGE_BY_NAME["train"], _threshold(kilobytes))
        return float(subprocess.run([sys.executable, "-c", FREED_BLOCKS], env=environment, capture_output=True,
                                    text=True, check=True).stdout)

    assert released_mb(1024) > 70  # 60 x 1.5 MB = 90 MB handed back
    assert released_mb(None) < 20  # glibc's default: the same blocks stay in the heap


def test_the_train_stage_with_a_malloc_threshold_forks_from_the_server(tmp_path):
    """mallopt can set what MALLOC_MMAP_THRESHOLD_ sets, so the stage need not spawn (seconds of imports)."""
    command_lines: list[bytes] = []

    def read_command_line(pid: int) -> None:
        command_lines.append(Path(f"/proc/{pid}/cmdline").read_bytes())

    with pytest.raises(ArtifactError):  # no upstream artifacts: the stage fails once it has started
        run_stage_in_process("train", _threshold(1024), {"preprocess": tmp_path, "export": tmp_path}, tmp_path,
                             on_start=read_command_line)
    assert b"forkserver" in command_lines[0]  # a spawned one would be this process's command, then exec'd
    assert "MALLOC_MMAP_THRESHOLD_" not in os.environ  # the flow's own process is left as it was


@pytest.mark.skipif(not GLIBC, reason="MALLOC_MMAP_THRESHOLD_ is glibc's")
def test_a_forked_process_applying_the_threshold_returns_freed_blocks_like_a_fresh_one():
    """The forked stage process inherits a heap that has run a while (glibc's dynamic threshold raised by
    the freed 1.5 MB block); applying the variable there still hands the freed blocks back."""
    variables = stage_environment(STAGE_BY_NAME["train"], _threshold(1024))
    child = FREED_BLOCKS.replace("del warm\n", "del warm\nfrom flows.isolation import apply_malloc_variables\n"
                                 f"apply_malloc_variables({variables!r})\n")
    environment = {name: value for name, value in os.environ.items() if name != "MALLOC_MMAP_THRESHOLD_"}
    environment["PYTHONPATH"] = os.pathsep.join([str(REPO_ROOT), environment.get("PYTHONPATH", "")])
    released = float(subprocess.run([sys.executable, "-c", child], env=environment, capture_output=True, text=True,
                                    check=True).stdout)
    assert released > 70
