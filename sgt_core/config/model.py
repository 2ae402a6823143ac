"""The `model` group: the wide Spexphormer network (conf/model/default.yaml)."""

from __future__ import annotations

from dataclasses import dataclass

from sgt_core.config.estimator import READOUT_KINDS
from sgt_core.config.network import NetworkConfig
from sgt_core.config.section import (
    BOOLEAN,
    PROBABILITY_BELOW_ONE,
    Problem,
    checked,
    integer,
    list_of,
    null_or,
    one_of,
)

# The gcn branch's APPNP keys at one plain hop over the kept edges, the only values another branch accepts
# (flows/tune.py sets them when a trial draws another branch).
GCN_ONE_HOP = {"local_steps": 1, "local_teleport": 0.0, "local_top_k": None}


@dataclass(frozen=True)
class ModelConfig(NetworkConfig):
    """`model` (Spexphormer section 4): the network is `Spexphormer`.

    `degrees` is what `LayerSampler` draws per node in each layer (its argument of that name).
    """

    PATH = "model"
    TRAINING_FIELDS = ("degrees",)

    hidden: int = checked(integer(1))
    num_layers: int = checked(integer(1))
    heads: int = checked(integer(1))
    dropout: float = checked(PROBABILITY_BELOW_ONE)
    input_dropout: float = checked(PROBABILITY_BELOW_ONE)
    degrees: list[int] = checked(list_of(integer(1), "integers >= 1, one per layer"))
    deepnorm: bool = checked(BOOLEAN)
    # the values of sgt_core.models.local_message_passing's LOCAL_KINDS and SAGE_AGGREGATIONS; not imported,
    # so that reading the configuration never imports torch_geometric
    local: str = checked(one_of("none", "gcn", "sage", "gatv2", "gine"))
    local_aggregation: str = checked(one_of("mean", "sum"))
    local_steps: int = checked(integer(1))
    local_teleport: float = checked(PROBABILITY_BELOW_ONE)
    local_top_k: int | None = checked(null_or(integer(1)))
    degree_signal: bool = checked(BOOLEAN)
    feed_forward: bool = checked(BOOLEAN)
    lpe_dim: int
    lpe_layers: int
    lpe_heads: int
    readout: str = checked(one_of(*READOUT_KINDS))

    def relation_problems(self) -> list[Problem]:
        problems = []
        if len(self.degrees) != self.num_layers:
            problems.append(("model.degrees", (f"has {len(self.degrees)} entries but model.num_layers is "
                                               f"{self.num_layers}; give one degree per layer")))
        offending = [key for key, value in GCN_ONE_HOP.items() if getattr(self, key) != value]
        if self.local != "gcn" and offending:
            problems.append((f"model.{offending[0]}", (
                f"{self.local_steps} steps, teleport {self.local_teleport}, top-k {self.local_top_k}: APPNP's "
                f"propagation is the gcn branch's, but model.local is {self.local}; set 1, 0.0 and null, or "
                "local: gcn")))
        if self.hidden % self.heads:
            problems.append(("model.hidden", f"{self.hidden} is not divisible by model.heads={self.heads}"))
        return problems
