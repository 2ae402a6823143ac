"""Composing the Hydra configuration from `conf/` and checking it before any stage runs."""

from __future__ import annotations

import math
import os
import re
from collections.abc import Callable
from pathlib import Path

from hydra import compose, initialize_config_dir
from hydra.core.override_parser.overrides_parser import OverridesParser
from hydra.core.override_parser.types import Override
from hydra.errors import HydraException
from omegaconf import DictConfig, OmegaConf
from omegaconf.errors import OmegaConfBaseException

from sgt_core.data.load import LOADERS
from sgt_core.data.pyg import KNOWN_NAMES, PYG_DATASETS
from sgt_core.errors import ConfigError
from sgt_core.preprocess.interaction_graph import SUBSTRUCTURE_TYPES
from sgt_core.sampling import TRAIN_SAMPLERS

STAGE_NAMES = ("preprocess", "estimate", "export", "train")
# Groups whose keys their files fix: `+key=value` (or `++`) may not add a key inside them, since no stage
# would read it. Hydra's own error for `train.epoch=5` suggests `+train.epoch=5`, which would otherwise run
# with the key ignored, under a new cache key.
FIXED_KEY_GROUPS = ("dataset", "preprocess", "estimator", "export", "model", "train", "orchestration")


def config_dir() -> Path:
    """`$SGT_CONF_DIR`, else the repository's `conf/` folder."""
    return Path(os.environ.get("SGT_CONF_DIR", Path(__file__).resolve().parents[1] / "conf"))


def compose_config(overrides: list[str] | None = None) -> dict:
    """The resolved configuration as a plain dict, from `conf/config.yaml` and Hydra `overrides`."""
    overrides = list(overrides or [])
    try:
        with initialize_config_dir(config_dir=str(config_dir()), version_base="1.3"):
            _check_added_keys(overrides)
            cfg: DictConfig = compose(config_name="config", overrides=overrides)
        resolved = OmegaConf.to_container(cfg, resolve=True, throw_on_missing=True)
    except (HydraException, OmegaConfBaseException) as error:
        raise ConfigError(_explain(error)) from None
    validate_config(resolved)
    return resolved


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


# A check of one value: whether the value passes, and what it must be otherwise.
Rule = tuple[Callable[[object], bool], str]


def _is_int(value) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _is_number(value) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def _integer(minimum: int) -> Rule:
    return (lambda value: _is_int(value) and value >= minimum), f"must be an integer >= {minimum}"


def _number(low: float, high: float = math.inf, low_open: bool = False, high_open: bool = False) -> Rule:
    """A finite number in the interval from `low` to `high`, each end closed unless marked open."""

    def check(value) -> bool:
        return (_is_number(value) and (low < value if low_open else low <= value)
                and (value < high if high_open else value <= high))

    if high == math.inf:
        return check, f"must be a number {'>' if low_open else '>='} {low:g}"
    interval = f"{'(' if low_open else '['}{low:g}, {high:g}{')' if high_open else ']'}"
    return check, f"must be a number in {interval}"


def _one_of(*choices: str) -> Rule:
    return (lambda value: value in choices), f"expected one of {', '.join(choices)}"


BOOLEAN: Rule = (lambda value: isinstance(value, bool)), "must be true or false"
POSITIVE: Rule = _number(0, low_open=True)
NON_NEGATIVE: Rule = _number(0)
PROBABILITY_BELOW_ONE: Rule = _number(0, 1, high_open=True)
FRACTION: Rule = _number(0, 1, low_open=True)  # (0, 1]: a decay factor or a floor of the temperature
EVEN_DEGREE: Rule = (lambda value: _is_int(value) and value >= 2 and value % 2 == 0), "must be an even integer >= 2"
NULL_OR_POSITIVE_INTEGER: Rule = (lambda value: value is None or (_is_int(value) and value >= 1),
                                  "must be null or an integer >= 1")
