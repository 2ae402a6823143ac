"""The `sgt` command: run the pipeline, inspect its stages and runs, and summarise attention scores."""

from __future__ import annotations

import argparse
import logging
import os
import sys
from collections.abc import Iterator
from contextlib import contextmanager
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

SCORES_HELP = """\
Prints, through DuckDB over the exported Parquet files, the attention mass per edge type and the mean
per-node entropy of every layer. Overrides select the run (the export artifact of that config);
--path points at a scores folder directly. Examples:
  sgt scores                                # scores of the default configuration
  sgt scores estimator.epochs=50            # scores of another (already run) configuration
  sgt scores --path artifacts/export/<key>/attention_scores
"""

STAGES_HELP = """\
Lists the stages of the configuration the overrides compose: each stage's cache key, whether a complete
artifact with that key exists (`sgt run` would reuse it) and its folder with the main files in it.
Runs nothing and writes nothing. Examples:
  sgt stages                                # the default configuration
  sgt stages train.epochs=50                # only train's key changes: only train shows "no"
  sgt stages dataset=npz dataset.path=../shared/datasets/tolokers.npz --json
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

UI_HELP = """\
Starts a local Prefect server (UI and API) and the MLflow UI over the configuration's tracking store
(mlflow.tracking_uri, else $MLFLOW_TRACKING_URI, else <paths.artifacts>/mlflow.db), both on 127.0.0.1;
Ctrl-C stops both. Examples:
  sgt ui                                    # Prefect on :4200, MLflow on :5000
  sgt ui --prefect-port 4300 --mlflow-port 5050 paths.artifacts=/data/sgt
"""

SERVE_HELP = """\
Registers the pipeline as the Prefect deployment sgt-run/sgt, with the parameters dataset, preset and
overrides (Hydra overrides as for `sgt run`), and runs the flow runs started from the Prefect UI or with
`prefect deployment run sgt-run/sgt` until Ctrl-C. Also registers the stage deployments
sgt-stage/<stage>@<pool> that runs with orchestration=pools send each stage to (pools from
conf/orchestration/pools.yaml and the overrides; `sgt workers` runs them). Needs a Prefect server
(`make ui`). Examples:
  sgt serve                                 # the server of `make ui`, or $PREFECT_API_URL
  sgt serve --api-url http://127.0.0.1:4300/api
  sgt serve orchestration.pools.train=gpu-a100   # train's deployment on another pool
  sgt serve --pools orchestration.pools.train=sgt-cpu   # UI runs default to pools, train on sgt-cpu
