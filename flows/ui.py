"""`sgt ui` (`make ui`): the Prefect server and the MLflow UI on 127.0.0.1, both stopped on Ctrl-C."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx

from flows.process_groups import first_to_exit, stop
from sgt_core.errors import SGTError

DEFAULT_PREFECT_PORT = 4200
DEFAULT_MLFLOW_PORT = 5000
STARTUP_TIMEOUT_S = 180  # a cold Prefect server migrates its database first; slow on a busy 2-core machine


def prefect_api_url(port: int) -> str:
    return f"http://127.0.0.1:{port}/api"


def require_prefect_api(api_url: str) -> None:
    """Fails with one clear line when no Prefect server answers at `api_url` (`sgt serve` needs one)."""
    try:
        answered = httpx.get(f"{api_url.rstrip('/')}/health", timeout=5).status_code == 200
    except httpx.HTTPError:
        answered = False
    if not answered:
        raise SGTError(f"{api_url}: no Prefect server answers; start one with `make ui` (or `sgt ui`)")


def ui_commands(prefect_port: int, mlflow_port: int, tracking_uri: str) -> dict[str, list[str]]:
    """The two servers' command lines, run with the executables of this environment."""
    bin_dir = Path(sys.executable).parent
    return {
        "prefect": [str(bin_dir / "prefect"), "server", "start", "--host", "127.0.0.1", "--port", str(prefect_port)],
        # One worker: a local dashboard needs no more, and mlflow's default of 4 crowds a small machine;
        # warnings only, else every request of the browser is logged. The app `sgt` is MLflow's own, opening
        # experiments on their runs table (flows/mlflow_app.py).
        "mlflow": [str(bin_dir / "mlflow"), "ui", "--backend-store-uri", tracking_uri,
                   "--host", "127.0.0.1", "--port", str(mlflow_port), "--workers", "1",
                   "--app-name", "sgt", "--uvicorn-opts", "--log-level warning"],
    }


def wait_until_up(name: str, process: subprocess.Popen, health_url: str, timeout_s: float) -> None:
    """Polls `health_url` until it answers 200; fails early if the server process exits."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise SGTError(f"{name}: exited with status {process.returncode} before answering at {health_url}")
        try:
            if httpx.get(health_url, timeout=2).status_code == 200:
                return
        except httpx.HTTPError:
            pass  # not listening yet
        time.sleep(0.5)
    raise SGTError(f"{name}: no answer at {health_url} after {timeout_s:.0f} s")


def serve_ui(prefect_port: int, mlflow_port: int, tracking_uri: str) -> None:
    """Starts both servers, prints their addresses, and keeps them up until Ctrl-C or SIGTERM."""
    if tracking_uri.startswith("sqlite:///"):
        Path(tracking_uri.removeprefix("sqlite:///")).parent.mkdir(parents=True, exist_ok=True)
    # SIGTERM (a test, a process manager) and SIGHUP (a closed terminal) unwind like Ctrl-C, so the
    # servers, which run in their own sessions, are stopped too.
    for signum in (signal.SIGTERM, signal.SIGHUP):
        signal.signal(signum, lambda *_: sys.exit(0))
    health_urls = {"prefect": f"{prefect_api_url(prefect_port)}/health",
                   "mlflow": f"http://127.0.0.1:{mlflow_port}/health"}
    processes: dict[str, subprocess.Popen] = {}
    try:
        # The Prefect UI's pages call the API at PREFECT_SERVER_UI_API_URL, which otherwise follows
        # $PREFECT_API_URL or the default port 4200 rather than --port.
        env = {**os.environ, "PREFECT_SERVER_UI_API_URL": prefect_api_url(prefect_port)}
        for name, command in ui_commands(prefect_port, mlflow_port, tracking_uri).items():
            # Own process groups: Ctrl-C reaches only this process, which then stops each server whole.
            processes[name] = subprocess.Popen(command, env=env, start_new_session=True)
        for name, process in processes.items():
            wait_until_up(name, process, health_urls[name], STARTUP_TIMEOUT_S)
        print(
            f"\nPrefect UI  http://127.0.0.1:{prefect_port}   (API {prefect_api_url(prefect_port)})\n"
            f"MLflow UI   http://127.0.0.1:{mlflow_port}   (store {tracking_uri})\n"
            f"Serve the pipeline there with: sgt serve --api-url {prefect_api_url(prefect_port)}\n"
            "Ctrl-C stops both.",
            flush=True,
        )
        stopped = first_to_exit(processes)
        raise SGTError(f"{stopped}: exited with status {processes[stopped].returncode}")
    except KeyboardInterrupt:
        print("\nstopping the Prefect server and the MLflow UI", flush=True)
    finally:
        stop(processes)
