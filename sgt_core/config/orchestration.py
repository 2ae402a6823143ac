"""The `orchestration` group: where the stages run (conf/orchestration/*.yaml)."""

from __future__ import annotations

import re
from dataclasses import dataclass

from sgt_core.config.section import (
    NULL_OR_POSITIVE_INTEGER,
    POSITIVE,
    Problem,
    Section,
    checked,
    integer,
    one_of,
)

# The pipeline's stages in order, as `stage=...` and `orchestration.pools.<stage>` name them.
STAGE_NAMES = ("preprocess", "estimate", "export", "train")
# A Prefect work pool's name: it also names the stage's deployment, `sgt-stage/<stage>@<pool>`.
POOL_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]*")


@dataclass(frozen=True)
class OrchestrationConfig(Section):
    """`orchestration`: `local` runs every stage in the flow's process; `pools` each on a Prefect work pool.

    Attributes:
        mode: local or pools.
        prefect_server: a server in $PREFECT_API_URL comes first; then `shared` and `find` use `sgt ui`'s
            Prefect server when it answers; then `shared` uses (or starts) the server runs share, which stops
            itself after `shared_server_idle_minutes` unused; `find` and `temporary` start one for the run.
        shared_server_idle_minutes: how long the shared Prefect server stays up without a request.
        pools: with `pools`, each stage's work pool name (flows/pools.py).
        start_timeout_s: with `pools`, seconds a stage's flow run may wait for a worker.
        missed_heartbeats: with `pools`, heartbeat intervals without one before a stage is taken as dead.
        train_malloc_mmap_threshold_kb: glibc's `MALLOC_MMAP_THRESHOLD_` (in KiB) in the train stage's own
            process environment (`sgt_core.pipeline.stage_environment`); null leaves malloc alone. Where the
            stage runs, not what it computes: it enters no cache key.
    """

    PATH = "orchestration"

    mode: str = checked(one_of("local", "pools"))
    prefect_server: str = checked(one_of("shared", "find", "temporary"))
    shared_server_idle_minutes: float = checked(POSITIVE)
    train_malloc_mmap_threshold_kb: int | None = checked(NULL_OR_POSITIVE_INTEGER)
    pools: dict[str, str] | None = None
    start_timeout_s: float | None = None
    missed_heartbeats: int | None = None

    def relation_problems(self) -> list[Problem]:
        """With `pools`: a valid work pool name for every stage and nothing else, and the waiting limits."""
        if self.mode != "pools":
            return []
        problems = []
        for name, (check, expected) in (("start_timeout_s", POSITIVE), ("missed_heartbeats", integer(1))):
            if not check(value := getattr(self, name)):
                problems.append((self.key(name), f"{expected}, found {value!r}"))
        if not isinstance(self.pools, dict):
            return [*problems, (self.key("pools"), f"must map each stage to a work pool, found {self.pools!r}")]
        unknown = sorted(set(map(str, self.pools)) - set(STAGE_NAMES))
        if unknown:
            problems.append((self.key("pools"), (f"unknown stages {', '.join(unknown)}; expected "
                                                 f"{', '.join(STAGE_NAMES)}")))
        for stage in STAGE_NAMES:
            pool = self.pools.get(stage)
            if not (isinstance(pool, str) and POOL_NAME.fullmatch(pool)):
                problems.append((self.key(f"pools.{stage}"), ("must be a work pool name (letters, digits, '_', "
                                                              f"'.', '-'), found {pool!r}")))
        return problems
