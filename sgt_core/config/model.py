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

# The keys only the appnp branch reads (`APPNPBranch`'s steps, teleport and top_k): null on any other branch.
APPNP_KEYS = ("local_steps", "local_teleport", "local_top_k")


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
    # none and the names of sgt_core.models.local's LOCAL_BRANCHES, and its SAGE_AGGREGATIONS; not imported,
    # so that reading the configuration never imports torch
    local: str = checked(one_of("none", "gcn", "sage", "gatv2", "appnp", "gine"))
    local_aggregation: str = checked(one_of("mean", "sum"))
    local_steps: int | None = checked(null_or(integer(1)))
    local_teleport: float | None = checked(null_or(PROBABILITY_BELOW_ONE))
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
        set_keys = [key for key in APPNP_KEYS if getattr(self, key) is not None]
        if self.local != "appnp" and set_keys:
            them = "it" if len(set_keys) == 1 else "them"
            problems.append((self.key(set_keys[0]), (
                f"{', '.join(f'{key}={getattr(self, key)}' for key in set_keys)}: only model.local=appnp reads "
                f"{them}, but model.local is {self.local}; set {them} to null or model.local to appnp")))
        missing = [key for key in APPNP_KEYS[:2] if getattr(self, key) is None]
        if self.local == "appnp" and missing:
            problems.append((self.key(missing[0]), (
                "model.local=appnp needs its propagation steps K and teleport alpha, found "
                f"local_steps={self.local_steps}, local_teleport={self.local_teleport}; e.g. APPNP's published "
                "local_steps=10 local_teleport=0.1")))
        if self.hidden % self.heads:
            problems.append(("model.hidden", f"{self.hidden} is not divisible by model.heads={self.heads}"))
        return problems
