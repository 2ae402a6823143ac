"""Child processes that each lead a process group of their own (servers, workers): waiting until the first of
them exits, and stopping them whole."""

from __future__ import annotations

import os
import signal
import subprocess
import time


def first_to_exit(processes: dict[str, subprocess.Popen], poll_s: float = 1.0) -> str:
    """Waits until one of `processes` exits and returns its name; the others keep running."""
    while all(process.poll() is None for process in processes.values()):
        time.sleep(poll_s)
    return next(name for name, process in processes.items() if process.poll() is not None)


def signal_group(process: subprocess.Popen, signum: int) -> None:
    try:
        os.killpg(process.pid, signum)
    except ProcessLookupError:
        pass  # the whole group has exited


def stop(processes: dict[str, subprocess.Popen]) -> None:
    """SIGTERM to each process group (a server's workers, a worker's flow runs included), then SIGKILL."""
    for process in processes.values():
        signal_group(process, signal.SIGTERM)
    for process in processes.values():
        try:
            process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            pass
        signal_group(process, signal.SIGKILL)  # whatever of the group outlived a clean shutdown
        process.wait()
