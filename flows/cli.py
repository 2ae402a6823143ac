"""The `sgt` command: run the pipeline and inspect its attention scores."""

from __future__ import annotations

import argparse
import logging
import os
import sys
from pathlib import Path

from sgt_core.errors import SGTError

RUN_HELP = """\
Runs preprocess -> estimate -> export -> train as a Prefect flow tracked in MLflow.
Arguments are Hydra overrides, for example:
  sgt run                                   # default: generated Minesweeper grid
  sgt run dataset=npz dataset.path=../shared/datasets/tolokers.npz
  sgt run train.epochs=50 model.hidden=64   # changes only the train stage's key
  sgt run stage=train                       # re-run train (and later stages) from cached upstream
"""

SCORES_HELP = """\
Prints, through DuckDB over the exported Parquet files, the attention mass per edge type and the mean
per-node entropy of every layer. Overrides select the run (the export artifact of that config);
--path points at a scores folder directly.
"""


def _configure_environment() -> None:
    # Must happen before Prefect is imported: it reads its settings at import time.
    os.environ.setdefault("PREFECT_LOGGING_EXTRA_LOGGERS", "sgt_core,sgt")
    os.environ.setdefault("PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS", "180")
    os.environ.setdefault("PREFECT_SERVER_ANALYTICS_ENABLED", "false")
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s", datefmt="%H:%M:%S")
    for noisy in ("httpx", "alembic", "mlflow"):
        logging.getLogger(noisy).setLevel(logging.WARNING)


def preflight(overrides: list[str]) -> dict:
    """Checks the config and the dataset before any stage runs or any run is recorded."""
    from sgt_core.artifacts import ArtifactStore
    from sgt_core.config import compose_config
    from sgt_core.data import load_dataset
    from sgt_core.pipeline import stage_keys

    cfg = compose_config(overrides)
    keys = stage_keys(cfg)
    store = ArtifactStore(cfg["paths"]["artifacts"])
    if cfg["stage"] in ("all", "preprocess") and not (
        cfg["stage"] == "all" and store.is_complete("preprocess", keys["preprocess"])
    ):
        load_dataset(cfg["dataset"], seed=cfg["seed"])  # raises DatasetError naming the file and problem
    return cfg


def command_run(overrides: list[str]) -> int:
    preflight(overrides)
    from flows.pipeline import sgt_pipeline

    result = sgt_pipeline(overrides)
    print("\nstages:")
    for name, stage in result["stages"].items():
        print(f"  {name:<10} {'cached' if stage['cache_hit'] else 'ran':<7} {stage['path']}")
    print("metrics:")
    for name, value in result["metrics"].items():
        print(f"  {name} = {value:.4f}")
    print(f"mlflow run {result['run_id']} in {result['tracking_uri']}")
    return 0


def command_scores(overrides: list[str], path: str | None) -> int:
    from sgt_core.artifacts import ArtifactStore
    from sgt_core.config import compose_config
    from sgt_core.export.scores import SCORES_DIR
    from sgt_core.export.summary import format_summary, summarise_scores
    from sgt_core.pipeline import stage_keys

    if path is None:
        cfg = compose_config(overrides)
        key = stage_keys(cfg)["export"]
        store = ArtifactStore(cfg["paths"]["artifacts"])
        if not store.is_complete("export", key):
            raise SGTError(f"no exported scores for this configuration (export key {key}); run `sgt run` first")
        scores_dir = store.path("export", key) / SCORES_DIR
    else:
        scores_dir = Path(path)
        if not any(scores_dir.glob("layer_*.parquet")):
            raise SGTError(f"{scores_dir}: no layer_*.parquet files")
    print(f"attention scores in {scores_dir}\n")
    print(format_summary(summarise_scores(scores_dir)))
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="sgt", description="Scalable sparse graph transformers (Spexphormer).")
    commands = parser.add_subparsers(dest="command", required=True)
    run = commands.add_parser("run", help="run the pipeline", description=RUN_HELP,
                              formatter_class=argparse.RawDescriptionHelpFormatter)
    run.add_argument("overrides", nargs="*", help="Hydra overrides, key=value")
    scores = commands.add_parser("scores", help="summarise exported attention scores", description=SCORES_HELP,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    scores.add_argument("overrides", nargs="*", help="Hydra overrides selecting the run")
    scores.add_argument("--path", help="a folder of layer_*.parquet files instead")
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    _configure_environment()
    try:
        if args.command == "run":
            return command_run(args.overrides)
        return command_scores(args.overrides, args.path)
    except SGTError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
