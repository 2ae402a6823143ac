"""What every config group's dataclass shares: reading it from the composed config and checking its values.

A group is a frozen dataclass whose fields are its keys and, one to one, the arguments of what it
configures. Each field carries its rule (`checked(rule)`); `__post_init__` checks them all, so a group
built by hand (a test's `ExpanderConfig(degree=4)`) is checked as one read from `conf/`. Every problem
names the full dotted key (the class's `PATH`), what was expected and what was found.
"""

from __future__ import annotations

import math
import numbers
import types
import typing
from collections.abc import Callable, Iterable
from dataclasses import MISSING, dataclass, field, fields
from typing import Any, ClassVar

from sgt_core.errors import ConfigError

# A check of one value: whether the value passes, and what it must be otherwise.
Rule = tuple[Callable[[object], bool], str]
# One problem: the dotted key and what is wrong with its value.
Problem = tuple[str, str]


class ConfigProblems(ConfigError):
    """Every problem found, on one line: `<key>: <problem>` for each, separated by "; "."""

    def __init__(self, problems: Iterable[Problem]) -> None:
        self.problems = list(problems)
        super().__init__("; ".join(f"{key}: {problem}" for key, problem in self.problems))


def is_int(value) -> bool:
    """An integer, NumPy's included (the loaders run these checks on values given directly), not a boolean."""
    return isinstance(value, numbers.Integral) and not isinstance(value, bool)


def is_number(value) -> bool:
    """A finite real number, NumPy's included, not a boolean."""
    return isinstance(value, numbers.Real) and not isinstance(value, bool) and math.isfinite(value)


def integer(minimum: int) -> Rule:
    return (lambda value: is_int(value) and value >= minimum), f"must be an integer >= {minimum}"


def number(low: float, high: float = math.inf, low_open: bool = False, high_open: bool = False) -> Rule:
    """A finite number in the interval from `low` to `high`, each end closed unless marked open."""

    def check(value) -> bool:
        return (is_number(value) and (low < value if low_open else low <= value)
                and (value < high if high_open else value <= high))

    if high == math.inf:
        return check, f"must be a number {'>' if low_open else '>='} {low:g}"
    interval = f"{'(' if low_open else '['}{low:g}, {high:g}{')' if high_open else ']'}"
    return check, f"must be a number in {interval}"


def list_of(rule: Rule, items: str) -> Rule:
    """A list whose every item passes `rule`; `items` says what they must be ("integers >= 1")."""
    check_item, _ = rule
    return ((lambda value: isinstance(value, list) and all(check_item(item) for item in value)),
            f"must be a list of {items}")


def one_of(*choices: str) -> Rule:
    return (lambda value: value in choices), f"expected one of {', '.join(choices)}"


def null_or(rule: Rule) -> Rule:
    """null (None), or a value `rule` passes: `null_or(integer(1))` says "must be null or an integer >= 1"."""
    check, expected = rule
    return (lambda value: value is None or check(value)), f"must be null or {expected.removeprefix('must be ')}"


ANY: Rule = (lambda value: True), ""
BOOLEAN: Rule = (lambda value: isinstance(value, bool)), "must be true or false"
POSITIVE: Rule = number(0, low_open=True)
NON_NEGATIVE: Rule = number(0)
PROBABILITY_BELOW_ONE: Rule = number(0, 1, high_open=True)
FRACTION: Rule = number(0, 1, low_open=True)  # (0, 1]: a decay factor or a floor of the temperature
NULL_OR_POSITIVE_INTEGER: Rule = null_or(integer(1))
NULL_OR_COUNT: Rule = null_or(integer(0))
TEXT: Rule = (lambda value: isinstance(value, str)), "must be a string"
NULL_OR_TEXT: Rule = null_or(TEXT)


def checked(rule: Rule, default: Any = MISSING, default_factory: Callable[[], Any] | None = None) -> Any:
    """A config field checked by `rule`: `degree: int = checked(EVEN_DEGREE)`, optionally with a default."""
    if default_factory is not None:
        return field(default_factory=default_factory, metadata={"rule": rule})
    return field(default=default, metadata={"rule": rule})


@dataclass(frozen=True)
class Section:
    """A config group: subclasses are frozen dataclasses with a `PATH` and `checked` fields.

    A field whose type is itself a `Section` is a nested group (`preprocess.expander`). A group with an
    `enabled` switch that is false is checked for the switch only: nothing reads its other values.
    """

    PATH: ClassVar[str] = ""

    def __post_init__(self) -> None:
        problems = self._field_problems()
        if not problems and getattr(self, "enabled", True) is not False:
            problems = list(self.relation_problems())  # they rely on each value having the right type
        if problems:
            raise ConfigProblems(problems)

    @classmethod
    def key(cls, name: str) -> str:
        """The full dotted key of one of this group's fields."""
        return f"{cls.PATH}.{name}" if cls.PATH else name

    def relation_problems(self) -> Iterable[Problem]:
        """Values that are each valid but do not fit together; none by default."""
        return ()

    def _field_problems(self) -> list[Problem]:
        switched_off = getattr(self, "enabled", True) is False
        problems = []
        for spec in fields(self):
            check, expected = spec.metadata.get("rule", ANY)
            if switched_off and spec.name != "enabled":
                continue
            value = getattr(self, spec.name)
            if not check(value):
                problems.append((self.key(spec.name), f"{expected}, found {value!r}"))
        return problems

    @classmethod
    def from_dict(cls, data: object):
        """The group from its part of the composed config (a plain dict), nested groups included.

        Raises:
            ConfigProblems: one line naming every unknown, missing or bad key of the group and its subgroups.
        """
        if not isinstance(data, dict):
            raise ConfigProblems([(cls.PATH, f"must be a group of keys, found {data!r}")])
        specs = fields(cls)
        names = [spec.name for spec in specs]
        where = cls.PATH or "the config"
        problems: list[Problem] = [
            (cls.key(str(name)), f"unknown key; valid keys in {where}: {', '.join(sorted(names))}")
            for name in data if name not in names
        ]
        hints = typing.get_type_hints(cls)
        values = {}
        for spec in specs:
            if spec.name not in data:
                if spec.default is MISSING and spec.default_factory is MISSING:
                    problems.append((cls.key(spec.name), "missing"))
                continue
            value, kind = data[spec.name], hints[spec.name]
            if isinstance(kind, type) and not isinstance(kind, types.GenericAlias) and issubclass(kind, Section):
                try:
                    value = kind.from_dict(value)
                except ConfigProblems as error:
                    problems += error.problems
                    continue
            values[spec.name] = value
        if problems:
            raise ConfigProblems(problems)
        return cls(**values)

    def as_dict(self) -> dict:
        """The group as the plain dict it was read from (nested groups included)."""
        return {spec.name: (value.as_dict() if isinstance(value := getattr(self, spec.name), Section) else value)
                for spec in fields(self)}

