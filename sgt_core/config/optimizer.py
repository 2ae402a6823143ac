"""The `optimizer` group: the wide network's optimiser (conf/optimizer/*.yaml)."""

from __future__ import annotations

from dataclasses import dataclass

from sgt_core.config.section import (
    BOOLEAN,
    NON_NEGATIVE,
    POSITIVE,
    Rule,
    Section,
    checked,
    is_number,
    null_or,
)

BETAS: Rule = (lambda value: isinstance(value, list | tuple) and len(value) == 2
               and all(is_number(beta) and 0 <= beta < 1 for beta in value),
               "must be two numbers in [0, 1)")


@dataclass(frozen=True)
class AdamWConfig(Section):
    """`optimizer=adamw`: the arguments of `sgt_core.optim.AdamW`, one to one, and the input projection's decay.

    `input_weight_decay`, unless null, is the weight decay of the wide network's first layer, the weight
    that maps raw features to its width, as a parameter group of its own; null gives it `weight_decay`.
    The estimator's optimiser is an AdamW too, with `estimator.lr` and `estimator.weight_decay`.
    """

    PATH = "optimizer"

    lr: float = checked(POSITIVE)
    weight_decay: float = checked(NON_NEGATIVE)
    input_weight_decay: float | None = checked(null_or(NON_NEGATIVE))
    betas: tuple[float, float] = checked(BETAS)
    eps: float = checked(POSITIVE)
    decoupled_weight_decay: bool = checked(BOOLEAN)
