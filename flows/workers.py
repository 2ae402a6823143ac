"""`sgt workers`: Prefect process workers that run the stages sent to their work pools, until Ctrl-C."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
from pathlib import Path

from flows.process_groups import first_to_exit, stop
from sgt_core.errors import SGTError


def worker_name(pool: str) -> str:
    """`<pool>@<host>`: a restarted worker takes over its own record in the pool instead of adding one."""
    return f"{pool}@{socket.gethostname()}"


def worker_command(pool: str, name: str | None = None) -> list[str]:
    """The command line of one process worker on `pool`, with this environment's `prefect`."""
    prefect = str(Path(sys.executable).parent / "prefect")
    return [prefect, "worker", "start", "--pool", pool, "--type", "process", "--name", name or worker_name(pool)]


def worker_environment(api_url: str) -> dict[str, str]:
    """The workers' environment: the Prefect API, and the stages' log lines sent to Prefect's run logs."""
    env = {**os.environ, "PREFECT_API_URL": api_url}
    env.setdefault("PREFECT_LOGGING_EXTRA_LOGGERS", "sgt_core,sgt")
    return env


def run_workers(pools: list[str], api_url: str, name: str | None = None) -> None:
    """Starts one process worker per pool, each in its own process group; Ctrl-C or SIGTERM stops them all."""
    for signum in (signal.SIGTERM, signal.SIGHUP):
        signal.signal(signum, lambda *_: sys.exit(0))
    processes: dict[str, subprocess.Popen] = {}
    try:
        for pool in pools:
            command = worker_command(pool, name)
            # Own sessions: stopping a worker also stops the flow runs and stage processes it started.
            processes[pool] = subprocess.Popen(command, env=worker_environment(api_url), start_new_session=True)
            print(f"worker {command[-1]} on the work pool {pool} (Prefect API {api_url})", flush=True)
        print("Ctrl-C stops them.", flush=True)
        ended = first_to_exit(processes)
        raise SGTError(f"the worker on the work pool {ended} exited with status {processes[ended].returncode}")
    except KeyboardInterrupt:
        print("\nstopping the workers", flush=True)
    finally:
        stop(processes)  # SIGTERM to each worker's group (its flow runs included), SIGKILL to what outlives it