"""

WORKERS_HELP = """\
Starts one Prefect process worker per work pool (named <pool>@<host>) that runs the stages a run with
orchestration=pools sends there, until Ctrl-C. Without --pool: every pool of conf/orchestration/pools.yaml
(with the overrides), by default sgt-cpu (preprocess, estimate, export) and sgt-gpu (train).
On another machine: install SGT there (or use the sgt:cpu / sgt:cuda image), then point the worker at the
same Prefect server; stages reach the same MLflow store and artifacts through the locations the run sends
(an MLflow tracking server, and a shared file system or an s3:// artifacts URL; see the README). Examples:
  sgt workers                               # sgt-cpu and sgt-gpu here, on the server of `make ui`
  sgt workers --pool sgt-cpu --api-url http://127.0.0.1:4300/api
  PREFECT_API_URL=http://head-node:4200/api sgt workers --pool sgt-gpu   # on the GPU machine
"""


def _configure_environment() -> None:
    # Must happen before Prefect is imported: it reads its settings at import time.
    os.environ.setdefault("PREFECT_LOGGING_EXTRA_LOGGERS", "sgt_core,sgt")
    os.environ.setdefault("PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS", "180")
    os.environ.setdefault("PREFECT_SERVER_ANALYTICS_ENABLED", "false")
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s", datefmt="%H:%M:%S")
    for noisy in ("httpx", "alembic", "mlflow"):
        logging.getLogger(noisy).setLevel(logging.WARNING)
    # Filters act on the records of the very logger they are added to, so each logger that reports the
    # exceptions of a run (Prefect's engine and run loggers, MLflow's sqlite store) gets one.
    for reporting in ("prefect.engine", "prefect.task_runs", "prefect.flow_runs", "mlflow.store.db.utils"):
        logging.getLogger(reporting).addFilter(_drop_expected_tracebacks)


# Prefect's words for a run it records as crashed because it was interrupted (Ctrl-C, SIGTERM).
INTERRUPTED_BY = ("aborted by an interrupt signal", "aborted by a termination signal", "TerminationSignal")


def _drop_expected_tracebacks(record: logging.LogRecord) -> bool:
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
        isinstance(cause, sys.modules["optuna"].TrialPruned) for cause in _causes(error))


def _is_expected(error: BaseException) -> bool:
    import sqlite3

    return any(isinstance(cause, (SGTError, sqlite3.Error)) or (isinstance(cause, OSError) and cause.errno is not None)
               for cause in _causes(error))


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
    from flows.preflight import check_run, check_start, fully_cached
    from sgt_core.config import compose_config

    runs = expand_sweeps(overrides) if multirun else [overrides]
    configs = [compose_config(run_overrides) for run_overrides in runs]  # a bad one fails before any server
    for cfg in configs:  # the artifacts folder and the input files: seconds, no torch and no Prefect yet
        check_start(cfg)
    # Prefect's server starts now (seconds), while the runs are checked and the flow's modules imported.
    server = start_prefect_server(configs[0])
    with stopped_on_failure(server):
        for cfg in configs:  # all checked before the first run
            check_run(cfg)
        if any(cfg["orchestration"]["mode"] == "pools" for cfg in configs) and not _prefect_api_url_set():
            # A temporary Prefect server would have no workers: every stage would wait for one in vain.
            raise SGTError("orchestration=pools: needs a Prefect server that the pools' workers use; set "
                           "PREFECT_API_URL (e.g. http://127.0.0.1:4200/api after `make ui`) and start `sgt workers`")
        if any(cfg["stage_isolation"] == "process" and not fully_cached(cfg) for cfg in configs):
            from flows.isolation import warm_up

            warm_up()  # the stages' process server starts while Prefect's does
        from flows.pipeline import sgt_pipeline
        from flows.report import format_metric

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
    configured). A temporary one is stopped when this process exits, after Prefect has sent what it holds
    (its services drain at threading's exit, before atexit's hooks run): whatever ended the run, its end is
    recorded first."""
    if cfg["orchestration"]["mode"] != "local":
        return None
    import atexit

    from flows.prefect_server import choose_prefect_server

    server = choose_prefect_server(cfg["orchestration"]["prefect_server"])
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


def command_scores(overrides: list[str], path: str | None) -> int:
    from sgt_core.artifacts import open_store
    from sgt_core.config import compose_config
    from sgt_core.export.outputs import SCORES_DIR
    from sgt_core.export.summary import format_summary, summarise_scores
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


def stage_files() -> dict[str, tuple[str, ...]]:
    """Each stage's main outputs inside its artifact folder, as glob patterns."""
    from sgt_core.estimate.outputs import ESTIMATOR_FILE, SCORES_FILE
    from sgt_core.export.outputs import SCORES_DIR
    from sgt_core.preprocess.outputs import INTERACTION_GRAPH_FILE
    from sgt_core.preprocess.substructure_tokens import SUBSTRUCTURES_FILE
    from sgt_core.train.outputs import MODEL_FILE

    return {
        "preprocess": (INTERACTION_GRAPH_FILE, SUBSTRUCTURES_FILE),
        "estimate": (SCORES_FILE, ESTIMATOR_FILE),
        "export": (f"{SCORES_DIR}/layer_*.parquet",),
        "train": (MODEL_FILE,),
    }


def command_stages(overrides: list[str], as_json: bool, verify: bool = False) -> int:
    import json

    from sgt_core.artifacts import open_store
    from sgt_core.config import compose_config
    from sgt_core.pipeline import stage_keys

    cfg = compose_config(overrides)
    store = open_store(cfg["paths"]["artifacts"])
    main_files = stage_files()
    stages = [{"stage": name, **cache_entry(store, name, key, main_files[name], verify)}
              for name, key in stage_keys(cfg).items()]
    rows = propagation_entry(cfg, store, stages[0], verify)
    if as_json:
        print(json.dumps({"artifacts": store.location(), "checksums_verified": verify, "stages": stages,
                          "propagation_rows": rows}, indent=2))
        return 0
    print(f"configuration: {' '.join(overrides) or '(defaults)'}\nartifacts: {store.location()}")
    print(f"checked: file sizes{' and checksums' if verify else ' (--verify also checks checksums)'}\n")
    print(f"{'stage':<11} {'key':<17} {'cached':<8} folder")
    for stage in stages:
        state = "yes" if stage["cached"] else "damaged" if stage["damage"] else "no"
        print(f"{stage['stage']:<11} {stage['key']:<17} {state:<8} {stage['path']}")
        if stage["damage"]:
            print(f"{'':<38} {stage['damage']}: the next `sgt run` moves it aside and recomputes")
        for file in stage["files"]:
            print(f"{'':<38} {file.removeprefix(stage['path'] + '/')}")
    if rows is not None:
        state = "yes" if rows["cached"] else "damaged" if rows["damage"] else "no"
        print("\nthe train stage's top-k propagation rows (model.local_top_k): "
              + (f"key {rows['key']}, cached {state}, {rows['path']}" if rows["key"] else rows["unknown"]))
    return 0


def cache_entry(store, folder: str, key: str, patterns: tuple[str, ...], verify: bool) -> dict:
    """A result in the store, as `sgt stages` lists it: key, cached, damage, path and its files matching `patterns`.

    Read only: `sgt run` moves a damaged folder aside. An object store's result is listed from its manifest,
    nothing downloaded.
    """
    from fnmatch import fnmatch

    from sgt_core.artifacts import ObjectArtifactStore

    damage = store.damage(folder, key, checksums=verify)
    if isinstance(store, ObjectArtifactStore):
        path = store.location(folder, key)
        manifest = store.remote_manifest(folder, key) if damage is None else None
        cached = manifest is not None
        files = sorted(f"{path}/{file}" for file in (manifest or {}).get("files", {})
                       if any(fnmatch(file, pattern) for pattern in patterns))
    else:
        local = store.path(folder, key).resolve()
        path, cached = str(local), local.exists() and damage is None
        files = sorted(str(p) for pattern in patterns for p in local.glob(pattern)) if cached else []
    return {"key": key, "cached": cached, "damage": damage, "path": path, "files": files}


def propagation_entry(cfg: dict, store, preprocess: dict, verify: bool) -> dict | None:
    """Where the train stage keeps its top-k propagation rows, and whether they are there; None without them.

    Their key hashes the graph's edges, so it is known once the preprocess stage's result is here to read.
    """
    from sgt_core.artifacts import ObjectArtifactStore
    from sgt_core.preprocess.interaction_graph import InteractionGraph
    from sgt_core.preprocess.outputs import INTERACTION_GRAPH_FILE
    from sgt_core.train.propagation_rows import PROPAGATION, ROWS_FILE, propagation_key

    if cfg["model"]["local_top_k"] is None:
        return None
    entry = {"key": None, "cached": False, "damage": None, "path": None, "files": []}
    if not preprocess["cached"]:
        return {**entry, "unknown": "their key is known once the preprocess stage's result is cached"}
    if isinstance(store, ObjectArtifactStore):
        return {**entry, "unknown": "their key is not shown: `sgt stages` does not download the interaction graph"}
    graph = InteractionGraph.load(Path(preprocess["path"]) / INTERACTION_GRAPH_FILE, compact=True)
    return cache_entry(store, PROPAGATION, propagation_key(cfg, graph), (ROWS_FILE,), verify)


def command_report(overrides: list[str], run_id: str | None, as_json: bool) -> int:
    import json

    from flows.report import find_pipeline_run, format_report, pipeline_report

    client, run = find_pipeline_run(overrides, run_id)
    report = pipeline_report(client, run)
    print(json.dumps(report, indent=2) if as_json else format_report(report))
    return 0


def command_ui(overrides: list[str], prefect_port: int, mlflow_port: int) -> int:
    from flows.locations import tracking_uri
    from flows.ui import serve_ui
    from sgt_core.config import compose_config

    serve_ui(prefect_port, mlflow_port, tracking_uri(compose_config(overrides)))
    return 0


def _use_prefect_api(api_url: str | None) -> str:
    """Points this process at the Prefect API (`--api-url`, else $PREFECT_API_URL, else `make ui`'s); checks it answers."""
    from flows.ui import DEFAULT_PREFECT_PORT, prefect_api_url, require_prefect_api

    # Set before Prefect is imported: it reads its settings at import time.
    os.environ["PREFECT_API_URL"] = (
        api_url or os.environ.get("PREFECT_API_URL") or prefect_api_url(DEFAULT_PREFECT_PORT)
    )
    require_prefect_api(os.environ["PREFECT_API_URL"])
    return os.environ["PREFECT_API_URL"]


def command_serve(api_url: str | None, overrides: list[str] | None = None, pools: bool = False) -> int:
    from sgt_core.config import compose_config

    compose_config(["orchestration=pools", *(overrides or [])])  # bad overrides fail before anything starts
    _use_prefect_api(api_url)
    from flows.serve import serve

    serve(overrides, pools)
    return 0


def command_workers(pools: list[str] | None, api_url: str | None, name: str | None, overrides: list[str]) -> int:
    from flows.workers import run_workers
    from sgt_core.config import POOL_NAME, compose_config

    if not pools:
        cfg = compose_config(["orchestration=pools", *overrides])
        pools = sorted(set(cfg["orchestration"]["pools"].values()))
    bad = [pool for pool in pools if not POOL_NAME.fullmatch(pool)]
    if bad:
        raise SGTError(f"--pool {bad[0]}: not a work pool name (letters, digits, '_', '.', '-')")
    if name is not None and len(pools) > 1:
        raise SGTError("--name: names one worker; give a single --pool with it")
    run_workers(pools, _use_prefect_api(api_url), name)
    return 0

DDP_NODE_HELP = """\
Runs as a further node of multi-node DDP training (train.distributed.nnodes > 1): waits for train stages
whose rendezvous endpoint is --rdzv-endpoint to appear under <paths.artifacts>/train, which must be the
same shared file system at the same path as on the stage's node, and runs torchrun for each as one of its
nodes (the same command the stage logs), until Ctrl-C. Needs this checkout and environment at the same
path as the stage's node. Examples:
  sgt ddp-node --rdzv-endpoint 10.0.0.1:29400 paths.artifacts=/shared/sgt
  sgt ddp-node --rdzv-endpoint 10.0.0.1:29400 --once   # one run, then exit with torchrun's status
"""


def command_ddp_node(endpoint: str, once: bool, overrides: list[str]) -> int:
    from sgt_core.artifacts import is_url
    from sgt_core.config import compose_config
    from sgt_core.train.distributed import join_launches

    artifacts = compose_config(overrides)["paths"]["artifacts"]
    if is_url(artifacts):
        raise SGTError(f"paths.artifacts={artifacts}: multi-node training needs the artifacts on a shared file "
                       "system at the same path on every node, not an object store")
    train_dir = Path(artifacts).resolve() / "train"
    print(f"waiting for train stages at {endpoint} under {train_dir} (Ctrl-C stops)", file=sys.stderr)
    try:
        return join_launches(train_dir, endpoint, once=once)
    except KeyboardInterrupt:
        return 130


def build_parser() -> argparse.ArgumentParser:
    from flows.ui import DEFAULT_MLFLOW_PORT, DEFAULT_PREFECT_PORT

    parser = argparse.ArgumentParser(prog="sgt", description="Scalable sparse graph transformers (Spexphormer).")
    commands = parser.add_subparsers(dest="command", required=True)
    run = commands.add_parser("run", help="run the pipeline", description=RUN_HELP,
                              formatter_class=argparse.RawDescriptionHelpFormatter)
    run.add_argument("-m", "--multirun", action="store_true",
                     help="sweep: comma-separated values run once each (e.g. seed=0,1,2,3,4)")
    run.add_argument("overrides", nargs="*", help="Hydra overrides, key=value")
    tune = commands.add_parser("tune", help="search hyper-parameters with Optuna, tracked in MLflow",
                               description=TUNE_HELP, formatter_class=argparse.RawDescriptionHelpFormatter)
    tune.add_argument("overrides", nargs="*", help="Hydra overrides, key=value (tune.* configure the search)")
    scores = commands.add_parser("scores", help="summarise exported attention scores", description=SCORES_HELP,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    scores.add_argument("overrides", nargs="*", help="Hydra overrides selecting the run")
    scores.add_argument("--path", help="a folder of layer_*.parquet files instead")
    ui = commands.add_parser("ui", help="start the Prefect and MLflow UIs", description=UI_HELP,
                             formatter_class=argparse.RawDescriptionHelpFormatter)
    ui.add_argument("--prefect-port", type=int, default=DEFAULT_PREFECT_PORT, help="Prefect server port")
    ui.add_argument("--mlflow-port", type=int, default=DEFAULT_MLFLOW_PORT, help="MLflow UI port")
    ui.add_argument("overrides", nargs="*", help="Hydra overrides locating the MLflow store")
    serve = commands.add_parser("serve", help="serve the pipeline as a Prefect deployment", description=SERVE_HELP,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    serve.add_argument("--api-url", help="Prefect API (default $PREFECT_API_URL, else http://127.0.0.1:4200/api)")
    serve.add_argument("--pools", action="store_true",
                       help="runs started from the UI default to orchestration=pools (and the overrides)")
    serve.add_argument("overrides", nargs="*", help="Hydra overrides choosing the stages' pools (orchestration.pools.*)")
    workers = commands.add_parser("workers", help="start Prefect workers for the stages' work pools",
                                  description=WORKERS_HELP, formatter_class=argparse.RawDescriptionHelpFormatter)
    workers.add_argument("--pool", action="append", help="a work pool to serve (repeatable); default: all of the config")
    workers.add_argument("--api-url", help="Prefect API (default $PREFECT_API_URL, else http://127.0.0.1:4200/api)")
    workers.add_argument("--name", help="the worker's name (one --pool only); default <pool>@<host>")
    workers.add_argument("overrides", nargs="*", help="Hydra overrides choosing the pools (orchestration.pools.*)")
    ddp_node = commands.add_parser("ddp-node", help="join multi-node DDP training runs as a further node",
                                   description=DDP_NODE_HELP, formatter_class=argparse.RawDescriptionHelpFormatter)
    ddp_node.add_argument("--rdzv-endpoint", required=True, help="host:port, train.distributed.rdzv_endpoint of the runs")
    ddp_node.add_argument("--once", action="store_true", help="join one run, then exit with torchrun's status")
    ddp_node.add_argument("overrides", nargs="*", help="Hydra overrides locating the artifacts (paths.artifacts)")
    stages = commands.add_parser("stages", help="list stages, cache keys, cache state and artifact paths",
                                 description=STAGES_HELP, formatter_class=argparse.RawDescriptionHelpFormatter)
    stages.add_argument("overrides", nargs="*", help="Hydra overrides, key=value")
    stages.add_argument("--json", action="store_true", help="print JSON instead of a table")
    stages.add_argument("--verify", action="store_true",
                        help="also verify every file's checksum against its stage's manifest (reads every file)")
    report = commands.add_parser("report", help="report the latest (or a given) pipeline run from MLflow",
                                 description=REPORT_HELP, formatter_class=argparse.RawDescriptionHelpFormatter)
    report.add_argument("overrides", nargs="*", help="Hydra overrides selecting the store and the configuration")
    report.add_argument("--run-id", help="report this MLflow run (a pipeline run or one of its stages' runs)")
    report.add_argument("--json", action="store_true", help="print JSON instead of text")
    return parser


def main(argv: list[str] | None = None) -> int:
    from flows.interrupts import terminating_as_interrupts

    args = build_parser().parse_args(argv)
    _configure_environment()
    with terminating_as_interrupts():
        return _command(args)


def _command(args: argparse.Namespace) -> int:
    """Runs the chosen command; an expected failure is one `error:` line and status 2, an interrupt one
    `interrupted:` line and status 130."""
    try:
        if args.command == "ui":
            return command_ui(args.overrides, args.prefect_port, args.mlflow_port)
        if args.command == "serve":
            return command_serve(args.api_url, args.overrides, args.pools)
        if args.command == "workers":
            return command_workers(args.pool, args.api_url, args.name, args.overrides)
        if args.command == "ddp-node":
            return command_ddp_node(args.rdzv_endpoint, args.once, args.overrides)
        if args.command == "run":
            return command_run(args.overrides, args.multirun)
        if args.command == "tune":
            return command_tune(args.overrides)
        if args.command == "stages":
            return command_stages(args.overrides, args.json, args.verify)
        if args.command == "report":
            return command_report(args.overrides, args.run_id, args.json)
        return command_scores(args.overrides, args.path)
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


def _causes(error: BaseException) -> list[BaseException]:
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
    for cause in _causes(error):
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


if __name__ == "__main__":
    sys.exit(main())
