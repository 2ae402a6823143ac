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
  sgt run -m seed=0,1,2,3,4                 # one run per value (Hydra sweep syntax), then mean ± std
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


def expand_sweeps(overrides: list[str]) -> list[list[str]]:
    """Hydra sweep syntax (`seed=0,1,2`, `train.sampler=reservoir,uniform`) -> one override list per run."""
    from hydra.core.override_parser.overrides_parser import OverridesParser

    from sgt_core.errors import ConfigError

    try:
        parsed = OverridesParser.create().parse_overrides(overrides)
    except Exception as error:  # Hydra's parser raises its own exception types
        raise ConfigError(f"configuration: {error}") from None
    runs: list[list[str]] = [[]]
    for override in parsed:
        if override.is_sweep_override():
            values = [f"{override.get_key_element()}={value}" for value in override.sweep_string_iterator()]
            runs = [run + [value] for run in runs for value in values]
        else:
            runs = [run + [override.input_line] for run in runs]
    return runs


def command_run(overrides: list[str], multirun: bool = False) -> int:
    runs = expand_sweeps(overrides) if multirun else [overrides]
    for run_overrides in runs:  # every configuration is checked before the first run starts
        preflight(run_overrides)
    from flows.pipeline import sgt_pipeline

    results = []
    for run_overrides in runs:
        result = sgt_pipeline(run_overrides)
        results.append((run_overrides, result))
        print(f"\n{' '.join(run_overrides) or '(defaults)'}\nstages:")
        for name, stage in result["stages"].items():
            print(f"  {name:<10} {'cached' if stage['cache_hit'] else 'ran':<7} {stage['path']}")
        print("metrics:")
        for name, value in result["metrics"].items():
            print(f"  {name} = {value:.4f}")
        print(f"mlflow run {result['run_id']} in {result['tracking_uri']}")
    if multirun:
        print_sweep_summary(results)
    return 0


def print_sweep_summary(results: list[tuple[list[str], dict]]) -> None:
    """Mean ± std of every metric over the seeds of each otherwise-identical configuration."""
    import statistics

    groups: dict[str, list[dict]] = {}
    for overrides, result in results:
        others = " ".join(o for o in overrides if not o.startswith("seed=")) or "(defaults)"
        groups.setdefault(others, []).append(result["metrics"])
    print("\nsummary over seeds (mean ± std):")
    for others, metrics in groups.items():
        print(f"  {others}  [{len(metrics)} runs]")
        for name in metrics[0]:
            values = [m[name] for m in metrics]
            spread = statistics.stdev(values) if len(values) > 1 else 0.0
            print(f"    {name} = {statistics.mean(values):.4f} ± {spread:.4f}")


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
    run.add_argument("-m", "--multirun", action="store_true",
                     help="sweep: comma-separated values run once each (e.g. seed=0,1,2,3,4)")
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
            return command_run(args.overrides, args.multirun)
        return command_scores(args.overrides, args.path)
    except SGTError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
