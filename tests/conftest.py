"""Shared fixtures: one Prefect test server per session, tiny configs, and the real datasets' folder."""

from __future__ import annotations

import os
import signal
import socket
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parents[1]
SHARED_DATASETS = REPO_ROOT.parent / "shared" / "datasets"

# Small enough that the whole pipeline runs in seconds, big enough that every part is exercised.
TINY_GRID = ["dataset.height=12", "dataset.width=12"]
TINY_MODEL = [
    "preprocess.expander.degree=4",
    "estimator.epochs=6",
    "estimator.warmup_epochs=1",
    "model.hidden=16",
    "model.heads=2",
    "model.num_layers=2",
    "model.degrees=[6,4]",
    "train.epochs=4",
    "train.warmup_epochs=1",
]
TINY_OVERRIDES = [*TINY_GRID, *TINY_MODEL]


# A test run started in the background (`make test &`, nohup, a CI step without a terminal) inherits SIGINT
# ignored, as POSIX shells start background jobs, and every process the tests start would inherit that too:
# the Ctrl-C tests would then signal an `sgt` that cannot hear SIGINT. With a handler here instead, the
# processes the tests start get SIGINT at its default, as under a terminal (exec resets handled signals).
if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on now (for servers and rendezvous the tests start)."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


@pytest.fixture(scope="session")
def shared_datasets() -> Path:
    if not SHARED_DATASETS.is_dir():
        pytest.skip(f"real datasets not found at {SHARED_DATASETS} (../shared/datasets beside the repo)")
    return SHARED_DATASETS


@pytest.fixture(scope="session")
def prefect_server():
    """One ephemeral Prefect API server and database for the whole session (a cold start costs ~15 s)."""
    os.environ.setdefault("PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS", "180")
    from prefect.testing.utilities import prefect_test_harness

    with prefect_test_harness(server_startup_timeout=180):
        yield


@pytest.fixture(scope="module")
def pipeline_env(prefect_server) -> dict[str, str]:
    """Environment for `sgt run` subprocesses: the session's Prefect server instead of one of their own."""
    from prefect.settings import PREFECT_API_URL

    env = {**os.environ, "PREFECT_API_URL": PREFECT_API_URL.value()}
    env.pop("MLFLOW_TRACKING_URI", None)
    return env


@pytest.fixture(scope="session")
def temporary_prefect_home(tmp_path_factory) -> Path:
    """The Prefect home of the `sgt` processes that start a temporary Prefect server of their own (tests of
    interrupts and orphans): one per session, so that its database is created once."""
    return tmp_path_factory.mktemp("prefect_home")


@pytest.fixture
def artifacts_dir(tmp_path, monkeypatch) -> Path:
    """A private artifacts root (and MLflow store under it) for one test."""
    root = tmp_path / "artifacts"
    monkeypatch.setenv("SGT_ARTIFACTS", str(root))
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    return root
