"""The `sgt` command: run the pipeline, inspect its stages and runs, and summarise attention scores.

One module per command group: `run` and `tune` run pipelines, `stages` and `results` inspect what runs left,
`servers` holds the long-running processes (UIs, deployments, workers, DDP nodes); `errors` turns failures
into one line. This module builds the parser from theirs and runs the chosen command.
"""

from __future__ import annotations

import argparse
import gc
import logging
import os
import sys

from flows.cli import results, run, servers, stages, tune
from flows.cli.errors import describe_environment_error, drop_expected_tracebacks
from sgt_core.errors import SGTError

__all__ = ["build_parser", "main", "program"]

DUCKDB_BINDINGS = "_duckdb"  # DuckDB's compiled module, imported by `import duckdb`


def _configure_environment() -> None:
    # Must happen before Prefect is imported: it reads its settings at import time.
    os.environ.setdefault("PREFECT_LOGGING_EXTRA_LOGGERS", "sgt_core,sgt")
    # What the run logs outside its flow run (the servers starting, the preflight) goes to the terminal only.
    os.environ.setdefault("PREFECT_LOGGING_TO_API_WHEN_MISSING_FLOW", "ignore")
    os.environ.setdefault("PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS", "180")
    os.environ.setdefault("PREFECT_SERVER_ANALYTICS_ENABLED", "false")
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s", datefmt="%H:%M:%S")
    for noisy in ("httpx", "alembic", "mlflow"):
        logging.getLogger(noisy).setLevel(logging.WARNING)
    # Filters act on the records of the very logger they are added to, so each logger that reports the
    # exceptions of a run (Prefect's engine and run loggers, MLflow's sqlite store) gets one.
    for reporting in ("prefect.engine", "prefect.task_runs", "prefect.flow_runs", "mlflow.store.db.utils"):
        logging.getLogger(reporting).addFilter(drop_expected_tracebacks)


def build_parser() -> argparse.ArgumentParser:
    """The `sgt` parser: each command's parser comes from its module and names the function that runs it."""
    parser = argparse.ArgumentParser(prog="sgt", description="Scalable sparse graph transformers (Spexphormer).")
    commands = parser.add_subparsers(dest="command", required=True)
    for add_parser in (run.add_parser, tune.add_parser, results.add_scores_parser, servers.add_ui_parser,
                       servers.add_serve_parser, servers.add_workers_parser, servers.add_ddp_node_parser,
                       stages.add_parser, results.add_report_parser):
        add_parser(commands)
    return parser


def main(argv: list[str] | None = None) -> int:
    from flows.interrupts import terminating_as_interrupts

    args = build_parser().parse_args(argv)
    _configure_environment()
    with terminating_as_interrupts():
        return _command(args)


def program() -> None:
    """`sgt` as a program (its console script, `python -m flows.cli`): `main` on the command line's arguments,
    then exit with its status."""
    status = main()
    # Python's last collection at exit walks every object still alive (Prefect's, MLflow's and pydantic's
    # models: seconds of a run's end); the command has closed its files and runs, so the exit skips them.
    # Not once DuckDB is imported (reading Parquet or CSV tables, `sgt scores`): its bindings (nanobind)
    # report every object of theirs still alive at exit, ~47 lines of "leaked" on stderr, and its module's
    # types sit in reference cycles that only that last collection frees.
    if DUCKDB_BINDINGS not in sys.modules:
        gc.freeze()
    sys.exit(status)


def _command(args: argparse.Namespace) -> int:
    """Runs the chosen command; an expected failure is one `error:` line and status 2, an interrupt one
    `interrupted:` line and status 130."""
    try:
        return args.handler(args)
    except SGTError as error:
        print(f"error: {'; '.join([str(error), *getattr(error, '__notes__', ())])}", file=sys.stderr)
        return 2
    except Exception as error:
        described = describe_environment_error(error, getattr(args, "overrides", []))
        if described is None:
            raise  # a bug: keep the traceback
        print(f"error: {described}", file=sys.stderr)
        return 2
    except BaseException as error:
        from flows.interrupts import EXIT_STATUS, interruption_line, is_interrupt

        if not is_interrupt(error):
            raise
        print(interruption_line(error), file=sys.stderr)
        return EXIT_STATUS
