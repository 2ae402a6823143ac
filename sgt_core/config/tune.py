"""The `tune` group: what `sgt tune` searches and how (conf/tune/*.yaml), its space read into distributions.

The space maps config paths (nested as in the config: `optimizer: {lr: {...}}` is `optimizer.lr`) to one
distribution spec each; `parse_space` reads it into the distributions below, which flows/tune.py hands to
Optuna. Whether each path names a key of the config is checked when `sgt tune` starts (`missing_paths`),
not here: a space naming a key that some configuration lacks must not stop a plain `sgt run`.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from sgt_core.config.section import (
    BOOLEAN,
    ConfigProblems,
    Problem,
    Rule,
    Section,
    checked,
    integer,
    is_int,
    is_number,
)

# A study's or preset's name: it names a file (<artifacts>/tune/<study>.db, conf/experiment/<preset>.yaml).
FILE_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_-]*")
NULL_OR_FILE_NAME: Rule = (
    lambda value: value is None or (isinstance(value, str) and FILE_NAME.fullmatch(value) is not None),
    "must be null or a name of letters, digits, '_' and '-'",
)
NULL_OR_VALIDATION_METRIC: Rule = (
    lambda value: value is None or (isinstance(value, str) and value.startswith("val_")
                                    and value != "val_loss"),
    ("must be null or a validation metric to maximise, val_<metric> (e.g. val_roc_auc, val_accuracy), or val_mae "
    "(minimised)"),
)
# The keys a distribution spec may have; a mapping with none of them is a group of further paths (no config
# group has a key of these names).
SPEC_KEYS = ("low", "high", "log", "int", "choices", "first", "others")
# Lists with one entry per layer of the wide network, sampled as {first: ..., others: ...}.
PER_LAYER_PATHS = ("model.degrees",)
# Sampling the wide network's depth sets the estimator's too: it gives one score set per wide layer.
DEPTH_PATH, FOLLOWS_DEPTH = "model.num_layers", "estimator.num_layers"
CHOICE_TYPES = (type(None), bool, int, float, str)  # what Optuna's categorical distributions hold


@dataclass(frozen=True)
class FloatRange:
    """`{low: a, high: b}` (optionally `log: true`): a float in [a, b], log-uniform with `log`."""

    low: float
    high: float
    log: bool = False


@dataclass(frozen=True)
class IntRange:
    """`{low: a, high: b, int: true}` (optionally `log: true`): an integer in [a, b]."""

    low: int
    high: int
    log: bool = False


@dataclass(frozen=True)
class Choices:
    """`{choices: [...]}`: one of the listed values (null, booleans, numbers or strings)."""

    choices: tuple


@dataclass(frozen=True)
class PerLayer:
    """`{first: spec, others: spec}`: a list of one value per layer, `[first] + [others] * (layers - 1)`,
    where layers is the trial's `model.num_layers` (sampled, or the base configuration's)."""

    first: FloatRange | IntRange | Choices
    others: FloatRange | IntRange | Choices


Distribution = FloatRange | IntRange | Choices | PerLayer


@dataclass(frozen=True)
class PrunerConfig(Section):
    """`tune.pruner`: Optuna's `MedianPruner(n_startup_trials=startup_trials, n_warmup_steps=warmup_epochs)`.

    Attributes:
        warmup_epochs: train epochs of a trial before it may be pruned.
        startup_trials: trials that finish before any is pruned.
    """

    PATH = "tune.pruner"

    warmup_epochs: int = checked(integer(0))
    startup_trials: int = checked(integer(0))


@dataclass(frozen=True)
class TuneConfig(Section):
    """`tune`: `sgt tune`'s Optuna search (flows/tune.py); no stage reads it, and no cache key hashes it.

    Attributes:
        trials: finished (complete or pruned) trials the study should reach; a resumed study runs the rest.
        study: the study's name; None: `<dataset id>-<hash of the base overrides, the space and the metric>`.
        metric: the pipeline's validation metric to maximise (val_mae: to minimise); None: the one train
            selects its epoch by.
        sampler_seed: the seed of Optuna's TPE sampler.
        pruner: when a trial whose validation metric trails the others' is stopped.
        preset: None, or a name: the best configuration is written to conf/experiment/<preset>.yaml.
        overwrite_preset: whether `preset` may replace an existing file.
        space: config path -> distribution spec (see `parse_space`).
    """

    PATH = "tune"

    trials: int = checked(integer(1))
    study: str | None = checked(NULL_OR_FILE_NAME)
    metric: str | None = checked(NULL_OR_VALIDATION_METRIC)
    sampler_seed: int = checked(integer(0))
    pruner: PrunerConfig
    preset: str | None = checked(NULL_OR_FILE_NAME)
    overwrite_preset: bool = checked(BOOLEAN)
    space: dict

    def relation_problems(self) -> list[Problem]:
        try:
            parse_space(self.space)
        except ConfigProblems as error:
            return error.problems
        return []

    @property
    def distributions(self) -> dict[str, Distribution]:
        """The space as distributions by config path (checked when the section was built)."""
        return parse_space(self.space)


def parse_space(space: object, where: str = "tune.space") -> dict[str, Distribution]:
    """`tune.space` as {config path: distribution}, in the order of the file.

    Raises:
        ConfigProblems: one problem per bad spec, each naming its key under `tune.space`.
    """
    if not isinstance(space, dict) or not space:
        raise ConfigProblems([(where, f"must map config paths to distributions, found {space!r}")])
    distributions: dict[str, Distribution] = {}
    problems: list[Problem] = []
    _collect(space, "", distributions, problems)
    if DEPTH_PATH in distributions:
        if FOLLOWS_DEPTH in distributions:
            problems.append((f"{where}.{FOLLOWS_DEPTH}", f"follows {DEPTH_PATH}, which is sampled: leave it out"))
        for path in PER_LAYER_PATHS:
            if not isinstance(distributions.get(path), PerLayer):
                problems.append((f"{where}.{DEPTH_PATH}", (f"sampling the depth needs {where}.{path} as "
                                                           "{first: ..., others: ...}, one entry per layer")))
    if problems:
        raise ConfigProblems(problems)
    return distributions


def _collect(group: dict, prefix: str, distributions: dict[str, Distribution],
             problems: list[Problem]) -> None:
    """Adds the specs of `group` (the space, or a group of it under `prefix`) to `distributions`, each bad
    one's problem to `problems`."""
    for name, value in group.items():
        path = f"{prefix}{name}"
        key = f"tune.space.{path}"
        if not isinstance(value, dict) or not value:
            problems.append((key, (f"must be a distribution ({{low, high}}, {{choices}}) or a group, "
                                   f"found {value!r}")))
        elif not any(name in SPEC_KEYS for name in value):
            _collect(value, f"{path}.", distributions, problems)
        else:
            try:
                per_layer = "first" in value or "others" in value
                distributions[path] = _per_layer(value, key) if per_layer else _distribution(value, key)
            except ConfigProblems as error:
                problems += error.problems
            if ("first" in value or "others" in value) and path not in PER_LAYER_PATHS:
                problems.append((key, (f"{{first, others}} samples one entry per layer, for "
                                       f"{', '.join(PER_LAYER_PATHS)} only")))


