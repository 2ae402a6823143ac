"""The `estimator` group: the narrow attention-score estimator and its training (conf/estimator/default.yaml)."""

from __future__ import annotations

from dataclasses import dataclass

from sgt_core.config.network import NetworkConfig
from sgt_core.config.section import BOOLEAN, FRACTION, NON_NEGATIVE, POSITIVE, Section, checked, integer


@dataclass(frozen=True)
class TemperatureConfig(Section):
    """`estimator.temperature`: the softmax temperature's schedule, the arguments of `schedules.temperature`."""

    PATH = "estimator.temperature"

    anneal: bool = checked(BOOLEAN)
    initial_epochs: int = checked(integer(0))
    gamma: float = checked(FRACTION)
    minimum: float = checked(FRACTION)


@dataclass(frozen=True)
class EstimatorConfig(NetworkConfig):
    """`estimator` (Spexphormer section 4), trained on the full interaction graph on CPU.

    The network is `AttentionScoreEstimator`; `lr` and `weight_decay` are its `AdamW`'s arguments,
    `warmup_epochs` and `epochs` its `CosineWithWarmup`'s.
    """

    PATH = "estimator"
    TRAINING_FIELDS = ("epochs", "lr", "weight_decay", "warmup_epochs", "temperature")

    width: int = checked(integer(1))
    num_layers: int = checked(integer(1))
    epochs: int = checked(integer(1))
    lr: float = checked(POSITIVE)
    weight_decay: float = checked(NON_NEGATIVE)
    warmup_epochs: int = checked(integer(0))
    layer_norm: bool = checked(BOOLEAN)
    logit_clip: float = checked(POSITIVE)
    lpe_dim: int
    lpe_layers: int
    lpe_heads: int
    memory_efficient: bool = checked(BOOLEAN)
    temperature: TemperatureConfig
