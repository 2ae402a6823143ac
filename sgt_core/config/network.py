"""What the two networks' groups (`estimator`, `model`) share: their fields are the network's arguments."""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import ClassVar

from sgt_core.config.section import Section


@dataclass(frozen=True)
class NetworkConfig(Section):
    """A network's group: its fields are the network's constructor arguments of the same names
    (`network_arguments`), but those in `TRAINING_FIELDS`, which configure how it is trained.

    The LPE's sizes (`lpe_dim`, `lpe_layers`, `lpe_heads`) are checked with `preprocess.lpe` (`Config`),
    since they count only when it is on.
    """

    TRAINING_FIELDS: ClassVar[tuple[str, ...]] = ()

    def network_arguments(self) -> dict:
        """The network's arguments, by name: `Network(**graph.model_input_sizes(), **network_arguments())`."""
        return {spec.name: getattr(self, spec.name) for spec in fields(self)
                if spec.name not in self.TRAINING_FIELDS}
