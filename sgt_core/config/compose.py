"""Composing `conf/` with Hydra into a plain dict, checked by `validate_config` before any stage runs."""

from __future__ import annotations

import os
import re
from pathlib import Path

from hydra import compose, initialize_config_dir
from hydra.core.override_parser.overrides_parser import OverridesParser
from hydra.core.override_parser.types import Override
from hydra.errors import HydraException
from omegaconf import DictConfig, OmegaConf
from omegaconf.errors import OmegaConfBaseException

from sgt_core.config.schema import validate_config
from sgt_core.errors import ConfigError

# Groups whose keys their files fix: `+key=value` (or `++`) may not add a key inside them, since no stage
# would read it. Hydra's own error for `train.epoch=5` suggests `+train.epoch=5`, which would otherwise run
# with the key ignored, under a new cache key.
FIXED_KEY_GROUPS = (
    "dataset", "preprocess", "estimator", "export", "model", "sampler", "optimizer", "train", "orchestration",
)

# Keys that became groups of their own (issue 18): an override of the old key says where it went.
MOVED_KEYS = {
    "train.sampler": "the sampler group: sampler=reservoir|uniform|topk|full",
    "train.lr": "optimizer.lr",
    "train.weight_decay": "optimizer.weight_decay",
}


def config_dir() -> Path:
    """`$SGT_CONF_DIR`, else the repository's `conf/` folder."""
    return Path(os.environ.get("SGT_CONF_DIR", Path(__file__).resolve().parents[2] / "conf"))


def compose_config(overrides: list[str] | None = None) -> dict:
    """The resolved configuration as a plain dict, from `conf/config.yaml` and Hydra `overrides`."""
    overrides = list(overrides or [])
    try:
        with initialize_config_dir(config_dir=str(config_dir()), version_base="1.3"):
            _check_moved_keys(overrides)
            _check_added_keys(overrides)
            cfg: DictConfig = compose(config_name="config", overrides=overrides)
        resolved = OmegaConf.to_container(cfg, resolve=True, throw_on_missing=True)
    except (HydraException, OmegaConfBaseException) as error:
        raise ConfigError(_explain(error)) from None
    validate_config(resolved)
    return resolved


def _check_moved_keys(overrides: list[str]) -> None:
    """Refuses an override of a key in `MOVED_KEYS`, naming its new place."""
    moved = [override.key_or_group for override in OverridesParser.create().parse_overrides(overrides)
             if override.key_or_group in MOVED_KEYS]
    if moved:
        raise ConfigError("; ".join(f"{key}: moved to {MOVED_KEYS[key]}" for key in moved))


def _check_added_keys(overrides: list[str]) -> None:
    """Refuses `+key=value` and `++key=value` for a key inside `FIXED_KEY_GROUPS` that the config lacks.

    The keys are looked up in the config composed without those overrides (group choices and presets such
    as `+experiment=NAME` included), so `++key=value` for an existing key passes. Needs Hydra initialised.

    Raises:
        ConfigError: `<key>: unknown key; valid keys in <parent>: ...` for each such key, on one line.
    """
    parsed = OverridesParser.create().parse_overrides(overrides)
    added = [override for override in parsed if _adds_a_fixed_key(override)]
    if not added:
        return
    kept = [override.input_line for override in parsed if not _adds_a_fixed_key(override)]
    base = OmegaConf.to_container(compose(config_name="config", overrides=kept), resolve=False)
    problems = [problem for override in added if (problem := _unknown_key(base, override.key_or_group))]
    if problems:
        raise ConfigError("; ".join(problems))


def _adds_a_fixed_key(override: Override) -> bool:
    """Whether the override adds a value (not a group choice) at a dotted key inside `FIXED_KEY_GROUPS`."""
    key = override.key_or_group
    is_value = override.package is None and "/" not in key and "." in key
    return (override.is_add() or override.is_force_add()) and is_value and key.split(".")[0] in FIXED_KEY_GROUPS


def _unknown_key(cfg: dict, key: str) -> str | None:
    """The problem with a dotted key that `cfg` lacks, listing the keys where it stops; None if present."""
    value, parents = cfg, []
    for part in key.split("."):
        parent = ".".join(parents)
        if not isinstance(value, dict):
            return f"{key}: unknown key; {parent} is a value, not a group of keys"
        if part not in value:
            return f"{key}: unknown key; valid keys in {parent}: {', '.join(sorted(map(str, value))) or '(none)'}"
        value = value[part]
        parents.append(part)
    return None


def _explain(error: Exception) -> str:
    """`<key>: <problem>` in one line from a Hydra/OmegaConf error, with the options if Hydra lists them."""
    # Hydra's messages: the problem and a hint first; indented details, blank lines and doc links after.
    lines = []
    for line in str(error).splitlines():
        if not line.strip():
            break
        if not line.startswith((" ", "\t", "See ")):
            lines.append(line.strip().rstrip("."))
    if error.__cause__ is not None:
        lines.append(str(error.__cause__).splitlines()[0])
    missing_option = re.search(r"Could not find '([\w-]+)/([^']+)'", lines[0])
    if missing_option:
        group, option = missing_option.groups()
        known = sorted(path.stem for path in (config_dir() / group).glob("*.yaml"))
        return f"{group}: unknown option '{option}'; expected one of: {', '.join(known)}"
    overridden = re.search(r"override '([^']+)'", lines[0])
    key = getattr(error, "full_key", None) or (overridden.group(1) if overridden else "overrides")
    return f"{key}: {'; '.join(lines)}"
