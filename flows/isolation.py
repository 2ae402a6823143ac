"""Runs a stage in a process of its own, so a run's peak memory is its largest stage, not the sum of all.

The stage processes are forked from a server process (multiprocessing's forkserver) that imported torch
and the stage modules once: a stage starts in milliseconds instead of re-importing torch (~2 s), and
none of them carries Prefect, MLflow or matplotlib, which stay in the flow's process. The flow's process
never imports torch: what it must know from torch before the stages run (whether the dataset loads, the
kernel backend in the cache keys) it asks a process forked from the same server (`call_in_stage_process`).
The server has run no torch operation, so forking it is safe (no OpenMP or CUDA state to inherit).

What crosses the process boundary: the config, input folders and output folder in; the stage's metrics
and its peak RSS out; its log records, re-emitted in the flow's process under their own logger names
(Prefect captures them into the task run's logs); its exception, re-raised as the same type.

A stage whose process needs an environment of its own (`stage_environment`: glibc's malloc variables)
gets it in its environment. glibc reads those once, as a process starts, and a fork inherits the server's
settings instead, so the forked stage process applies them itself, through mallopt, before the stage
runs: the same setting, for that process alone, without spawning afresh (re-importing torch: seconds).
"""

from __future__ import annotations

import importlib
import logging
import logging.handlers
import multiprocessing
import os
import queue
import signal
import threading
import traceback
from collections.abc import Callable
from pathlib import Path

from flows.interrupts import RunInterrupted, is_interrupt
from flows.memory import status_mb
from sgt_core.errors import SGTError
from sgt_core.lifeline import end_with
from sgt_core.pipeline import STAGE_BY_NAME, STAGES, stage_environment
from sgt_core.progress import current_position

log = logging.getLogger("sgt")

_POLL_SECONDS = 0.1  # how often the flow's process forwards the stage's log records while it waits
HEAR_S = 0.5  # how long an interrupted stage process has to report by itself before it is interrupted
STOP_GRACE_S = 15.0  # how long it then has to report and end (torchrun's ranks included) before SIGKILL


# glibc's malloc environment variables and the mallopt parameters that set the same thing (malloc.h).
MALLOPT_PARAMETERS = {"MALLOC_TRIM_THRESHOLD_": -1, "MALLOC_TOP_PAD_": -2, "MALLOC_MMAP_THRESHOLD_": -3,
                      "MALLOC_MMAP_MAX_": -4, "MALLOC_ARENA_MAX": -8}


def apply_malloc_variables(variables: dict[str, str]) -> None:
    """Sets this process's malloc as glibc would have at the start from these environment variables."""
    import ctypes
    import ctypes.util

    wanted = {name: int(value) for name, value in variables.items() if name in MALLOPT_PARAMETERS}
    if not wanted:
        return
    libc = ctypes.CDLL(ctypes.util.find_library("c"))
    for name, value in wanted.items():
        if not getattr(libc, "mallopt", None) or libc.mallopt(MALLOPT_PARAMETERS[name], value) != 1:
            log.warning("%s=%s could not be applied to the stage's process (no glibc mallopt)", name, value)


class StageProcessDied(SGTError):
    """The stage's process ended without reporting: killed (often by the kernel when memory ran out)."""


def _context() -> multiprocessing.context.ForkServerContext:
    context = multiprocessing.get_context("forkserver")
    # Importing the stage modules once in the server is what makes each stage's start cheap.
    context.set_forkserver_preload([__name__, *sorted({stage.module for stage in STAGES}), "flows.code_warm_up"])
    return context


def warm_up() -> threading.Thread:
    """Starts the fork server in the background (it imports torch and the stages: seconds), so that it is
    ready by the time the first stage needs it; the flow's own start (Prefect's server) overlaps it."""
    from multiprocessing import forkserver

    def start() -> None:
        _context()
        forkserver.ensure_running()

    thread = threading.Thread(target=start, name="sgt-forkserver-warm-up", daemon=True)
    thread.start()
    return thread


def uses_stage_server(cfg: dict) -> bool:
    """Whether this process's stages run in processes forked from its stages' server: stage_isolation=process
    with the stages here (orchestration local), not on work pools, whose flow-run processes run them."""
    return cfg["stage_isolation"] == "process" and cfg["orchestration"]["mode"] == "local"


def _join_the_flow(environment: dict[str, str], flow_pid: int) -> None:
    """What a process forked from the server does first: end with the flow's process, even one killed outright
    (SIGTERM, whose default action ends it; torchrun then ends too), and take the flow's current environment
    (the server's is the flow's at the server's start). The fork server, its parent, waits for it: it holds
    the server's alive pipe like the flow."""
    end_with(flow_pid, signal.SIGTERM, death_signal=False)
    os.environ.clear()
    os.environ.update(environment)


def _send_error(results, error: BaseException, *extra) -> None:
    """Sends ("error", error, *extra) to the flow's process; the error's text instead if it cannot be pickled."""
    try:
        results.send(("error", error, *extra))
    except Exception:  # noqa: BLE001 - an exception that cannot be pickled: send its text instead
        results.send(("error", RuntimeError(f"{type(error).__name__}: {error}"), *extra))


