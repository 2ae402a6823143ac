"""The `train` group: training the wide network (conf/train/default.yaml)."""

from __future__ import annotations

import re
from dataclasses import dataclass

from sgt_core.config.estimator import CLASSIFICATION_LOSS_NAMES, REGRESSION_LOSS_NAMES
from sgt_core.config.section import (
    NULL_OR_POSITIVE_INTEGER,
    Problem,
    Rule,
    Section,
    checked,
    integer,
    null_or,
    number,
    one_of,
)

# A moving average's decay: 1 would never move, 0 would be no average.
NULL_OR_DECAY: Rule = null_or(number(0, 1, low_open=True, high_open=True))

# `host:port` (a name, an IPv4 address or a bracketed IPv6 one) where torchrun's c10d rendezvous listens.
RENDEZVOUS_ENDPOINT: Rule = (
    lambda value: value is None or (isinstance(value, str) and _endpoint_port(value) is not None),
    "must be null or host:port (e.g. head-node:29400)",
)


def _endpoint_port(value: str) -> int | None:
    match = re.fullmatch(r"(\[[0-9A-Fa-f:.]+\]|[A-Za-z0-9][A-Za-z0-9.-]*):([1-9][0-9]{0,4})", value)
    return int(match.group(2)) if match and int(match.group(2)) <= 65535 else None


@dataclass(frozen=True)
class DistributedConfig(Section):
    """`train.distributed`: data-parallel training (sgt_core/train/distributed.py) on nnodes x nproc_per_node.

    Attributes:
        nproc_per_node: processes (ranks) per node; 1 on 1 node trains in the stage's own process.
        nnodes: nodes, each running the same torchrun command.
        rdzv_endpoint: `host:port` of the c10d rendezvous on the first node; None: --standalone, one node.
    """

    PATH = "train.distributed"

    nproc_per_node: int = checked(integer(1))
    nnodes: int = checked(integer(1))
    rdzv_endpoint: str | None = checked(RENDEZVOUS_ENDPOINT)

    @property
    def world_size(self) -> int:
        return self.nproc_per_node * self.nnodes

    def relation_problems(self) -> list[Problem]:
        if self.nnodes > 1 and self.rdzv_endpoint is None:
            return [(self.key("rdzv_endpoint"), (f"must be host:port with train.distributed.nnodes={self.nnodes}: "
                                                 "every node meets there"))]
        return []


@dataclass(frozen=True)
class TrainConfig(Section):
    """`train`: the wide network's epochs, device, batches and processes.

    `warmup_epochs` and `epochs` are `CosineWithWarmup`'s arguments of those names; `batch_size` is
    `WideNetworkTraining`'s; `device` is `resolve_device`'s; `ema_decay` is
    `WideNetworkTraining.average_weights`'s; `precise_bn_batches` is
    `WideNetworkTraining.recalibrate_batch_norm`'s, before every evaluation; `regression_loss` and
    `classification_loss` are the loss of a regression or classification task (`sgt_core.tasks.Task`). On a
    dataset of many graphs `batch_size` counts graphs. The optimiser and the sampler are groups of their own
    (`optimizer`, `sampler`).
    """

    PATH = "train"

    epochs: int = checked(integer(1))
    warmup_epochs: int = checked(integer(0))
    device: str = checked(one_of("auto", "cpu", "cuda"))
    batch_size: int | None = checked(NULL_OR_POSITIVE_INTEGER)
    eval_every: int = checked(integer(1))
    ema_decay: float | None = checked(NULL_OR_DECAY)
    precise_bn_batches: int | None = checked(NULL_OR_POSITIVE_INTEGER)
    distributed: DistributedConfig
    regression_loss: str = checked(one_of(*REGRESSION_LOSS_NAMES))
    classification_loss: str = checked(one_of(*CLASSIFICATION_LOSS_NAMES))

    def relation_problems(self) -> list[Problem]:
        processes = self.distributed.world_size
        if processes > 1 and self.precise_bn_batches is not None:
            return [(self.key("precise_bn_batches"), (f"must be null with train.distributed on {processes} "
                                                      "processes: each rank would average batch norm's "
                                                      f"statistics over its own batches, found "
                                                      f"{self.precise_bn_batches}"))]
        if processes > 1 and (self.batch_size is None or self.batch_size < 2 * processes):
            # Each rank takes its share of every global batch of target nodes, and batch norm in training
            # needs at least two rows on each.
            return [(self.key("batch_size"), (f"must be an integer >= {2 * processes} (2 per process) with "
                                              f"train.distributed on {processes} processes, found "
                                              f"{self.batch_size!r}: the ranks share Algorithm 2 batches"))]
        return []
