"""How `sgt` reports what went wrong: one `error:` line for bad input and for the machine's failures (permissions,
a full disk, the MLflow store), and no Prefect traceback for what it reports itself."""

from __future__ import annotations

import logging
import os
import sys
from pathlib import Path

from sgt_core.errors import SGTError

# Prefect's words for a run it records as crashed because it was interrupted (Ctrl-C, SIGTERM).
INTERRUPTED_BY = ("aborted by an interrupt signal", "aborted by a termination signal", "TerminationSignal")


def drop_expected_tracebacks(record: logging.LogRecord) -> bool:
    """Keeps Prefect from printing a traceback for an error the CLI reports in one line itself: bad input
    or configuration (SGTError), or the machine's (permissions, a full disk, the MLflow store's sqlite).
    Also drops Prefect's records of a trial that `sgt tune` pruned, whose task and flow runs end Failed with
    optuna.TrialPruned: stopped on purpose, which the tune flow reports in one line itself; and those of an
    interrupted run's crash, for which the CLI prints its one `interrupted:` line."""
    error = record.exc_info[1] if record.exc_info else None
    if _is_pruned_trial(error) or (error is None and "TrialPruned" in record.getMessage()):
        return False
    if (error is not None and is_interrupt(error)) or any(words in record.getMessage() for words in INTERRUPTED_BY):
        return False
    return error is None or not _is_expected(error)


def is_interrupt(error: BaseException) -> bool:
    from flows.interrupts import is_interrupt as interrupted

    return interrupted(error)


def _is_pruned_trial(error: BaseException | None) -> bool:
    # Only a process that imported Optuna can raise its TrialPruned.
    return error is not None and "optuna" in sys.modules and any(
        isinstance(cause, sys.modules["optuna"].TrialPruned) for cause in causes(error))


def _is_expected(error: BaseException) -> bool:
    import sqlite3

    return any(isinstance(cause, (SGTError, sqlite3.Error)) or (isinstance(cause, OSError) and cause.errno is not None)
               for cause in causes(error))


def causes(error: BaseException) -> list[BaseException]:
    """The error and every error it was raised from or while handling, outermost first."""
    chain: list[BaseException] = []
    while error is not None and error not in chain:
        chain.append(error)
        error = error.__cause__ or error.__context__
    return chain


def describe_environment_error(error: Exception, overrides: list[str]) -> str | None:
    """`<path>: <problem>` for a failure of the machine rather than of SGT (permissions, a full disk, a
    missing folder, a store that cannot be written), or None for anything else.

    OSErrors name their file where the system gave one, else the artifacts folder; the MLflow store's
    sqlite errors name the store's file. A failure without either, raised while the artifacts' file system
    is full (torch's writer says only "file write failed"), is reported as the full disk it is.
    """
    import shutil
    import sqlite3

    artifacts, store = _artifacts_and_store(overrides)
    for cause in causes(error):
        if isinstance(cause, OSError) and cause.errno is not None:
            where = cause.filename if cause.filename is not None else artifacts
            return f"{where}: {cause.strerror or cause}"
        if isinstance(cause, sqlite3.Error):
            return f"{store}: {str(cause).strip().splitlines()[0]} (the MLflow store)"
    text = str(error)
    if "sqlite3.OperationalError" in text:  # SQLAlchemy's wrapper, when the sqlite error is not chained
        return f"{store}: {text.split(') ', 1)[-1].splitlines()[0]} (the MLflow store)"
    try:
        full = shutil.disk_usage(_existing_parent(Path(artifacts))).free < (1 << 20)
    except OSError:
        full = False
    if full:
        return f"{artifacts}: no space left on device ({type(error).__name__}: {text.strip().splitlines()[0]})"
    return None


def _artifacts_and_store(overrides: list[str]) -> tuple[str, str]:
    """The artifacts folder and the MLflow store's location of this configuration (defaults if it fails)."""
    try:
        from flows.locations import tracking_uri
        from sgt_core.config import compose_config

        cfg = compose_config(overrides)
        return cfg["paths"]["artifacts"], tracking_uri(cfg).removeprefix("sqlite:///")
    except SGTError:  # the error being reported matters more than a precise location
        artifacts = os.environ.get("SGT_ARTIFACTS", "artifacts")
        return artifacts, os.environ.get("MLFLOW_TRACKING_URI", f"{artifacts}/mlflow.db")


def _existing_parent(path: Path) -> Path:
    path = path.resolve()
    while not path.exists() and path != path.parent:
        path = path.parent
    return path