def _per_layer(spec: dict, key: str) -> PerLayer:
    if set(spec) != {"first", "others"}:
        raise ConfigProblems([(key, (f"a per-layer spec is {{first: spec, others: spec}}, found keys "
                                     f"{', '.join(map(str, spec))}"))])
    problems, parts = [], []
    for part in ("first", "others"):
        try:
            parts.append(_distribution(spec[part], f"{key}.{part}"))
        except ConfigProblems as error:
            problems += error.problems
    if problems:
        raise ConfigProblems(problems)
    return PerLayer(*parts)


def _distribution(spec: object, key: str) -> FloatRange | IntRange | Choices:
    """One spec: {low, high[, log][, int]} or {choices}."""
    if not isinstance(spec, dict):
        raise ConfigProblems([(key, f"must be {{low, high}} or {{choices}}, found {spec!r}")])
    unknown = sorted(str(name) for name in spec if name not in SPEC_KEYS or name in ("first", "others"))
    if unknown:
        raise _problem(key, (f"unknown keys {', '.join(unknown)}; a spec is {{low, high[, log][, int]}} "
                             "or {choices}"))
    if "choices" in spec:
        choices = spec["choices"]
        if len(spec) > 1:
            raise _problem(key, f"{{choices}} takes no other keys, found {', '.join(map(str, spec))}")
        if not (isinstance(choices, list) and choices and all(isinstance(c, CHOICE_TYPES) for c in choices)):
            raise _problem(key, ("choices: must be a non-empty list of null, booleans, numbers or strings, "
                                 f"found {choices!r}"))
        if len({repr(choice) for choice in choices}) < len(choices):
            raise _problem(key, f"choices: {choices!r} repeats a value")
        return Choices(tuple(choices))
    low, high, log, whole = spec.get("low"), spec.get("high"), spec.get("log", False), spec.get("int", False)
    if not (isinstance(log, bool) and isinstance(whole, bool)):
        raise _problem(key, f"log and int must be true or false, found log={log!r}, int={whole!r}")
    valid = is_int if whole else is_number
    if not (valid(low) and valid(high) and low < high):
        kind = "integers" if whole else "numbers"
        raise _problem(key, f"low and high must be {kind} with low < high, found low={low!r}, high={high!r}")
    if log and low <= 0:
        raise _problem(key, f"log: true needs low > 0, found low={low!r}")
    return IntRange(low, high, log) if whole else FloatRange(float(low), float(high), log)


def _problem(key: str, problem: str) -> ConfigProblems:
    return ConfigProblems([(key, problem)])


def missing_paths(distributions: dict[str, Distribution], cfg: dict) -> list[Problem]:
    """The space's paths that name no value of the composed config `cfg` (or name a group, or `tune.*`)."""
    problems = []
    for path in distributions:
        value, found = cfg, True
        for part in path.split("."):
            if not (isinstance(value, dict) and part in value):
                found = False
                break
            value = value[part]
        if path.split(".")[0] == "tune":
            problems.append((f"tune.space.{path}", "the search cannot tune itself"))
        elif not found or isinstance(value, dict):
            problems.append((f"tune.space.{path}", f"{path} names no value of the configuration"))
    return problems
