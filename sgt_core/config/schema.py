"""The whole configuration as one dataclass: each top-level key of conf/config.yaml a field, each group its class.

`validate_config` reads the composed config (a plain dict, which is what the stages receive, the cache
keys hash and MLflow logs) into `Config`, which checks every value where its group is defined and the
values of several groups that must fit together here.
"""

from __future__ import annotations

from dataclasses import dataclass

from sgt_core.config.dataset import dataset_problems, is_one_graph
from sgt_core.config.estimator import EstimatorConfig
from sgt_core.config.export import ExportConfig
from sgt_core.config.model import ModelConfig
from sgt_core.config.network import NetworkConfig
from sgt_core.config.optimizer import OptimizerConfig
from sgt_core.config.orchestration import STAGE_NAMES, OrchestrationConfig
from sgt_core.config.preprocess import PreprocessConfig
from sgt_core.config.sampler import FULL_ATTENTION_ON_ONE_GRAPH, SamplerConfig
from sgt_core.config.section import NULL_OR_TEXT, TEXT, Problem, Section, checked, integer, is_int, one_of
from sgt_core.config.train import TrainConfig
from sgt_core.config.tune import TuneConfig


@dataclass(frozen=True)
class PathsConfig(Section):
    """`paths.artifacts`: the artifact store, a folder or an object-store URL (`$SGT_ARTIFACTS`)."""

    PATH = "paths"

    artifacts: str = checked(TEXT)


@dataclass(frozen=True)
class MlflowConfig(Section):
    """`mlflow`: the tracking store (null: beside the artifacts) and experiment (null: one per dataset)."""

    PATH = "mlflow"

    tracking_uri: str | None = checked(NULL_OR_TEXT)
    experiment: str | None = checked(NULL_OR_TEXT)


@dataclass(frozen=True)
class Config(Section):
    """The composed configuration, checked; see conf/config.yaml for what each key means.

    `dataset` stays a plain dict: its keys are its loader's, checked by the loader (`dataset_problems`
    checks what can be checked without importing the loaders).
    """

    seed: int = checked(integer(0))
    stage: str = checked(one_of("all", *STAGE_NAMES))
    stage_isolation: str = checked(one_of("process", "inline"))
    paths: PathsConfig
    mlflow: MlflowConfig
    dataset: dict
    preprocess: PreprocessConfig
    estimator: EstimatorConfig
    export: ExportConfig
    model: ModelConfig
    sampler: SamplerConfig
    optimizer: OptimizerConfig
    train: TrainConfig
    orchestration: OrchestrationConfig
    tune: TuneConfig

    def _field_problems(self) -> list[Problem]:
        return super()._field_problems() + dataset_problems(self.dataset)

    def relation_problems(self) -> list[Problem]:
        """Values of several groups that are each valid but do not fit together."""
        model, train = self.model, self.train
        problems = []
        if self.estimator.num_layers != model.num_layers:
            problems.append(("estimator.num_layers", (f"{self.estimator.num_layers} differs from model.num_layers="
                                                      f"{model.num_layers}; the estimator gives one score set per "
                                                      "wide layer")))
        keep = self.export.max_candidates_per_node
        if keep is not None and keep < max(model.degrees):
            problems.append(("export.max_candidates_per_node", (f"{keep} is below the largest of model.degrees "
                                                                f"{model.degrees}: a node would have fewer "
                                                                "candidates than neighbours to draw")))
        # On a set of many graphs a batch is whole graphs, over which full attention is well defined; on one
        # graph Algorithm 2's batches sample fixed degrees, so full attention takes the whole graph at once.
        if self.sampler.method == "full" and train.batch_size is not None and is_one_graph(self.dataset):
            problems.append(("train.batch_size", (f"{FULL_ATTENTION_ON_ONE_GRAPH} (on a set of many graphs it "
                                                  "counts the whole graphs of a batch)")))
        if (model.local == "appnp" and model.local_steps is not None and model.local_steps > 1
                and train.batch_size is not None and model.local_top_k is None):
            problems.append(("model.local_steps", (f"{model.local_steps} propagation steps need full-graph training "
                                                   "(train.batch_size: null, one process) or their top-k rows "
                                                   "(model.local_top_k, e.g. 32): Algorithm 2's batches sample "
                                                   "one hop per layer")))
        if self.preprocess.lpe.enabled:
            problems += _lpe_problems(self.estimator) + _lpe_problems(model)
        return problems


def _lpe_problems(network: NetworkConfig) -> list[Problem]:
    """A network's LPE sizes, read while `preprocess.lpe` is on: width 0 leaves the LPE out of it."""
    dim, layers, heads = network.lpe_dim, network.lpe_layers, network.lpe_heads
    if not (is_int(dim) and dim >= 0):
        return [(network.key("lpe_dim"), f"must be an integer >= 0 (0 skips the LPE), found {dim!r}")]
    if dim > 0 and not (is_int(layers) and layers >= 1 and is_int(heads) and heads >= 1 and dim % heads == 0):
        return [(network.key("lpe_dim"), (f"{dim} with lpe_layers={layers!r}, lpe_heads={heads!r}: need "
                                          "lpe_layers >= 1, lpe_heads >= 1 and lpe_dim divisible by lpe_heads"))]
    return []


def validate_config(cfg: dict) -> Config:
    """The composed config (a plain dict) as a checked `Config`.

    Raises:
        ConfigError: one line, `<key>: <problem>` for each problem found, separated by "; ".
    """
    return Config.from_dict(cfg)