# `host:port` (a name, an IPv4 address or a bracketed IPv6 one) where torchrun's c10d rendezvous listens.
RENDEZVOUS_ENDPOINT: Rule = (
    lambda value: value is None or (isinstance(value, str) and re.fullmatch(
        r"(\[[0-9A-Fa-f:.]+\]|[A-Za-z0-9][A-Za-z0-9.-]*):([1-9][0-9]{0,4})", value) is not None
        and int(value.rsplit(":", 1)[1]) <= 65535),
    "must be null or host:port (e.g. head-node:29400)",
)
DEGREE_LIST: Rule = (lambda value: isinstance(value, list) and all(_is_int(d) and d >= 1 for d in value),
                     "must be a list of integers >= 1, one per layer")

# Every value the stages read, by dotted key; the switchable components' own keys are checked below.
RULES: dict[str, Rule] = {
    "seed": _integer(0),
    "stage": _one_of("all", *STAGE_NAMES),
    "stage_isolation": _one_of("process", "inline"),
    "orchestration.mode": _one_of("local", "pools"),
    "preprocess.self_loops": BOOLEAN,
    "preprocess.expander.enabled": BOOLEAN,
    "preprocess.virtual_nodes": _integer(0),
    "preprocess.anchors.enabled": BOOLEAN,
    "preprocess.substructures.enabled": BOOLEAN,
    "preprocess.lpe.enabled": BOOLEAN,
    "estimator.width": _integer(1),
    "estimator.num_layers": _integer(1),
    "estimator.epochs": _integer(1),
    "estimator.lr": POSITIVE,
    "estimator.weight_decay": NON_NEGATIVE,
    "estimator.warmup_epochs": _integer(0),
    "estimator.layer_norm": BOOLEAN,
    "estimator.logit_clip": POSITIVE,
    "estimator.memory_efficient": BOOLEAN,
    "estimator.temperature.anneal": BOOLEAN,
    "estimator.temperature.initial_epochs": _integer(0),
    "estimator.temperature.gamma": FRACTION,
    "estimator.temperature.minimum": FRACTION,
    "model.hidden": _integer(1),
    "model.num_layers": _integer(1),
    "model.heads": _integer(1),
    "model.dropout": PROBABILITY_BELOW_ONE,
    "model.degrees": DEGREE_LIST,
    "model.deepnorm": BOOLEAN,
    "train.epochs": _integer(1),
    "train.lr": POSITIVE,
    "train.weight_decay": NON_NEGATIVE,
    "train.warmup_epochs": _integer(0),
    "train.sampler": _one_of(*TRAIN_SAMPLERS),
    "train.device": _one_of("auto", "cpu", "cuda"),
    "train.batch_size": NULL_OR_POSITIVE_INTEGER,
    "train.eval_every": _integer(1),
    "train.malloc_mmap_threshold_kb": NULL_OR_POSITIVE_INTEGER,
    "train.distributed.nproc_per_node": _integer(1),
    "train.distributed.nnodes": _integer(1),
    "train.distributed.rdzv_endpoint": RENDEZVOUS_ENDPOINT,
    "export.max_candidates_per_node": NULL_OR_POSITIVE_INTEGER,
}
NULL_OR_COUNT: Rule = (lambda value: value is None or (_is_int(value) and value >= 0),
                       "must be null or an integer >= 0")
# Read only while their component is on, keyed by the switch. The components run late (preprocessing a
# large graph takes a while, the LPE's sizes reach the networks only in the estimate and train stages),
# so bad values are caught here instead.
SWITCHED_RULES: dict[str, dict[str, Rule]] = {
    "preprocess.expander.enabled": {
        "preprocess.expander.degree": EVEN_DEGREE,
        "preprocess.expander.ramanujan_slack": NON_NEGATIVE,
        "preprocess.expander.max_tries": _integer(1),
        "preprocess.expander.per_component": BOOLEAN,
        "preprocess.expander.spectral_check_steps": _integer(1),
    },
    "preprocess.anchors.enabled": {
        "preprocess.anchors.k": _integer(1),
        "preprocess.anchors.max_spd": _integer(2),
        "preprocess.anchors.max_khop_per_node": NULL_OR_COUNT,
        "preprocess.anchors.max_anchors_per_node": NULL_OR_COUNT,
        "preprocess.anchors.max_nodes": NULL_OR_POSITIVE_INTEGER,
    },
    "preprocess.substructures.enabled": {
        "preprocess.substructures.threshold": _integer(0),
        "preprocess.substructures.max_size": _integer(1),
        "preprocess.substructures.max_nodes": NULL_OR_POSITIVE_INTEGER,
    },
    "preprocess.lpe.enabled": {
        "preprocess.lpe.m": _integer(1),
        "preprocess.lpe.max_nodes": NULL_OR_POSITIVE_INTEGER,
        "estimator.lpe_dim": (_integer(0)[0], "must be an integer >= 0 (0 skips the LPE)"),
        "model.lpe_dim": (_integer(0)[0], "must be an integer >= 0 (0 skips the LPE)"),
    },
}

