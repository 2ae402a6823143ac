"""tests/ui's stack: `sgt ui` and `sgt serve` as real processes on free ports, and one served tiny run."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest

from flows.serve import DEPLOYMENT_NAME, sgt_run
from flows.ui import STARTUP_TIMEOUT_S, prefect_api_url, wait_until_up
from tests.conftest import REPO_ROOT, TINY_OVERRIDES, free_port

DEPLOYMENT = f"{sgt_run.name}/{DEPLOYMENT_NAME}"
RUN_TIMEOUT_S = 600


@dataclass
class UIStack:
    prefect_url: str
    mlflow_url: str
    tracking_uri: str
    logs: Path

    @property
    def api_url(self) -> str:
        return f"{self.prefect_url}/api"

    def log_tail(self, lines: int = 40) -> str:
        """The end of both processes' output, for assertion messages."""
        return "\n".join(
            f"--- {log.name}\n" + "\n".join(log.read_text(errors="replace").splitlines()[-lines:])
            for log in sorted(self.logs.glob("*.log"))
        )

    def trigger(self, **parameters):
        """Runs the deployment through Prefect's API and waits for its final state."""
        from prefect.deployments import run_deployment
        from prefect.settings import PREFECT_API_URL, temporary_settings

        with temporary_settings({PREFECT_API_URL: self.api_url}):
            return run_deployment(DEPLOYMENT, parameters=parameters, timeout=RUN_TIMEOUT_S, poll_interval=1)


def start_sgt(command: list[str], env: dict[str, str], log: Path) -> subprocess.Popen:
    # Own session, so that teardown can stop the process and the servers it started as one group.
    with log.open("w") as output:
        return subprocess.Popen([sys.executable, "-m", "flows.cli", *command], cwd=REPO_ROOT, env=env,
                                stdout=output, stderr=subprocess.STDOUT, start_new_session=True)


def stop_group(process: subprocess.Popen, timeout_s: float) -> None:
    if process.poll() is None:
        process.terminate()
        try:
            process.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            pass
    try:
        os.killpg(process.pid, signal.SIGKILL)  # whatever of the group outlived a clean shutdown
    except ProcessLookupError:
        pass
    process.wait()


def wait_for_deployment(process: subprocess.Popen, api_url: str, timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        assert process.poll() is None, f"sgt serve exited with status {process.returncode}"
        if httpx.get(f"{api_url}/deployments/name/{DEPLOYMENT}", timeout=5).status_code == 200:
            return
        time.sleep(0.5)
    raise TimeoutError(f"deployment {DEPLOYMENT} not registered after {timeout_s} s")


@pytest.fixture(scope="package")
def ui_stack(tmp_path_factory):
    """`sgt ui` (Prefect server with its own PREFECT_HOME, MLflow UI) and `sgt serve` pointed at it."""
    root = tmp_path_factory.mktemp("ui_stack")
    prefect_port, mlflow_port = free_port(), free_port()
    env = {key: value for key, value in os.environ.items()
           if key not in ("PREFECT_API_URL", "MLFLOW_TRACKING_URI")}
    env.update(PREFECT_HOME=str(root / "prefect"), SGT_ARTIFACTS=str(root / "artifacts"),
               PREFECT_RUNNER_POLL_FREQUENCY="1")  # pick up a triggered run within a second, not ten
    stack = UIStack(f"http://127.0.0.1:{prefect_port}", f"http://127.0.0.1:{mlflow_port}",
                    f"sqlite:///{root / 'artifacts' / 'mlflow.db'}", root)
    ui = start_sgt(["ui", "--prefect-port", str(prefect_port), "--mlflow-port", str(mlflow_port)],
                   env, root / "ui.log")
    serve = None
    try:
        wait_until_up("prefect", ui, f"{prefect_api_url(prefect_port)}/health", STARTUP_TIMEOUT_S)
        wait_until_up("mlflow", ui, f"{stack.mlflow_url}/health", STARTUP_TIMEOUT_S)
        serve = start_sgt(["serve", "--api-url", stack.api_url], env, root / "serve.log")
        wait_for_deployment(serve, stack.api_url, STARTUP_TIMEOUT_S)
        yield stack
    except Exception as error:
        raise AssertionError(f"{error}\n{stack.log_tail()}") from error
    finally:
        if serve is not None:
            stop_group(serve, timeout_s=30)
        stop_group(ui, timeout_s=60)


@pytest.fixture(scope="package")
def served_run(ui_stack):
    """One tiny pipeline run triggered through the deployment, as the Prefect UI's Run button would."""
    flow_run = ui_stack.trigger(overrides=TINY_OVERRIDES)
    assert flow_run.state.is_completed(), f"{flow_run.state}\n{ui_stack.log_tail()}"
    return flow_run
