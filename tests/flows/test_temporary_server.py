"""A run's helper processes end with it, however it ends: a SIGKILLed `sgt run` or `sgt tune` leaves none behind,
and a run that starts a temporary Prefect server first stops those that earlier runs left running."""

from __future__ import annotations

import json
import os
import shlex
import signal
import subprocess
import sys
from pathlib import Path

import psutil
import pytest

from flows.prefect_server import OUR_MODULE, PREFECT_APP, reap_orphaned_servers
from tests.flows.cli_process import TEMPORARY, CliProcess, still_running, temporary_server_env, tiny

ENDS_WITHIN_S = 30  # the helpers' watchdogs poll every 0.2 s; a busy machine stops a server slowly


def start_orphaned_server(home: Path) -> psutil.Process:
    """A stand-in for the temporary Prefect server an earlier SGT version left behind when it was killed:
    Prefect's command line and environment, its run gone (re-parented when its shell exits at once)."""
    command = [sys.executable, "-c", "import time; time.sleep(600)", "-m", "uvicorn", "--factory", PREFECT_APP]
    env = {**os.environ, "PREFECT_HOME": str(home), "PREFECT__SERVER_EPHEMERAL": "1"}
    shell = subprocess.run(["sh", "-c", f"{shlex.join(command)} >/dev/null 2>&1 & echo $!"], env=env,
                           capture_output=True, text=True, check=True)
    orphan = psutil.Process(int(shell.stdout))
    assert orphan.ppid() != os.getpid()
    return orphan


def server_processes(processes: list[psutil.Process]) -> list[psutil.Process]:
    return [process for process in processes if OUR_MODULE in process.cmdline()]


def test_a_killed_sgt_run_leaves_no_process_and_reaps_an_older_runs_server(temporary_prefect_home, tmp_path):
    prefect_home = temporary_prefect_home
    older = start_orphaned_server(prefect_home)
    cli = CliProcess(["run", *tiny("estimator.epochs=100000"), TEMPORARY,
                      f"paths.artifacts={tmp_path / 'artifacts'}"], temporary_server_env(prefect_home),
                     tmp_path / "run.log")
    try:
        cli.wait_for_line("estimate epoch 1/")  # the stage computes in its process
        helpers = cli.descendants()
        (server,) = server_processes(helpers)
        assert os.getsid(server.pid) == server.pid  # a session of its own: the terminal's Ctrl-C is the run's
        forkserver = next(process for process in helpers if "forkserver" in " ".join(process.cmdline()))
        assert any(process.ppid() == forkserver.pid for process in helpers), "no stage process"
        assert not older.is_running() or older.status() == psutil.STATUS_ZOMBIE  # reaped as the run began
        assert "stopped 1 temporary Prefect server(s) left running by earlier runs" in cli.output()

        os.kill(cli.pid, signal.SIGKILL)
        cli.process.wait()
        assert still_running(helpers, ENDS_WITHIN_S) == []
    finally:
        if older.is_running():
            older.kill()
        if cli.process.poll() is None:
            cli.kill_all()


@pytest.mark.e2e  # as the test above, for `sgt tune` (its stages run in its own process): in `make test-all`
def test_a_killed_sgt_tune_leaves_no_process(temporary_prefect_home, tmp_path):
    prefect_home = temporary_prefect_home
    cli = CliProcess(["tune", *tiny("train.epochs=100000"), "tune=quick", "tune.trials=2", TEMPORARY,
                      f"paths.artifacts={tmp_path / 'artifacts'}"], temporary_server_env(prefect_home),
                     tmp_path / "tune.log")
    try:
        cli.wait_for_line("train epoch 1/")  # trial 0 trains, in the tuning process
        helpers = cli.descendants()
        assert len(server_processes(helpers)) == 1
        os.kill(cli.pid, signal.SIGKILL)
        cli.process.wait()
        assert still_running(helpers, ENDS_WITHIN_S) == []
    finally:
        if cli.process.poll() is None:
            cli.kill_all()


def test_only_orphaned_servers_of_this_prefect_home_are_reaped(tmp_path):
    home, other_home = tmp_path / "home", tmp_path / "other"
    orphan, elsewhere = start_orphaned_server(home), start_orphaned_server(other_home)
    command = [sys.executable, "-c", "import time; time.sleep(600)", "-m", "uvicorn", "--factory", PREFECT_APP]
    live = subprocess.Popen(command, env={**os.environ, "PREFECT_HOME": str(home), "PREFECT__SERVER_EPHEMERAL": "1"})
    try:
        assert reap_orphaned_servers(home.resolve()) == [orphan.pid]
        assert still_running([orphan], 10) == []
        assert elsewhere.is_running() and live.poll() is None  # another home's; a live run's (this test's)
    finally:
        for process in (orphan, elsewhere):
            if process.is_running():
                process.kill()
        live.kill()
        live.wait()


def test_the_shared_server_outlives_its_run_serves_the_next_and_stops_when_unused(temporary_prefect_home, tmp_path):
    """`orchestration.prefect_server=shared` (the default): the first run starts a server in a session of its
    own that stays after the run; the next run uses it (no second start), and it ends by itself once unused."""
    from flows.prefect_server import SHARED_RECORD, _answers
    from flows.ui import DEFAULT_PREFECT_PORT, prefect_api_url

    if _answers(prefect_api_url(DEFAULT_PREFECT_PORT)):
        pytest.skip("a Prefect server answers on 127.0.0.1:4200 (`sgt ui`): the runs would use it")
    home = tmp_path / "prefect_home"
    home.mkdir()
    for name in os.listdir(temporary_prefect_home):  # the session's database, migrated once already
        if name.endswith(".db"):
            (home / name).write_bytes((temporary_prefect_home / name).read_bytes())
    idle_minutes = 0.4  # long enough for the second run to start on a busy machine
    arguments = ["run", *tiny(), "orchestration.prefect_server=shared",
                 f"orchestration.shared_server_idle_minutes={idle_minutes}", f"paths.artifacts={tmp_path / 'artifacts'}"]
    first = CliProcess(arguments, temporary_server_env(home), tmp_path / "first.log")
    assert first.finish() == 0, first.output()[-3000:]
    assert "started the shared Prefect server at" in first.output()
    record = json.loads((home / SHARED_RECORD).read_text())
    server = psutil.Process(record["pid"])
    try:
        assert server.is_running() and os.getsid(server.pid) == server.pid  # outlived its run, in its own session
        assert _answers(record["url"])

        second = CliProcess(arguments, temporary_server_env(home), tmp_path / "second.log")  # cached: seconds
        assert second.finish() == 0, second.output()[-3000:]
        assert f"using the shared Prefect server at {record['url']}" in second.output()
        assert "started the shared Prefect server" not in second.output()

        assert still_running([server], 60 * idle_minutes + 60) == []  # unused: it stopped itself
    finally:
        if server.is_running():
            server.kill()
