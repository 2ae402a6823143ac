"""Helper processes that end with the process that started them, however it ends (SIGKILL included).

A run starts helpers (a stage's process, torchrun and its ranks, Prefect's temporary server); killed outright,
it runs no clean-up, and a helper left behind keeps its memory, its port and its work going for nobody. Two
ways to notice, both used:

- Linux's prctl(PR_SET_PDEATHSIG): the kernel signals the child the moment its parent ends. It follows
  the parent *thread* that forked the child, so it is only for children forked from a thread that lives as
  long as its process (a main thread, a single-threaded server).
- A watchdog thread in the child that polls whether the process it belongs to still runs: portable, right
  whichever thread forked it, and able to follow a process other than its parent; it answers within `POLL_S`.
"""

from __future__ import annotations

import ctypes
import os
import signal
import threading
import time
from collections.abc import Callable

PR_SET_PDEATHSIG = 1  # linux/prctl.h
POLL_S = 0.2
# How long a helper signalled by its watchdog may take to stop by itself before it is ended outright.
GRACE_S = 10.0


def _prctl() -> Callable[..., int] | None:
    try:
        return ctypes.CDLL(None, use_errno=True).prctl
    except (OSError, AttributeError):  # no prctl: not Linux
        return None


def parent_death_signal(signum: int = signal.SIGTERM) -> Callable[[], object] | None:
    """A `preexec_fn` for `subprocess.Popen` after which the child gets `signum` when its parent ends.

    prctl is looked up here, before the fork: between fork and exec only the call itself runs, taking no
    lock another thread could hold. None where there is no prctl. Fork from a long-lived thread (see above).
    """
    prctl = _prctl()
    if prctl is None:
        return None
    return lambda: prctl(PR_SET_PDEATHSIG, signum)


def end_with(pid: int | None = None, signum: int = signal.SIGTERM, death_signal: bool = True) -> bool:
    """Makes this process receive `signum` once process `pid` (default: its parent) has ended; returns False
    if it has already.

    Args:
        pid: the process to end with. Not always the parent: a stage process is forked by multiprocessing's
            fork server, which itself waits for its clients, the stage process among them, to end first.
        signum: the signal this process gets (its handler, or its default action, stops it).
        death_signal: also ask the kernel (PR_SET_PDEATHSIG) for an immediate signal when the parent ends;
            only right when the parent forked this process from a thread that lives as long as it does.
    """
    import psutil  # here: a process that never starts a watchdog does not import it

    try:
        watched = psutil.Process(os.getppid() if pid is None else pid)
    except psutil.NoSuchProcess:
        return False
    if death_signal and (prctl := _prctl()) is not None:
        prctl(PR_SET_PDEATHSIG, signum)
    if not _alive(watched):
        return False

    def watch() -> None:
        while _alive(watched):
            time.sleep(POLL_S)
        os.kill(os.getpid(), signum)
        time.sleep(GRACE_S)  # still here: the signal's handler did not stop it
        os._exit(128 + signum)

    threading.Thread(target=watch, name="sgt-lifeline", daemon=True).start()
    return True


def _alive(process) -> bool:
    """Running and not a zombie: a killed process whose parent has not reaped it yet has ended all the same.
    psutil's `is_running` also compares start times, so a reused pid does not count."""
    import psutil

    try:
        return process.is_running() and process.status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False
