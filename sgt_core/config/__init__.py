"""The configuration: Hydra composes `conf/` into a plain dict (`compose`), typed dataclasses check it.

One module per config group, each a frozen dataclass whose fields are the group's keys and the
arguments of what it configures, one to one: `preprocess.expander.degree` is `ExpanderConfig.degree`,
which `build_interaction_graph` hands to `hamiltonian_expander(degree=...)`. These modules import
neither torch nor a model or dataset, so a config is checked in milliseconds; the Hydra part (`compose`)
is imported on first use.
"""

from __future__ import annotations

from sgt_core.config.orchestration import POOL_NAME, STAGE_NAMES
from sgt_core.config.schema import Config, validate_config

__all__ = ["POOL_NAME", "STAGE_NAMES", "Config", "compose_config", "config_dir", "validate_config"]


def __getattr__(name: str):
    # Hydra and OmegaConf take a few hundred ms to import: the stages read their groups without them.
    if name in ("compose_config", "config_dir"):
        from sgt_core.config import compose

        return getattr(compose, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
