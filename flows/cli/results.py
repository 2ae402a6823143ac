"""`sgt scores` and `sgt report`: what a finished run left, from its exported scores and from MLflow."""

from __future__ import annotations

import argparse
from pathlib import Path

from sgt_core.errors import SGTError

SCORES_HELP = """\
Prints, through DuckDB over the exported Parquet files, the attention mass per edge type and the mean
per-node entropy of every layer. Overrides select the run (the export artifact of that config);
--path points at a scores folder directly. Examples:
  sgt scores                                # scores of the default configuration
  sgt scores estimator.epochs=50            # scores of another (already run) configuration
  sgt scores --path artifacts/export/<key>/attention_scores
"""


REPORT_HELP = """\
Reports a recorded pipeline run from the MLflow store the configuration points at (mlflow.tracking_uri,
else $MLFLOW_TRACKING_URI, else <paths.artifacts>/mlflow.db): its config, val_/test_ metrics, each stage's
state (ran, cached, failed, killed, running, missing) and time, and the artifact folders. Without
overrides: the newest run of any configuration; with overrides: the newest run of that configuration
(paths.*, mlflow.* and stage only locate the store).
Examples:
  sgt report                                # newest run in artifacts/mlflow.db
  sgt report optimizer.lr=0.02              # newest run of that configuration
  sgt report --run-id 3f2a...               # one run by its MLflow run id
  sgt report paths.artifacts=/data/sgt --json
"""


def add_scores_parser(commands) -> None:
    """`sgt scores [--path FOLDER] OVERRIDES`."""
    scores = commands.add_parser("scores", help="summarise exported attention scores", description=SCORES_HELP,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    scores.add_argument("overrides", nargs="*", help="Hydra overrides selecting the run")
    scores.add_argument("--path", help="a folder of layer_*.parquet files instead")
    scores.set_defaults(handler=lambda args: command_scores(args.overrides, args.path))


def add_report_parser(commands) -> None:
    """`sgt report [--run-id ID] [--json] OVERRIDES`."""
    report = commands.add_parser("report", help="report the latest (or a given) pipeline run from MLflow",
                                 description=REPORT_HELP, formatter_class=argparse.RawDescriptionHelpFormatter)
    report.add_argument("overrides", nargs="*", help="Hydra overrides selecting the store and the configuration")
    report.add_argument("--run-id", help="report this MLflow run (a pipeline run or one of its stages' runs)")
    report.add_argument("--json", action="store_true", help="print JSON instead of text")
    report.set_defaults(handler=lambda args: command_report(args.overrides, args.run_id, args.json))


def command_scores(overrides: list[str], path: str | None) -> int:
    from sgt_core.config import compose_config
    from sgt_core.export.outputs import SCORES_DIR
    from sgt_core.export.summary import format_summary, summarise_scores
    from sgt_core.object_store import open_store
    from sgt_core.pipeline import stage_keys

    if path is None:
        cfg = compose_config(overrides)
        key = stage_keys(cfg)["export"]
        store = open_store(cfg["paths"]["artifacts"])
        damage = store.damage("export", key, checksums=True)  # what is summarised must be what was written
        if damage is not None:
            raise SGTError(f"{store.location('export', key)}: damaged ({damage}); the next `sgt run` moves it aside "
                           "and recomputes")
        if not store.is_complete("export", key):
            raise SGTError(f"no exported scores for this configuration (export key {key}); run `sgt run` first")
        scores_dir = store.local("export", key) / SCORES_DIR
    else:
        scores_dir = Path(path)
        if not any(scores_dir.glob("layer_*.parquet")):
            raise SGTError(f"{scores_dir}: no layer_*.parquet files")
    print(f"attention scores in {scores_dir}\n")
    print(format_summary(summarise_scores(scores_dir)))
    return 0


def command_report(overrides: list[str], run_id: str | None, as_json: bool) -> int:
    import json

    from flows.report import find_pipeline_run, format_report, pipeline_report

    client, run = find_pipeline_run(overrides, run_id)
    report = pipeline_report(client, run)
    print(json.dumps(report, indent=2) if as_json else format_report(report))
    return 0
