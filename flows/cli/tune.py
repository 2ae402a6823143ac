"""`sgt tune`: an Optuna search over the pipeline's options, and its summary."""

from __future__ import annotations

import argparse
from pathlib import Path

from flows.cli.run import start_prefect_server, stopped_on_failure

TUNE_HELP = """\
Searches the space of conf/tune (tune=NAME chooses another file) with Optuna, each trial one pipeline run
with the trial's values added to the overrides. Trials that differ only in training options reuse the
cached preprocess, estimate and export results. A trial whose validation metric trails the earlier ones'
is pruned (stopped) early; its stages run in this process for that (stage_isolation=inline). The study
lives in <paths.artifacts>/tune/<study>.db: the same command resumes it and runs only the trials missing
to reach tune.trials. In MLflow, one tuning run holds the trials' runs, best_config.yaml and
plots/trials.png; tune.preset=NAME writes the best configuration to conf/experiment/NAME.yaml. Examples:
  sgt tune +experiment=minesweeper tune.trials=20
  sgt tune +experiment=cora tune=quick tune.trials=3 tune.preset=cora_tuned
  sgt tune +experiment=cora tune.space.model.dropout.high=0.7   # widen one range
  sgt tune +experiment=cora '~tune.space.model.local'           # leave a key out of the search
"""


def add_parser(commands) -> None:
    """`sgt tune OVERRIDES`."""
    tune = commands.add_parser("tune", help="search hyper-parameters with Optuna, tracked in MLflow",
                               description=TUNE_HELP, formatter_class=argparse.RawDescriptionHelpFormatter)
    tune.add_argument("overrides", nargs="*", help="Hydra overrides, key=value (tune.* configure the search)")
    tune.set_defaults(handler=lambda args: command_tune(args.overrides))


def command_tune(overrides: list[str]) -> int:
    from flows.preflight import check_run, check_start
    from sgt_core.config import compose_config

    cfg = compose_config(overrides)  # a bad override fails before any server starts
    check_start(cfg)
    # Prefect's server starts now (seconds), while the study is checked and the flow's modules imported.
    server = start_prefect_server(cfg)
    with stopped_on_failure(server):
        from flows.tune import check_tuning, sgt_tune

        check_tuning(cfg)
        check_run(cfg)
        if server is not None:
            server.ready()
    summary = sgt_tune(overrides)
    print_tuning_summary(summary)
    return 0


def print_tuning_summary(summary: dict) -> None:
    """Every trial's state, value and overrides, then the best, the tuning run and the preset."""
    from flows.report import format_metric

    states = [trial["state"] for trial in summary["trials"]]
    counts = ", ".join(f"{states.count(state)} {state}" for state in dict.fromkeys(states))
    print(f"\nstudy {summary['study']} in {summary['storage']}: {counts}")
    for trial in summary["trials"]:
        value = format_metric(trial["value"]) if trial["value"] is not None else "-"
        print(f"  trial {trial['number']:<4} {trial['state']:<9} {value:<8} {' '.join(trial['overrides'])}")
        if trial["error"]:
            print(f"{'':<8}{trial['error']}")
    best = summary["best"]
    if best is None:
        print("no trial completed")
    else:
        print(f"best: trial {best['number']}, {best['metric']} = {format_metric(best['value'])}")
        print(f"  overrides: {' '.join(best['overrides'])}")
    print(f"mlflow tuning run {summary['run_id']} in {summary['tracking_uri']}")
    if summary["preset"]:
        name = Path(summary["preset"]).stem
        print(f"preset written to {summary['preset']}: sgt run +experiment={name}")
