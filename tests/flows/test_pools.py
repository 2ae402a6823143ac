"""orchestration=pools for real: a Prefect server and two process workers on two pools, on localhost.

`sgt run orchestration=pools` runs as a process of its own against that server, as a user would; each stage
runs in a flow-run process that a worker starts. `make test` keeps the placement check (about 2.5 minutes on two
cores with the set-up); the killed worker and `sgt serve --pools` are marked e2e (another 4 minutes, `make
test-all`), which keeps the default suite inside CI's 15 minutes on a slower 2-core machine.
"""

from __future__ import annotations

import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import psutil
import pytest
from mlflow.tracking import MlflowClient

from flows.pools import STAGE_FLOW_NAME, deployment_name
from flows.ui import STARTUP_TIMEOUT_S, wait_until_up
from flows.workers import worker_command, worker_environment, worker_name
from sgt_core.artifacts import STAGING_PREFIX, ArtifactStore
from sgt_core.config import STAGE_NAMES, compose_config
from sgt_core.pipeline import stage_keys
from tests.conftest import REPO_ROOT, TINY_OVERRIDES, free_port

CPU, GPU = "sgt-cpu", "sgt-gpu"
HOST = socket.gethostname()
RUN_TIMEOUT_S = 480
# Every stage on the other pool than by default: the cached results that one worker wrote are served by
# the other, and train runs on sgt-cpu.
SWAPPED = [*(f"orchestration.pools.{stage}={GPU}" for stage in ("preprocess", "estimate", "export")),
           f"orchestration.pools.train={CPU}"]


def kill_tree(process: subprocess.Popen) -> None:
    """SIGKILL to the process and everything it started (flow-run processes, stage processes)."""
    try:
        tree = [psutil.Process(process.pid), *psutil.Process(process.pid).children(recursive=True)]
    except psutil.NoSuchProcess:
        tree = []
    for member in tree:
        try:
            member.send_signal(signal.SIGKILL)
        except psutil.NoSuchProcess:
            pass
    process.wait()


@dataclass
class PoolStack:
    root: Path
    env: dict[str, str]
    workers: dict[str, subprocess.Popen] = field(default_factory=dict)

    @property
    def artifacts(self) -> Path:
        return self.root / "artifacts"

    def start_worker(self, pool: str) -> None:
        log = (self.root / f"worker-{pool}.log").open("a")
        self.workers[pool] = subprocess.Popen(worker_command(pool), env=self.env, cwd=self.root, stdout=log,
                                              stderr=subprocess.STDOUT, start_new_session=True)

    def sgt_run(self, *overrides: str) -> subprocess.Popen:
        """`sgt run orchestration=pools <overrides>` as a process of its own (output in .stdout/.stderr)."""
        return subprocess.Popen([sys.executable, "-m", "flows.cli", "run", "orchestration=pools", *TINY_OVERRIDES,
                                 *overrides], env=self.env, cwd=REPO_ROOT, stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True, start_new_session=True)

    def logs(self) -> str:
        return "\n".join(f"--- {log.name}\n" + "\n".join(log.read_text(errors="replace").splitlines()[-30:])
                         for log in sorted(self.root.glob("*.log")))