def _stage_main(name: str, cfg: dict, inputs: dict[str, Path], out_dir: Path, environment: dict[str, str],
                results, records, flow_pid: int) -> None:
    """The stage process: runs the stage, sends (status, metrics or exception, peak RSS or traceback), or
    ("interrupted", the loop position it was at, None) after Ctrl-C."""
    _join_the_flow(environment, flow_pid)
    apply_malloc_variables(environment)
    root = logging.getLogger()
    root.handlers[:] = [logging.handlers.QueueHandler(records)]
    root.setLevel(logging.INFO)
    try:
        metrics = STAGE_BY_NAME[name].run(cfg, inputs, out_dir)
        results.send(("ok", metrics, status_mb("VmHWM")))
    except KeyboardInterrupt:
        signal.signal(signal.SIGINT, signal.SIG_IGN)  # a second Ctrl-C must not cut the report short
        results.send(("interrupted", current_position(), None))
    except BaseException as error:  # noqa: BLE001 - every failure is reported to the flow's process
        _send_error(results, error, traceback.format_exc())
    finally:
        results.close()


def _call_main(function: str, args: tuple, environment: dict[str, str], results, flow_pid: int) -> None:
    """A helper process of the flow's: calls "module:name"(*args), sends ("ok", its result) or ("error", exception)."""
    _join_the_flow(environment, flow_pid)
    try:
        module, _, name = function.partition(":")
        results.send(("ok", getattr(importlib.import_module(module), name)(*args)))
    except BaseException as error:  # noqa: BLE001 - every failure is re-raised in the flow's process
        _send_error(results, error)
    finally:
        results.close()


def call_in_stage_process(function: str, *args):
    """Calls `function` ("module:name") with `args` in a process forked from the stages' server and returns
    its result; its exception is re-raised here as the same type.

    For what the flow must know before the stages run but only torch can tell (the kernel backend that
    enters the cache keys, whether the dataset loads): the flow's process never imports torch, the
    server has it imported already, and what the call loads ends with its process.
    """
    context = _context()
    receiving, sending = context.Pipe(duplex=False)
    process = context.Process(target=_call_main, name="sgt-check",
                              args=(function, args, dict(os.environ), sending, os.getpid()))
    process.start()
    sending.close()
    try:
        status, payload = receiving.recv()
        process.join()
    except EOFError:
        raise StageProcessDied(f"{function}: its process (pid {process.pid}) ended without answering") from None
    finally:  # an interrupt here ends it at once
        receiving.close()
        if process.is_alive():
            process.kill()
            process.join()
    if status == "error":
        raise payload
    return payload


def _forward(records) -> None:
    """Re-emits the stage's queued log records through the flow process's loggers of the same name."""
    while True:
        try:
            record = records.get_nowait()
        except queue.Empty:
            return
        logger = logging.getLogger(record.name)
        if logger.isEnabledFor(record.levelno):
            logger.handle(record)


def _stop_interrupted(process, receiving) -> tuple | None:
    """Lets an interrupted stage process report and end; returns its message, None if it sent none.

    A Ctrl-C in the terminal reached it already, and it reports within moments; `kill -INT` or SIGTERM
    reached only this process, which then interrupts the stage itself. One that takes longer than
    `STOP_GRACE_S` (a long operation in C++), or a second Ctrl-C here, ends it with SIGKILL.
    """
    message = None
    try:
        if not receiving.poll(HEAR_S) and process.is_alive():
            os.kill(process.pid, signal.SIGINT)
        if receiving.poll(STOP_GRACE_S):
            message = receiving.recv()
        process.join(STOP_GRACE_S)
    except EOFError:  # it ended without a word
        pass
    finally:
        if process.is_alive():
            process.kill()
        process.join()
    return message


def run_stage_in_process(name: str, cfg: dict, inputs: dict[str, Path], out_dir: Path,
                         on_start: Callable[[int], None] | None = None) -> tuple[dict, float | None]:
    """Runs stage `name` in its own process; returns its metrics and peak RSS (MB).

    `on_start(pid)` is called once the process exists (the memory sampler follows it). An exception in
    the stage is re-raised here as the same type; a process that dies without a word (SIGKILL, out of
    memory) raises StageProcessDied. An interrupt here (Ctrl-C, SIGTERM) interrupts the stage process too,
    unless the terminal's Ctrl-C reached it already, lets it report where it was and raises RunInterrupted;
    any other error here ends the stage process. A stage with variables of its own (`stage_environment`) has
    them in its environment, its malloc ones applied.
    """
    variables = stage_environment(STAGE_BY_NAME[name], cfg)
    context = _context()
    receiving, sending = context.Pipe(duplex=False)
    records = context.Queue()
    process = context.Process(target=_stage_main, name=f"sgt-{name}",
                              args=(name, cfg, inputs, out_dir, {**os.environ, **variables}, sending, records,
                                    os.getpid()))
    process.start()
    sending.close()  # ours; the child's copy is the only writer left, so its death reads as EOF
    message = None
    try:
        if on_start is not None:
            on_start(process.pid)
        while True:
            _forward(records)
            if receiving.poll(_POLL_SECONDS):
                try:
                    message = receiving.recv()
                except EOFError:
                    pass
                break
        process.join()
        _forward(records)
    except BaseException as error:
        if not is_interrupt(error):
            process.kill()
            process.join()
            raise
        message = _stop_interrupted(process, receiving)
        _forward(records)
        raise RunInterrupted(name, message[1] if message and message[0] == "interrupted" else None) from error
    finally:
        receiving.close()
        records.close()
    if message is None:
        code = process.exitcode
        how = f"signal {signal.Signals(-code).name}" if code is not None and code < 0 else f"exit code {code}"
        raise StageProcessDied(f"{name}: the stage's process ended ({how}) without reporting; a SIGKILL usually "
                               "means the machine ran out of memory (see `make bench-scale` for each stage's peak)")
    status, payload, extra = message
    if status == "error":
        if not isinstance(payload, (SGTError, OSError)):  # a bug: keep the stage's own traceback visible
            log.error("%s: the stage failed in its own process:\n%s", name, extra)
        raise payload
    return payload, extra
