"""An interrupted run (Ctrl-C, SIGTERM): where it was, the one line it ends with, exit status 130.

Ctrl-C in a terminal sends SIGINT to the whole process group: the `sgt` process, its stage process and
torchrun's ranks; `kill -INT` or `kill -TERM` reaches the `sgt` process alone, which then interrupts its
stage process itself (flows/isolation.py). Either way the stage stops where it is, its staging folder is
deleted, its MLflow runs end KILLED, Prefect marks its task and flow runs CRASHED (the temporary Prefect
server, in a session of its own, is still there to hear it), and the run prints one line:

    interrupted: estimate at epoch 12; nothing was cached for it
"""

from __future__ import annotations

import signal
import threading
from collections.abc import Iterator
from contextlib import contextmanager

from sgt_core.progress import current_position

EXIT_STATUS = 130  # what a shell reports for a command ended by Ctrl-C: 128 + SIGINT
TERMINATING = (signal.SIGTERM, signal.SIGHUP)  # a process manager's stop, a closed terminal: as Ctrl-C


class RunInterrupted(KeyboardInterrupt):
    """An interrupt, raised where a stage's own process stopped: the stage and the loop position it was at."""

    def __init__(self, stage: str, position: tuple[str, int] | None) -> None:
        super().__init__(stage)
        self.stage, self.position = stage, tuple(position) if position else None


class _Whereabouts:
    """The stage this process's run is in, and the last one it finished (runs in one process go one by one)."""

    stage: str | None = None
    finished: str | None = None


def is_interrupt(error: BaseException) -> bool:
    """Ctrl-C, or Prefect's TerminationSignal (its SIGTERM handler inside a flow raises it)."""
    return isinstance(error, KeyboardInterrupt) or any(cls.__name__ == "TerminationSignal" for cls in type(error).__mro__)


@contextmanager
def in_stage(name: str) -> Iterator[None]:
    """Marks the block as stage `name` of this process's run, for the line an interrupt prints."""
    _Whereabouts.stage = name
    yield
    _Whereabouts.stage, _Whereabouts.finished = None, name


def begin_run() -> None:
    """Forgets the stages of an earlier run in this process (a sweep's, a tuning study's trials)."""
    _Whereabouts.stage = _Whereabouts.finished = None


def interruption_line(error: BaseException) -> str:
    """`interrupted: <stage> at epoch N; nothing was cached for it`, or where the run was between stages."""
    stage = error.stage if isinstance(error, RunInterrupted) else _Whereabouts.stage
    if stage is None:
        if _Whereabouts.finished is None:
            return "interrupted: before the first stage; nothing was cached"
        return f"interrupted: after {_Whereabouts.finished}; the stages that finished are cached"
    position = error.position if isinstance(error, RunInterrupted) else current_position()
    return f"interrupted: {stage}{_at(position)}; nothing was cached for it"


def _at(position: tuple[str, int] | None) -> str:
    if position is None:
        return ""
    description, index = position
    return f" at epoch {index}" if description.endswith("epoch") else f" at {description} {index}"


@contextmanager
def terminating_as_interrupts() -> Iterator[None]:
    """SIGTERM and SIGHUP raise KeyboardInterrupt in the block, as Ctrl-C does (a flow replaces the SIGTERM
    handler with Prefect's own, which raises its TerminationSignal: `is_interrupt` takes both)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = {signum: signal.getsignal(signum) for signum in TERMINATING}
    for signum in TERMINATING:
        signal.signal(signum, _raise_interrupt)
    try:
        yield
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)


def _raise_interrupt(signum: int, frame) -> None:
    raise KeyboardInterrupt(signal.Signals(signum).name)


@contextmanager
def deaf_to_interrupts() -> Iterator[None]:
    """Ignores further Ctrl-C while the block stops what an interrupt stopped and reports it: a second one
    would cut the report short. A no-op off the main thread, where signal handlers cannot be set."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)
