"""`sgt run`: the pipeline once, or once per value of a sweep with the mean ± std over seeds and folds."""

from __future__ import annotations

import argparse
from collections.abc import Iterator
from contextlib import contextmanager

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


def add_parser(commands) -> None:
    """`sgt run [-m] OVERRIDES`."""
    run = commands.add_parser("run", help="run the pipeline", description=RUN_HELP,
                              formatter_class=argparse.RawDescriptionHelpFormatter)
    run.add_argument("-m", "--multirun", action="store_true",
                     help="sweep: comma-separated values run once each (e.g. seed=0,1,2,3,4)")
    run.add_argument("overrides", nargs="*", help="Hydra overrides, key=value")
    run.set_defaults(handler=lambda args: command_run(args.overrides, args.multirun))


def expand_sweeps(overrides: list[str]) -> list[list[str]]:
    """Hydra sweep syntax (`seed=0,1,2`, `sampler=reservoir,uniform`) -> one override list per run."""
    from hydra.core.override_parser.overrides_parser import OverridesParser
    from hydra.errors import HydraException

    from sgt_core.errors import ConfigError

    try:
        parsed = OverridesParser.create().parse_overrides(overrides)
    except HydraException as error:
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
    from flows.preflight import check_run, check_start
    from sgt_core.config import compose_config

    runs = expand_sweeps(overrides) if multirun else [overrides]
    configs = [compose_config(run_overrides) for run_overrides in runs]  # a bad one fails before any server
    for cfg in configs:  # the artifacts folder and the input files: seconds, no torch and no Prefect yet
        check_start(cfg)
    from flows.isolation import uses_stage_server

    if any(uses_stage_server(cfg) for cfg in configs):
        from flows.isolation import warm_up

        # The stages' process server starts now (seconds): it loads the dataset for check_run and tells the
        # kernel backends for the cache keys, so that this process never imports torch.
        warm_up()
    # Prefect's server starts now (seconds), while the runs are checked and the flow's modules imported.
    server = start_prefect_server(configs[0])
    with stopped_on_failure(server):
        if any(cfg["orchestration"]["mode"] == "pools" for cfg in configs) and not _prefect_api_url_set():
            # A temporary Prefect server would have no workers: every stage would wait for one in vain.
            raise SGTError("orchestration=pools: needs a Prefect server that the pools' workers use; set "
                           "PREFECT_API_URL (e.g. http://127.0.0.1:4200/api after `make ui`) and start `sgt workers`")
        # Prefect and MLflow, while the two servers start
        from flows.pipeline import import_engines_early, sgt_pipeline
        from flows.report import format_metric
        from flows.tracking import open_store_early

        import_engines_early()  # while the runs are checked
        opened = open_store_early(configs[0], new=False)  # an existing store while the runs are checked
        for cfg in configs:  # all checked before the first run
            check_run(cfg)
        if not opened:
            open_store_early(configs[0])  # a new one while Prefect's flow starts
        if server is not None:
            server.ready()

    results = []
    for run_overrides in runs:
        result = sgt_pipeline(run_overrides)
        results.append((run_overrides, result))
        print(f"\n{' '.join(run_overrides) or '(defaults)'}\nstages:")
        for name, stage in result["stages"].items():
            print(f"  {name:<10} {'cached' if stage['cache_hit'] else 'ran':<7} {stage['path']}")
        print("metrics:")
        for name, value in result["metrics"].items():
            print(f"  {name} = {format_metric(value)}")
        for name, text in result["notes"].items():
            print(f"note ({name}): {text}")
        print(f"mlflow run {result['run_id']} in {result['tracking_uri']}")
    if multirun:
        print_sweep_summary(results)
    return 0


def start_prefect_server(cfg: dict):
    """The run's Prefect server, chosen in the background (None with orchestration=pools, which needs one
    configured). The shared one stays; a temporary one is stopped when this process exits, after Prefect has sent what it holds
    (its services drain at threading's exit, before atexit's hooks run): whatever ended the run, its end is
    recorded first."""
    if cfg["orchestration"]["mode"] != "local":
        return None
    import atexit

    from flows.prefect_server import choose_prefect_server

    server = choose_prefect_server(cfg["orchestration"]["prefect_server"],
                                   idle_minutes=cfg["orchestration"]["shared_server_idle_minutes"])
    atexit.register(server.stop)
    return server


@contextmanager
def stopped_on_failure(server) -> Iterator[None]:
    """Stops a starting Prefect server at once when what the block checks fails: nothing waits for it."""
    try:
        yield
    except BaseException:
        if server is not None:
            server.stop()
        raise


def _prefect_api_url_set() -> bool:
    """Whether Prefect talks to a server of its own ($PREFECT_API_URL or the profile), not a temporary one."""
    from prefect.settings import PREFECT_API_URL

    return bool(PREFECT_API_URL.value())


# Overrides a sweep repeats a configuration over: the seeds, and the cross-validation folds (dataset=tu),
# whose mean ± std over the 10 folds is what the TU literature reports.
REPEATED_OVERRIDES = ("seed=", "dataset.fold=")


def print_sweep_summary(results: list[tuple[list[str], dict]]) -> None:
    """Mean ± std of every metric over the seeds (and folds) of each otherwise-identical configuration."""
    import statistics

    groups: dict[str, list[dict]] = {}
    for overrides, result in results:
        others = " ".join(o for o in overrides if not o.startswith(REPEATED_OVERRIDES)) or "(defaults)"
        groups.setdefault(others, []).append(result["metrics"])
    folds = any(o.startswith("dataset.fold=") for overrides, _ in results for o in overrides)
    print(f"\nsummary over {'seeds and folds' if folds else 'seeds'} (mean ± std):")
    for others, metrics in groups.items():
        print(f"  {others}  [{len(metrics)} runs]")
        for name in metrics[0]:
            values = [m[name] for m in metrics if isinstance(m.get(name), (int, float))]
            if not values:
                continue
            spread = statistics.stdev(values) if len(values) > 1 else 0.0
            print(f"    {name} = {statistics.mean(values):.4f} ± {spread:.4f}")
