"""The `optimizer` group: the wide network's optimiser (conf/optimizer/*.yaml)."""

from __future__ import annotations

from dataclasses import dataclass

from sgt_core.config.section import (
    NON_NEGATIVE,
    POSITIVE,
    Rule,
    Section,
    checked,
    is_number,
    one_of,
)

BETAS: Rule = (lambda value: isinstance(value, list | tuple) and len(value) == 2
               and all(is_number(beta) and 0 <= beta < 1 for beta in value),
               "must be two numbers in [0, 1)")


@dataclass(frozen=True)
class OptimizerConfig(Section):
    """`optimizer=adamw` or `optimizer=adam`: `name` picks `sgt_core.optim.AdamW` (decoupled weight decay) or
    `sgt_core.optim.Adam` (L2 in the gradient); the other keys are its arguments, one to one.

    The values of `name` are those of `sgt_core.optim.OPTIMIZERS`, not imported, so that reading the
    configuration never imports torch. The estimator's optimiser is an AdamW too, with `estimator.lr` and
    `estimator.weight_decay`.
    """

    PATH = "optimizer"

    name: str = checked(one_of("adamw", "adam"))
    lr: float = checked(POSITIVE)
    weight_decay: float = checked(NON_NEGATIVE)
    betas: tuple[float, float] = checked(BETAS)
    eps: float = checked(POSITIVE)

    def arguments(self) -> dict:
        """The optimiser's keyword arguments (all but `name`)."""
        return {"lr": self.lr, "weight_decay": self.weight_decay, "betas": tuple(self.betas), "eps": self.eps}
