"""`sgt` as a real process, for tests that signal it: start it, wait for what it prints, find its processes."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import psutil

from tests.conftest import REPO_ROOT, TINY_OVERRIDES

TIMEOUT_S = 300  # starting Python, torch and Prefect on a busy 2-core machine is slow
TEMPORARY = "orchestration.prefect_server=temporary"  # never a `sgt ui` server another user left on 4200


def tiny(*overrides: str) -> list[str]:
    """The tiny configuration with `overrides` replacing its values of the same keys."""
    keys = {override.split("=")[0] for override in overrides}
    return [*(o for o in TINY_OVERRIDES if o.split("=")[0] not in keys), *overrides]


class CliProcess:
    """`sgt ARGUMENTS` in a new session (so that a signal to its process group reaches it and its helpers
    alone, as Ctrl-C in a terminal does), its output in a file."""

    def __init__(self, arguments: list[str], env: dict[str, str], log: Path) -> None:
        self.log = log
        with open(log, "w") as output:
            self.process = subprocess.Popen([sys.executable, "-m", "flows.cli", *arguments], cwd=REPO_ROOT, env=env,
                                            stdout=output, stderr=subprocess.STDOUT, start_new_session=True)
        self.pid = self.process.pid

    def output(self) -> str:
        return self.log.read_text()

    def wait_for(self, condition: Callable[[], bool], what: str, timeout_s: float = TIMEOUT_S) -> None:
        """Polls `condition` until it holds; fails if the process ends first or the time runs out."""
        deadline = time.monotonic() + timeout_s
        while not condition():
            if self.process.poll() is not None:
                raise AssertionError(f"sgt ended (status {self.process.returncode}) before {what}:\n"
                                     f"{self.output()[-4000:]}")
            if time.monotonic() > deadline:
                raise AssertionError(f"no {what} after {timeout_s} s:\n{self.output()[-4000:]}")
            time.sleep(0.05)

    def wait_for_line(self, text: str, timeout_s: float = TIMEOUT_S) -> None:
        self.wait_for(lambda: text in self.output(), repr(text), timeout_s)

    def descendants(self) -> list[psutil.Process]:
        try:
            return psutil.Process(self.pid).children(recursive=True)
        except psutil.NoSuchProcess:
            return []

    def finish(self, timeout_s: float = TIMEOUT_S) -> int:
        try:
            return self.process.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            signals = self.signal_dispositions()  # why a signal went unheard, read before the clean-up kills them
            self.kill_all()
            raise AssertionError(f"sgt still running {timeout_s} s on; its processes' signal masks (hex):\n"
                                 f"{signals}\n{self.output()[-4000:]}") from None

    def signal_dispositions(self) -> str:
        """Each live process's blocked, ignored and caught signals (from /proc), one line each."""
        lines = []
        for process in [psutil.Process(self.pid), *self.descendants()]:
            try:
                status = Path(f"/proc/{process.pid}/status").read_text().splitlines()
                fields = dict(line.split(":\t", 1) for line in status if line.startswith(("SigBlk", "SigIgn", "SigCgt")))
                lines.append(f"  {process.pid} {' '.join(process.cmdline()[:4])}: {fields}")
            except (OSError, psutil.Error):
                continue
        return "\n".join(lines)

    def kill_all(self) -> None:
        """SIGKILL to it and everything it started (a test's clean-up)."""
        for process in [*self.descendants(), psutil.Process(self.pid)] if self.process.poll() is None else self.descendants():
            try:
                process.kill()
            except psutil.NoSuchProcess:
                pass
        self.process.wait()


def rank_process(cli: CliProcess, rank: int) -> psutil.Process | None:
    """The DDP rank `rank` among the processes `cli` started (torchrun's workers carry RANK in their environment)."""
    for process in cli.descendants():
        try:
            if "sgt_core.train.distributed" in " ".join(process.cmdline()) and process.environ().get("RANK") == str(rank):
                return process
        except psutil.Error:  # ended meanwhile
            continue
    return None


def still_running(processes: list[psutil.Process], timeout_s: float) -> list[psutil.Process]:
    """Those of `processes` that have not ended within `timeout_s` (zombies count as ended)."""
    _, alive = psutil.wait_procs(processes, timeout=timeout_s)
    return [process for process in alive if _lives(process)]


def _lives(process: psutil.Process) -> bool:
    try:
        return process.status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def session_env(artifacts: Path, **extra: str) -> dict[str, str]:
    """The environment of an `sgt` process writing under `artifacts` with the session's Prefect server."""
    from prefect.settings import PREFECT_API_URL

    env = {**os.environ, "SGT_ARTIFACTS": str(artifacts), "PREFECT_API_URL": PREFECT_API_URL.value(),
           "OMP_WAIT_POLICY": "PASSIVE", **extra}
    env.pop("MLFLOW_TRACKING_URI", None)
    return env


def temporary_server_env(home: Path) -> dict[str, str]:
    """An `sgt` environment without a configured Prefect server: the run starts a temporary one of its own,
    with its database under `home` (the `temporary_prefect_home` fixture's, created once per session)."""
    env = {**os.environ, "PREFECT_HOME": str(home), "OMP_WAIT_POLICY": "PASSIVE"}
    for name in ("PREFECT_API_URL", "MLFLOW_TRACKING_URI", "PREFECT_PROFILE"):
        env.pop(name, None)
    return env
