"""The `estimator` group: the narrow attention-score estimator and its training (conf/estimator/default.yaml)."""

from __future__ import annotations

from dataclasses import dataclass

from sgt_core.config.network import NetworkConfig
from sgt_core.config.section import (
    BOOLEAN,
    FRACTION,
    NON_NEGATIVE,
    NULL_OR_POSITIVE_INTEGER,
    POSITIVE,
    Section,
    checked,
    integer,
    one_of,
)

# sgt_core.models.readout's READOUTS and sgt_core.tasks' REGRESSION_LOSSES and CLASSIFICATION_LOSSES, not
# imported: checking a config imports no torch.
READOUT_KINDS: tuple[str, ...] = ("mean", "sum", "virtual", "attention")
REGRESSION_LOSS_NAMES: tuple[str, ...] = ("l1", "mse")
CLASSIFICATION_LOSS_NAMES: tuple[str, ...] = ("cross_entropy", "weighted_cross_entropy")


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
    `warmup_epochs` and `epochs` its `CosineWithWarmup`'s. On a dataset of many graphs `batch_size` is the
    graphs per step (null: the whole union); `readout` is how a graph task pools (`GraphReadout`) and
    `regression_loss` and `classification_loss` the loss of a regression or classification task
    (`sgt_core.tasks.Task`).
    """

    PATH = "estimator"
    TRAINING_FIELDS = ("epochs", "lr", "weight_decay", "warmup_epochs", "temperature", "batch_size",
                       "regression_loss", "classification_loss")

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
    batch_size: int | None = checked(NULL_OR_POSITIVE_INTEGER)
    readout: str = checked(one_of(*READOUT_KINDS))
    regression_loss: str = checked(one_of(*REGRESSION_LOSS_NAMES))
    classification_loss: str = checked(one_of(*CLASSIFICATION_LOSS_NAMES))