_MISSING = object()


def _lookup(cfg: dict, key: str):
    """The value at a dotted key, or _MISSING."""
    value = cfg
    for part in key.split("."):
        if not isinstance(value, dict) or part not in value:
            return _MISSING
        value = value[part]
    return value


def _rule_problems(cfg: dict, rules: dict[str, Rule]) -> list[tuple[str, str]]:
    problems = []
    for key, (check, expected) in rules.items():
        value = _lookup(cfg, key)
        if value is _MISSING:
            problems.append((key, "missing"))
        elif not check(value):
            problems.append((key, f"{expected}, found {value!r}"))
    return problems


def validate_config(cfg: dict) -> None:
    """Rejects values the stages cannot run with, before anything runs.

    Raises:
        ConfigError: one line, `<key>: <problem>` for each problem found, separated by "; ".
    """
    problems = _rule_problems(cfg, RULES)
    for switch, rules in SWITCHED_RULES.items():
        if _lookup(cfg, switch) is True:
            problems += _rule_problems(cfg, rules)
    problems += _dataset_problems(cfg["dataset"]) + _orchestration_problems(cfg.get("orchestration") or {})
    if not problems:  # the checks across values rely on each value having the right type
        problems += _relation_problems(cfg) + _component_problems(cfg)
    if problems:
        raise ConfigError("; ".join(f"{key}: {problem}" for key, problem in problems))


def _dataset_problems(dataset: dict) -> list[tuple[str, str]]:
    """An unknown loader or PyG name, or a non-boolean `standardize`; the loaders check their own values."""
    check, expected = BOOLEAN
    standardize = dataset.get("standardize", False)  # optional: load_dataset defaults it to false
    problems = [] if check(standardize) else [("dataset.standardize", f"{expected}, found {standardize!r}")]
    name = dataset.get("name")
    if name not in LOADERS:
        return [*problems, ("dataset.name", f"unknown dataset {name!r}; expected one of {', '.join(LOADERS)}")]
    if name == "pyg" and str(dataset.get("pyg_name")).lower() not in PYG_DATASETS:
        return [*problems, ("dataset.pyg_name", (f"unknown PyG dataset {dataset.get('pyg_name')!r}; known "
                                                 f"names (case-insensitive): {KNOWN_NAMES}"))]
    return problems


# Read only with orchestration=pools: where each stage runs and how long the flow waits for it.
POOL_RULES: dict[str, Rule] = {
    "start_timeout_s": POSITIVE,
    "missed_heartbeats": _integer(1),
}
# A Prefect work pool's name: it also names the stage's deployment, `sgt-stage/<stage>@<pool>`.
POOL_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]*")


def _orchestration_problems(orchestration: dict) -> list[tuple[str, str]]:
    """With `pools`: a valid work pool name for every stage and nothing else, and the waiting limits."""
    if orchestration.get("mode") != "pools":
        return []
    problems = [(f"orchestration.{key}", problem) for key, problem in _rule_problems(orchestration, POOL_RULES)]
    pools = orchestration.get("pools")
    if not isinstance(pools, dict):
        return [*problems, ("orchestration.pools", f"must map each stage to a work pool, found {pools!r}")]
    unknown = sorted(set(map(str, pools)) - set(STAGE_NAMES))
    if unknown:
        problems.append(("orchestration.pools", (f"unknown stages {', '.join(unknown)}; expected "
                                                 f"{', '.join(STAGE_NAMES)}")))
    for stage in STAGE_NAMES:
        pool = pools.get(stage)
        if not (isinstance(pool, str) and POOL_NAME.fullmatch(pool)):
            problems.append((f"orchestration.pools.{stage}", ("must be a work pool name (letters, digits, "
                                                              f"'_', '.', '-'), found {pool!r}")))
    return problems


