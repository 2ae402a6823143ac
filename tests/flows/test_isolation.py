"""Each stage in a process of its own: same results as in the flow's process, logs and errors carried back."""

from __future__ import annotations

import logging
import os
import signal
import subprocess
import sys

import pytest
import torch

from flows.isolation import StageProcessDied, run_stage_in_process
from sgt_core.artifacts import ArtifactError
from sgt_core.config import compose_config
from sgt_core.estimate.stage import SCORES_FILE
from sgt_core.preprocess.interaction_graph import INTERACTION_GRAPH_FILE
from tests.conftest import REPO_ROOT, TINY_OVERRIDES
from tests.stage_runner import run_stages


@pytest.fixture(scope="module")
def inline(tmp_path_factory):
    """The tiny config's preprocess and estimate run in this process, as the reference."""
    return run_stages(tmp_path_factory.mktemp("inline"), until="estimate")


def test_a_stage_in_its_own_process_gives_the_same_results_and_reports_its_memory(inline, tmp_path, caplog):
    cfg, outputs = inline
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
            "[__import__(s.run.__module__) for s in STAGES]; "
            "print(sorted({m.split('.')[0] for m in sys.modules} & {'prefect', 'mlflow', 'matplotlib'}))")
    completed = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO_ROOT,
                               check=True)
    assert completed.stdout.strip() == "[]"
