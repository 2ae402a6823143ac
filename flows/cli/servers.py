"""`sgt ui`, `sgt serve`, `sgt workers` and `sgt ddp-node`: the long-running processes, each until Ctrl-C."""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from sgt_core.errors import SGTError

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
`prefect deployment run sgt-run/sgt` until Ctrl-C. With --pools, also registers the stage deployments
sgt-stage/<stage>@<pool> that runs with orchestration=pools send each stage to (pools from
conf/orchestration/pools.yaml and the overrides; `sgt workers` runs them, and they show Not Ready until
one does), and UI runs default to orchestration=pools. Needs a Prefect server (`make ui`). Examples:
  sgt serve                                 # the server of `make ui`, or $PREFECT_API_URL
  sgt serve --api-url http://127.0.0.1:4300/api
  sgt serve --pools                         # stage deployments on sgt-cpu and sgt-gpu, UI runs use them
  sgt serve --pools orchestration.pools.train=sgt-cpu   # ... with train on sgt-cpu
"""


WORKERS_HELP = """\
Starts one Prefect process worker per work pool (named <pool>@<host>) that runs the stages a run with
orchestration=pools sends there, until Ctrl-C. Without --pool: every pool of conf/orchestration/pools.yaml
(with the overrides), by default sgt-cpu (preprocess, estimate, export) and sgt-gpu (train).
On another machine: install SGT there (or use the sgt:cpu / sgt:cuda image), then point the worker at the
same Prefect server; stages reach the same MLflow store and artifacts through the locations the run sends
(an MLflow tracking server, and a shared file system or an s3:// artifacts URL; see docs/operations/work-pools.md). Examples:
  sgt workers                               # sgt-cpu and sgt-gpu here, on the server of `make ui`
  sgt workers --pool sgt-cpu --api-url http://127.0.0.1:4300/api
  PREFECT_API_URL=http://head-node:4200/api sgt workers --pool sgt-gpu   # on the GPU machine
"""


DDP_NODE_HELP = """\
Runs as a further node of multi-node DDP training (train.distributed.nnodes > 1): waits for train stages
whose rendezvous endpoint is --rdzv-endpoint to appear under <paths.artifacts>/train, which must be the
same shared file system at the same path as on the stage's node, and runs torchrun for each as one of its
nodes (the same command the stage logs), until Ctrl-C. Needs this checkout and environment at the same
path as the stage's node. Examples:
  sgt ddp-node --rdzv-endpoint 10.0.0.1:29400 paths.artifacts=/shared/sgt
  sgt ddp-node --rdzv-endpoint 10.0.0.1:29400 --once   # one run, then exit with torchrun's status
"""


def add_ui_parser(commands) -> None:
    """`sgt ui [--prefect-port N] [--mlflow-port N] OVERRIDES`."""
    from flows.ui import DEFAULT_MLFLOW_PORT, DEFAULT_PREFECT_PORT

    ui = commands.add_parser("ui", help="start the Prefect and MLflow UIs", description=UI_HELP,
                             formatter_class=argparse.RawDescriptionHelpFormatter)
    ui.add_argument("--prefect-port", type=int, default=DEFAULT_PREFECT_PORT, help="Prefect server port")
    ui.add_argument("--mlflow-port", type=int, default=DEFAULT_MLFLOW_PORT, help="MLflow UI port")
    ui.add_argument("overrides", nargs="*", help="Hydra overrides locating the MLflow store")
    ui.set_defaults(handler=lambda args: command_ui(args.overrides, args.prefect_port, args.mlflow_port))


def add_serve_parser(commands) -> None:
    """`sgt serve [--api-url URL] [--pools] OVERRIDES`."""
    serve = commands.add_parser("serve", help="serve the pipeline as a Prefect deployment", description=SERVE_HELP,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    serve.add_argument("--api-url", help="Prefect API (default $PREFECT_API_URL, else http://127.0.0.1:4200/api)")
    serve.add_argument("--pools", action="store_true",
                       help="runs started from the UI default to orchestration=pools (and the overrides)")
    serve.add_argument("overrides", nargs="*",
                       help="with --pools: Hydra overrides choosing the stages' pools (orchestration.pools.*)")
    serve.set_defaults(handler=lambda args: command_serve(args.api_url, args.overrides, args.pools))


def add_workers_parser(commands) -> None:
    """`sgt workers [--pool POOL]... [--api-url URL] [--name NAME] OVERRIDES`."""
    workers = commands.add_parser("workers", help="start Prefect workers for the stages' work pools",
                                  description=WORKERS_HELP, formatter_class=argparse.RawDescriptionHelpFormatter)
    workers.add_argument("--pool", action="append", help="a work pool to serve (repeatable); default: all of the config")
    workers.add_argument("--api-url", help="Prefect API (default $PREFECT_API_URL, else http://127.0.0.1:4200/api)")
    workers.add_argument("--name", help="the worker's name (one --pool only); default <pool>@<host>")
    workers.add_argument("overrides", nargs="*", help="Hydra overrides choosing the pools (orchestration.pools.*)")
    workers.set_defaults(handler=lambda args: command_workers(args.pool, args.api_url, args.name, args.overrides))


def add_ddp_node_parser(commands) -> None:
    """`sgt ddp-node --rdzv-endpoint HOST:PORT [--once] OVERRIDES`."""
    ddp_node = commands.add_parser("ddp-node", help="join multi-node DDP training runs as a further node",
                                   description=DDP_NODE_HELP, formatter_class=argparse.RawDescriptionHelpFormatter)
    ddp_node.add_argument("--rdzv-endpoint", required=True, help="host:port, train.distributed.rdzv_endpoint of the runs")
    ddp_node.add_argument("--once", action="store_true", help="join one run, then exit with torchrun's status")
    ddp_node.add_argument("overrides", nargs="*", help="Hydra overrides locating the artifacts (paths.artifacts)")
    ddp_node.set_defaults(handler=lambda args: command_ddp_node(args.rdzv_endpoint, args.once, args.overrides))


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