def finish(process: subprocess.Popen, stack: PoolStack) -> tuple[int, str, str]:
    try:
        out, err = process.communicate(timeout=RUN_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        kill_tree(process)
        raise AssertionError(f"sgt run did not end in {RUN_TIMEOUT_S} s\n{stack.logs()}") from None
    return process.returncode, out, err


@pytest.fixture(scope="module")
def stack(tmp_path_factory):
    root = tmp_path_factory.mktemp("pools")
    port = free_port()
    api_url = f"http://127.0.0.1:{port}/api"
    env = worker_environment(api_url)  # this environment, pointed at the test's server
    env.pop("MLFLOW_TRACKING_URI", None)
    env.update(
        PREFECT_HOME=str(root / "prefect"), SGT_ARTIFACTS=str(root / "artifacts"),
        PREFECT_SERVER_ANALYTICS_ENABLED="false",
        # Workers look for flow runs every second and send a heartbeat every 3 s (defaults: 10 s and 30 s),
        # so a stage starts promptly and a killed worker is noticed after 3 missed heartbeats, ~9 s.
        PREFECT_WORKER_QUERY_SECONDS="1", PREFECT_WORKER_HEARTBEAT_SECONDS="3",
    )
    stack = PoolStack(root, env)
    with (root / "server.log").open("w") as log:
        server = subprocess.Popen([str(Path(sys.executable).parent / "prefect"), "server", "start", "--host",
                                   "127.0.0.1", "--port", str(port)], env=env, cwd=root, stdout=log,
                                  stderr=subprocess.STDOUT, start_new_session=True)
    try:
        wait_until_up("prefect", server, f"{api_url}/health", STARTUP_TIMEOUT_S)
        for pool in (CPU, GPU):
            stack.start_worker(pool)
        yield stack
    finally:
        for worker in stack.workers.values():
            kill_tree(worker)
        server.terminate()
        try:
            server.wait(timeout=30)
        except subprocess.TimeoutExpired:
            pass
        kill_tree(server)


def stage_runs(tracking_uri: str, output: str) -> tuple[MlflowClient, object, dict]:
    """The pipeline run that `sgt run` printed, and its child runs by stage."""
    run_id = next(line.split()[2] for line in output.splitlines() if line.startswith("mlflow run "))
    client = MlflowClient(tracking_uri)
    parent = client.get_run(run_id)
    children = client.search_runs([parent.info.experiment_id], f"tags.mlflow.parentRunId = '{run_id}'")
    return client, parent, {run.data.tags["sgt.stage"]: run for run in children}


def tracking_uri(stack: PoolStack) -> str:
    return f"sqlite:///{stack.artifacts / 'mlflow.db'}"


@pytest.fixture(scope="module")
def default_run(stack) -> tuple[int, str, str]:
    """`sgt run orchestration=pools` with the pools as configured: what the later tests find in the cache."""
    return finish(stack.sgt_run(), stack)


def test_each_stage_runs_on_its_pool(stack, default_run):
    code, out, err = default_run
    assert code == 0, f"{err[-3000:]}\n{stack.logs()}"
    _, parent, stages = stage_runs(tracking_uri(stack), out)
    assert parent.info.status == "FINISHED" and "test_roc_auc" in parent.data.metrics
    assert set(stages) == set(STAGE_NAMES)
    for name, run in stages.items():
        pool = GPU if name == "train" else CPU
        assert run.data.tags["sgt.worker"] == f"{pool}@{HOST}", name
        assert run.data.tags["sgt.worker_name"] == worker_name(pool), name
        assert run.data.tags["sgt.cache_hit"] == "false" and run.info.status == "FINISHED", name
    # the stage deployments the run registered, each on its pool
    from prefect.client.orchestration import get_client
    from prefect.settings import PREFECT_API_URL, temporary_settings

    with temporary_settings({PREFECT_API_URL: stack.env["PREFECT_API_URL"]}), get_client(sync_client=True) as client:
        for name in STAGE_NAMES:
            pool = GPU if name == "train" else CPU
            deployment = client.read_deployment_by_name(f"{STAGE_FLOW_NAME}/{deployment_name(name, pool)}")
            assert deployment.work_pool_name == pool


@pytest.mark.e2e  # two more `sgt run` processes, one killed mid-train: ~150 s on 2 cores
def test_cache_hits_across_workers_and_a_killed_worker(stack, default_run):
    assert default_run[0] == 0, default_run[2][-3000:]  # its stages, written by sgt-cpu's worker, are reused below
    overrides = [*SWAPPED, "train.epochs=150"]  # a new train key, and long enough to be killed mid-stage
    store = ArtifactStore(stack.artifacts)
    train_folder = stack.artifacts / "train"

    run = stack.sgt_run(*overrides)
    deadline = time.monotonic() + RUN_TIMEOUT_S
    # The worker computes the key (`.tmp-<key>-<random>-<pid>@<host>`): read it from its staging folder.
    while not (staging := sorted(p.name for p in train_folder.glob(f"{STAGING_PREFIX}*"))):
        assert run.poll() is None, f"sgt run ended before train started: {run.communicate()}\n{stack.logs()}"
        assert time.monotonic() < deadline, stack.logs()
        time.sleep(0.2)
    train_key = staging[0].removeprefix(STAGING_PREFIX).split("-")[0]
    kill_tree(stack.workers[CPU])  # the worker running train, with its flow-run and stage processes

    code, out, err = finish(run, stack)
    assert code == 2, f"{out}\n{err[-3000:]}"
    assert "error: train: its flow run" in err and "CRASHED" in err and worker_name(CPU) in err, err[-3000:]
    assert not store.is_complete("train", train_key) and not store.path("train", train_key).exists()
    leftovers = [p for p in train_folder.iterdir() if p.name.startswith(STAGING_PREFIX)]
    assert leftovers  # the killed writer's staging folder, never taken as a result
    client = MlflowClient(tracking_uri(stack))
    failed = client.search_runs([client.get_experiment_by_name("sgt-minesweeper").experiment_id],
                                f"tags.`sgt.cache_key` = '{train_key}'")
    assert [r.info.status for r in failed] == ["FAILED"]  # the dead stage's MLflow run is closed, not left RUNNING

    stack.start_worker(CPU)
    code, out, err = finish(stack.sgt_run(*overrides), stack)
    assert code == 0, f"{err[-3000:]}\n{stack.logs()}"
    _, _, stages = stage_runs(tracking_uri(stack), out)
    for name in ("preprocess", "estimate", "export"):  # written by the sgt-cpu worker, served by sgt-gpu's
        assert stages[name].data.tags["sgt.cache_hit"] == "true", name
        assert stages[name].data.tags["sgt.worker"] == f"{GPU}@{HOST}", name
    assert stages["train"].data.tags["sgt.cache_hit"] == "false"
    assert stages["train"].data.tags["sgt.worker"] == f"{CPU}@{HOST}"
    assert store.is_complete("train", train_key, checksums=True)
    assert not any(p.name.startswith(STAGING_PREFIX) for p in train_folder.iterdir())  # the dead writer's removed


@pytest.mark.e2e  # `sgt serve` and a UI-style run through the pools: ~80 s on 2 cores
def test_sgt_serve_pools_makes_ui_runs_use_the_pools(stack):
    """`sgt serve --pools` (the compose stack's `serve`): a run started with the deployment's defaults, as from
    the UI with nothing changed, sends its stages to the pools; here train to sgt-cpu, as without a GPU."""
    from prefect.client.orchestration import get_client
    from prefect.deployments import run_deployment
    from prefect.settings import PREFECT_API_URL, temporary_settings

    from flows.serve import DEPLOYMENT_NAME, sgt_run

    served = [*TINY_OVERRIDES, f"orchestration.pools.train={CPU}"]
    log = (stack.root / "serve.log").open("a")
    serve = subprocess.Popen([sys.executable, "-m", "flows.cli", "serve", "--pools", *served], env=stack.env,
                             cwd=REPO_ROOT, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    name = f"{sgt_run.name}/{DEPLOYMENT_NAME}"
    try:
        with temporary_settings({PREFECT_API_URL: stack.env["PREFECT_API_URL"]}):
            with get_client(sync_client=True) as client:
                deadline = time.monotonic() + STARTUP_TIMEOUT_S
                while True:
                    assert serve.poll() is None, f"sgt serve exited\n{stack.logs()}"
                    try:
                        deployment = client.read_deployment_by_name(name)
                        break
                    except Exception:  # noqa: BLE001 - not registered yet
                        assert time.monotonic() < deadline, stack.logs()
                        time.sleep(0.5)
                assert deployment.parameters == {"overrides": ["orchestration=pools", *served]}
                train = client.read_deployment_by_name(f"{STAGE_FLOW_NAME}/{deployment_name('train', CPU)}")
                assert train.work_pool_name == CPU
            flow_run = run_deployment(name, timeout=RUN_TIMEOUT_S)
        assert flow_run.state.is_completed(), f"{flow_run.state}\n{stack.logs()}"
    finally:
        kill_tree(serve)
    client = MlflowClient(tracking_uri(stack))
    experiment = client.get_experiment_by_name("sgt-minesweeper").experiment_id
    [train_run] = client.search_runs([experiment], "tags.`sgt.stage` = 'train'", order_by=["attributes.start_time DESC"],
                                     max_results=1)
    assert train_run.data.tags["sgt.worker"] == f"{CPU}@{HOST}"


@pytest.mark.parametrize(("override", "problem"), [
    ("orchestration.pools.train=bad/name", "orchestration.pools.train: must be a work pool name"),
    ("orchestration.start_timeout_s=0", "orchestration.start_timeout_s: must be a number > 0"),
    ("orchestration.missed_heartbeats=0", "orchestration.missed_heartbeats: must be an integer >= 1"),
    ("+orchestration.pools.evaluate=sgt-cpu", "orchestration.pools.evaluate: unknown key"),
])
def test_bad_pool_settings_are_one_clear_error(override, problem):
    from sgt_core.errors import ConfigError

    with pytest.raises(ConfigError, match=f"^{problem}"):
        compose_config(["orchestration=pools", override])


def test_local_orchestration_keeps_every_stage_here():
    cfg = compose_config([])
    assert cfg["orchestration"] == {"mode": "local", "prefect_server": "shared", "shared_server_idle_minutes": 15,
                                    "train_malloc_mmap_threshold_kb": None}
    # where the stages run is not part of what they compute: the same keys either way
    assert stage_keys(cfg) == stage_keys(compose_config(["orchestration=pools", *SWAPPED]))
