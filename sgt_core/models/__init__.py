"""Networks: the narrow attention-score estimator and the wide Spexphormer network."""

from sgt_core.models.estimator import AttentionScoreEstimator
from sgt_core.models.estimator_attention import EstimatorAttention
from sgt_core.models.node_encoder import NodeEncoder, NodeExtras
from sgt_core.models.sampled_attention import SampledAttention
from sgt_core.models.spexphormer import Spexphormer

__all__ = [
    "AttentionScoreEstimator",
    "EstimatorAttention",
    "NodeEncoder",
    "NodeExtras",
    "SampledAttention",
    "Spexphormer",
]