def _relation_problems(cfg: dict) -> list[tuple[str, str]]:
    """Values that are each valid but do not fit together."""
    model, train = cfg["model"], cfg["train"]
    problems = []
    if len(model["degrees"]) != model["num_layers"]:
        problems.append(("model.degrees", (f"has {len(model['degrees'])} entries but model.num_layers is "
                                          f"{model['num_layers']}; give one degree per layer")))
    if model["hidden"] % model["heads"]:
        problems.append(("model.hidden", f"{model['hidden']} is not divisible by model.heads={model['heads']}"))
    if cfg["estimator"]["num_layers"] != model["num_layers"]:
        problems.append(("estimator.num_layers", (f"{cfg['estimator']['num_layers']} differs from "
                                                 f"model.num_layers={model['num_layers']}; the estimator gives "
                                                 "one score set per wide layer")))
    keep = cfg["export"]["max_candidates_per_node"]
    if keep is not None and keep < max(model["degrees"]):
        problems.append(("export.max_candidates_per_node", (f"{keep} is below the largest of model.degrees "
                                                            f"{model['degrees']}: a node would have fewer "
                                                            "candidates than neighbours to draw")))
    if train["sampler"] == "full" and train["batch_size"] is not None:
        problems.append(("train.batch_size", ("must be null with train.sampler=full, which attends over whole "
                                             "neighbourhoods")))
    distributed = train["distributed"]
    processes = distributed["nproc_per_node"] * distributed["nnodes"]
    if processes > 1 and (train["batch_size"] is None or train["batch_size"] < 2 * processes):
        # Each rank takes its share of every global batch of target nodes, and batch norm in training
        # needs at least two rows on each.
        problems.append(("train.batch_size", (f"must be an integer >= {2 * processes} (2 per process) with "
                                             f"train.distributed on {processes} processes, found "
                                             f"{train['batch_size']!r}: the ranks share Algorithm 2 batches")))
    if distributed["nnodes"] > 1 and distributed["rdzv_endpoint"] is None:
        problems.append(("train.distributed.rdzv_endpoint", (f"must be host:port with train.distributed.nnodes="
                                                            f"{distributed['nnodes']}: every node meets there")))
    return problems


def _component_problems(cfg: dict) -> list[tuple[str, str]]:
    """Values of the switched-on components that are each valid (SWITCHED_RULES) but do not fit together."""
    problems = []
    anchors = cfg["preprocess"]["anchors"]
    if anchors["enabled"] and not anchors["k"] < anchors["max_spd"] <= 32767:
        problems.append((
            "preprocess.anchors.max_spd",
            (f"must be an integer with k={anchors['k']} < max_spd <= 32767 (anchors beyond k hops need "
             f"their own SPD buckets), found {anchors['max_spd']!r}"),
        ))
    substructures = cfg["preprocess"]["substructures"]
    if substructures["enabled"]:
        types = substructures["types"] or {}
        unknown = sorted(set(types) - set(SUBSTRUCTURE_TYPES))
        if unknown:
            problems.append(("preprocess.substructures.types", (f"unknown types {', '.join(unknown)}; expected "
                                                               f"names from {', '.join(SUBSTRUCTURE_TYPES)}")))
        check, expected = NULL_OR_COUNT
        problems += [(f"preprocess.substructures.types.{name}", f"{expected}, found {cap!r}")
                     for name, cap in types.items() if name in SUBSTRUCTURE_TYPES and not check(cap)]
    if cfg["preprocess"]["lpe"]["enabled"]:
        for section in ("estimator", "model"):
            dim, layers, heads = (cfg[section][key] for key in ("lpe_dim", "lpe_layers", "lpe_heads"))
            if dim > 0 and not (_is_int(layers) and layers >= 1 and _is_int(heads) and heads >= 1
                                and dim % heads == 0):
                problems.append((
                    f"{section}.lpe_dim",
                    (f"{dim} with lpe_layers={layers!r}, lpe_heads={heads!r}: need lpe_layers >= 1, lpe_heads >= 1 "
                     "and lpe_dim divisible by lpe_heads"),
                ))
    return problems
