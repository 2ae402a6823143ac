"""The hook interface around a stage, Kedro-style: what each tracking concern is told before, after and on error."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from flows.memory import MemorySampler
    from sgt_core.pipeline import Stage, StageResult


@dataclass
class StageRun:
    """One stage of one pipeline run as its hooks see it, filled in as it goes.

    Attributes:
        stage: the stage's spec.
        key: its cache key.
        cache_hit: whether its result is served from the cache; such a run records no files, plots or memory,
            which are on the run that computed the result.
        params: the config sections it reads.
        run_id: its tracking run, once the first hook has started one ("" before).
        source_run_id: the run that computed its result: its own, or on a cache hit an earlier one.
        location: its result's folder (or object-store URL), as shown to people.
        seconds: from the start of its run to its complete result.
        memory: the sampler that followed it while it computed (None on a cache hit).
    """

    stage: Stage
    key: str
    cache_hit: bool
    params: dict
    run_id: str = ""
    source_run_id: str = ""
    location: str = ""
    seconds: float = 0.0
    memory: MemorySampler | None = None


class StageHooks:
    """One concern recorded around every stage; each method does nothing unless a concern overrides it.

    `run_stage` calls each method on every hook in their order: the first (MLflow's) starts the stage's
    run before the others log to it, and ends it before they queue anything for it.
    """

    def before_stage(self, run: StageRun) -> None:
        """The stage is about to run or be served from the cache."""

    def after_stage(self, run: StageRun, result: StageResult) -> None:
        """The stage's result is complete in its folder."""

    def on_stage_error(self, run: StageRun, error: BaseException) -> None:
        """The stage, or a hook before this one, raised `error`, which `run_stage` raises again."""
