"""The `model` group: the wide Spexphormer network (conf/model/default.yaml)."""

from __future__ import annotations

from dataclasses import dataclass

from sgt_core.config.section import (
    BOOLEAN,
    PROBABILITY_BELOW_ONE,
    Problem,
    Rule,
    Section,
    checked,
    integer,
    is_int,
)

DEGREE_LIST: Rule = (lambda value: isinstance(value, list) and all(is_int(d) and d >= 1 for d in value),
                     "must be a list of integers >= 1, one per layer")


@dataclass(frozen=True)
class ModelConfig(Section):
    """`model` (Spexphormer section 4): `Spexphormer`'s arguments of the same names, and `degrees`.

    `degrees` is what `LayerSampler` draws per node in each layer (its argument of that name). The LPE's
    sizes are checked with `preprocess.lpe` (`Config`), since they count only when it is on.
    """

    PATH = "model"

    hidden: int = checked(integer(1))
    num_layers: int = checked(integer(1))
    heads: int = checked(integer(1))
    dropout: float = checked(PROBABILITY_BELOW_ONE)
    degrees: list[int] = checked(DEGREE_LIST)
    deepnorm: bool = checked(BOOLEAN)
    lpe_dim: int
    lpe_layers: int
    lpe_heads: int

    def relation_problems(self) -> list[Problem]:
        problems = []
        if len(self.degrees) != self.num_layers:
            problems.append(("model.degrees", (f"has {len(self.degrees)} entries but model.num_layers is "
                                               f"{self.num_layers}; give one degree per layer")))
        if self.hidden % self.heads:
            problems.append(("model.hidden", f"{self.hidden} is not divisible by model.heads={self.heads}"))
        return problems
