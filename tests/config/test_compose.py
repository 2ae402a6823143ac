"""Bad configuration values: `sgt run` exits 2 with one line `error: <key>: <problem>` and writes nothing.

And the typed groups of sgt_core/config/: each bad, unknown or missing key named once, every file in conf/
composing, the lists the config checks against matching the code, and no model or dataset code imported.
"""

from __future__ import annotations

import inspect
import subprocess
import sys

import pytest

from flows.cli import main
from sgt_core.config import compose_config, config_dir, validate_config
from sgt_core.config.dataset import DATASET_NAMES, PYG_NAMES
from sgt_core.config.optimizer import OptimizerConfig
from sgt_core.config.preprocess import (
    DEFAULT_SUBSTRUCTURE_CAPS,
    SUBSTRUCTURE_TYPES,
    AnchorsConfig,
    ExpanderConfig,
    LpeConfig,
    SubstructuresConfig,
)
from sgt_core.config.sampler import METHODS, SamplerConfig
from sgt_core.config.section import ConfigProblems
from sgt_core.errors import ConfigError
from sgt_core.optim import AdamW
from sgt_core.pipeline import STAGE_BY_NAME
from tests.conftest import REPO_ROOT, TINY_MODEL, TINY_OVERRIDES

# overrides -> (the key the error names, a fragment of its problem)
BAD_VALUES = {
    "odd expander degree": (["preprocess.expander.degree=5"], "preprocess.expander.degree", "even integer >= 2"),
    "negative expander degree": (["preprocess.expander.degree=-4"], "preprocess.expander.degree", "found -4"),
    "non-integer expander degree": (["preprocess.expander.degree=4.5"], "preprocess.expander.degree", "found 4.5"),
    "negative ramanujan slack": (["preprocess.expander.ramanujan_slack=-1"], "preprocess.expander.ramanujan_slack",
                                 ">= 0"),
    "negative virtual nodes": (["preprocess.virtual_nodes=-1"], "preprocess.virtual_nodes", "integer >= 0"),
    "unknown substructure type": (
        ["preprocess.substructures.enabled=true", "+preprocess.substructures.types.hexagon=3"],
        "preprocess.substructures.types.hexagon",
        "unknown key; valid keys in preprocess.substructures.types: cycle_3",
    ),
    "too many degrees": (["model.degrees=[3,3,3]"], "model.degrees", "has 3 entries but model.num_layers is 2"),
    "too few degrees": (["model.degrees=[3]"], "model.degrees", "has 1 entries but model.num_layers is 2"),
    "zero degree": (["model.degrees=[6,0]"], "model.degrees", "integers >= 1"),
    "degrees not a list": (["model.degrees=6"], "model.degrees", "must be a list"),
    "unknown dataset group": (["dataset=nope"], "dataset", "unknown option 'nope'; expected one of: long_range"),
    "unknown dataset name": (["dataset.name=nope"], "dataset.name", "unknown dataset 'nope'; expected one of"),
    "unknown pyg name": (["dataset=pyg", "dataset.pyg_name=Karate"], "dataset.pyg_name",
                         "unknown PyG dataset 'Karate'"),
    "unknown preset": (["+experiment=nope"], "experiment", "unknown option 'nope'"),
    "unknown key": (["model.hiden=32"], "model.hiden", "Key 'hiden' is not in struct"),
    # `+` is what Hydra's error for an unknown key suggests; the added key would be read by nothing.
    "added unknown key": (["+train.epoch=5"], "train.epoch",
                          "unknown key; valid keys in train: batch_size, classification_loss, device, distributed, ema_decay, epochs"),
    "force-added unknown key": (["++model.hiden=32"], "model.hiden", "unknown key; valid keys in model: deepnorm, degree_signal"),
    "added unknown nested key": (["+preprocess.expander.degre=4"], "preprocess.expander.degre",
                                 "valid keys in preprocess.expander: degree, enabled, max_tries"),
    "added unknown dataset key": (["+experiment=cora", "+dataset.standardise=true"], "dataset.standardise",
                                  "valid keys in dataset: name, path, split, split_index, standardize"),
    "missing value": (["dataset=npz"], "dataset.path", "Missing mandatory value"),
    "unknown sampler": (["sampler=best"], "sampler", "unknown option 'best'; expected one of: full, reservoir, topk"),
    "unknown sampler method": (["sampler.method=best"], "sampler.method", "expected one of reservoir, uniform, topk"),
    "the sampler moved": (["train.sampler=uniform"], "train.sampler", "moved to the sampler group: sampler=reservoir"),
    "the learning rate moved": (["train.lr=0.1"], "train.lr", "moved to optimizer.lr"),
    "unknown device": (["train.device=tpu"], "train.device", "expected one of auto, cpu, cuda"),
    "unknown stage": (["stage=deploy"], "stage", "expected one of all, preprocess"),
    "zero train epochs": (["train.epochs=0"], "train.epochs", "integer >= 1, found 0"),
    "negative estimator epochs": (["estimator.epochs=-3"], "estimator.epochs", "integer >= 1, found -3"),
    "zero hidden": (["model.hidden=0"], "model.hidden", "integer >= 1"),
    "zero heads": (["model.heads=0"], "model.heads", "integer >= 1"),
    "zero layers": (["model.num_layers=0"], "model.num_layers", "integer >= 1"),
    "zero estimator width": (["estimator.width=0"], "estimator.width", "integer >= 1"),
    "hidden not divisible by heads": (["model.hidden=15"], "model.hidden", "not divisible by model.heads=2"),
    "estimator depth differs": (["estimator.num_layers=3"], "estimator.num_layers", "differs from model.num_layers"),
    "dropout above one": (["model.dropout=1.5"], "model.dropout", "in [0, 1)"),
    "negative dropout": (["model.dropout=-0.1"], "model.dropout", "in [0, 1)"),
    "temperature decay above one": (["estimator.temperature.gamma=1.5"], "estimator.temperature.gamma", "in (0, 1]"),
    "zero temperature floor": (["estimator.temperature.minimum=0"], "estimator.temperature.minimum", "in (0, 1]"),
    "zero learning rate": (["optimizer.lr=0"], "optimizer.lr", "> 0"),
    "negative optimizer weight decay": (["optimizer.weight_decay=-1"], "optimizer.weight_decay", ">= 0"),
    "beta of one": (["optimizer.betas=[0.9,1.0]"], "optimizer.betas", "two numbers in [0, 1)"),
    "added optimizer key": (["+optimizer.momentum=0.9"], "optimizer.momentum",
                            "unknown key; valid keys in optimizer: betas, eps, lr, name, weight_decay"),
    "unknown optimizer name": (["optimizer.name=sgd"], "optimizer.name", "expected one of adamw, adam"),
    "feed-forward switch not a boolean": (["model.feed_forward=2"], "model.feed_forward", "true or false"),
    "negative weight decay": (["estimator.weight_decay=-1"], "estimator.weight_decay", ">= 0"),
    "negative warm-up": (["train.warmup_epochs=-1"], "train.warmup_epochs", "integer >= 0"),
    "zero batch size": (["train.batch_size=0"], "train.batch_size", "null or an integer >= 1"),
    "batches with full attention": (["sampler=full", "train.batch_size=8"], "train.batch_size",
                                    "must be null with sampler=full"),
    "zero eval interval": (["train.eval_every=0"], "train.eval_every", "integer >= 1"),
    "negative mmap threshold": (["orchestration.train_malloc_mmap_threshold_kb=-1"],
                                "orchestration.train_malloc_mmap_threshold_kb", "null or an integer >= 1"),
    "moving average that never moves": (["train.ema_decay=1"], "train.ema_decay", "must be null or a number in (0, 1)"),
    "moving average of a string": (["train.ema_decay='0.9'"], "train.ema_decay", "must be null or a number in (0, 1)"),
    "negative seed": (["seed=-1"], "seed", "integer >= 0"),
    "zero processes per node": (["train.distributed.nproc_per_node=0"], "train.distributed.nproc_per_node",
                                "integer >= 1"),
    "zero nodes": (["train.distributed.nnodes=0"], "train.distributed.nnodes", "integer >= 1"),
    "endpoint without a port": (["train.distributed.rdzv_endpoint=head-node"], "train.distributed.rdzv_endpoint",
                                "null or host:port"),
    "processes without batches": (["train.distributed.nproc_per_node=2"], "train.batch_size",
                                  "must be an integer >= 4 (2 per process) with train.distributed on 2 processes"),
    "batches smaller than two per process": (["train.distributed.nproc_per_node=4", "train.batch_size=6"],
                                             "train.batch_size", "integer >= 8"),
    "nodes without an endpoint": (["train.distributed.nnodes=2", "train.batch_size=8"],
                                  "train.distributed.rdzv_endpoint", "must be host:port with"),
    "switch not a boolean": (["model.deepnorm=maybe"], "model.deepnorm", "true or false"),
    "bad override syntax": (["model.degrees=[1,2"], "overrides", "no viable alternative"),
    # Dataset values that need no file to judge are configuration, refused with the rest of it.
    "TU fold past the last": (["dataset=tu", "dataset.fold=10"], "dataset.fold",
                              "must be an integer in 0..9 (dataset.num_folds=10), found 10"),
    "TU of one fold": (["dataset=tu", "dataset.num_folds=1"], "dataset.num_folds", "integer >= 2"),
    "PATTERN too small to split": (["dataset=sbm_pattern", "dataset.num_graphs=6"], "dataset.num_graphs",
                                   "must be at least 7 so that train, val and test each get a graph"),
    "CLUSTER too small to split": (["+experiment=cluster_cpu", "dataset.num_graphs=11"], "dataset.num_graphs",
                                   "must be at least 12"),
    "negative generator seed": (["dataset=sbm_cluster", "dataset.generator_seed=-1"], "dataset.generator_seed",
                                "integer >= 0"),
}


@pytest.mark.parametrize("case", sorted(BAD_VALUES))
def test_bad_value_gives_one_line_naming_the_key(case, artifacts_dir, capsys):
    overrides, key, problem = BAD_VALUES[case]
    assert main(["run", *TINY_MODEL, *overrides]) == 2  # no grid size: some cases switch the dataset
    err = capsys.readouterr().err
    assert err.startswith("error: ") and f" {key}: " in err and problem in err, err
    assert err.count("\n") == 1 and "Traceback" not in err, err
    assert not artifacts_dir.exists()  # no stage folder, no MLflow store


# Values a dataset's loader checks (when the run's preflight loads the data, before any stage).
BAD_DATASET_VALUES = {
    "mine fraction above one": (["dataset.mine_fraction=1.5"], "dataset.mine_fraction"),
    "split fractions above one": (["dataset.split.train=0.9"], "fractions must sum to at most 1"),
    "empty grid": (["dataset.height=0"], "dataset.height"),
}


@pytest.mark.parametrize("case", sorted(BAD_DATASET_VALUES))
def test_bad_dataset_value_is_rejected_before_any_stage(case, artifacts_dir, capsys):
    overrides, expected = BAD_DATASET_VALUES[case]
    assert main(["run", *TINY_OVERRIDES, *overrides]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and expected in err and err.count("\n") == 1, err
    assert not artifacts_dir.exists()


def test_every_problem_is_named_on_the_one_line(artifacts_dir, capsys):
    assert main(["run", *TINY_OVERRIDES, "train.epochs=0", "model.dropout=2", "train.device=tpu"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1
    assert all(f"{key}: " in err for key in ("train.epochs", "model.dropout", "train.device")), err


@pytest.mark.parametrize("preset", ["pattern", "pattern_cpu", "cluster", "cluster_cpu"])
def test_the_sbm_presets_train_both_networks_with_weighted_cross_entropy(preset):
    cfg = compose_config([f"+experiment={preset}"])
    assert cfg["train"]["classification_loss"] == cfg["estimator"]["classification_loss"] == "weighted_cross_entropy"
    assert compose_config([])["train"]["classification_loss"] == "cross_entropy"  # the default weighs rows alike


@pytest.mark.parametrize("preset", sorted(path.stem for path in (config_dir() / "experiment").glob("*.yaml")))
def test_every_preset_passes_validation(preset):
    compose_config([f"+experiment={preset}"])  # raises ConfigError if a rule rejects a shipped preset


def test_force_added_existing_keys_and_presets_still_apply():
    cfg = compose_config(["+experiment=cora", "++train.epochs=7", "++dataset.split.train=0.5"])
    assert cfg["train"]["epochs"] == 7 and cfg["dataset"]["split"]["train"] == 0.5
    assert cfg["dataset"]["path"].endswith("cora.npz") and cfg["model"]["hidden"] == 64  # the preset's values


def test_every_dataset_config_has_the_standardize_switch_off():
    required = {"npz": ["dataset.path=x.npz"], "pyg": ["dataset.pyg_name=Cora"],
                "parquet": ["dataset.nodes.path=n.parquet", "dataset.edges.path=e.parquet"],
                "molecules": ["dataset.path=m.csv", "dataset.label_columns=[y]"], "ogb": ["dataset.ogb_name=ogbn-arxiv"]}
    for name in sorted(path.stem for path in (config_dir() / "dataset").glob("*.yaml")):
        assert compose_config([f"dataset={name}", *required.get(name, [])])["dataset"]["standardize"] is False


def test_standardize_must_be_a_boolean(artifacts_dir, capsys):
    assert main(["run", *TINY_OVERRIDES, "dataset.standardize=maybe"]) == 2
    err = capsys.readouterr().err
    assert err == "error: dataset.standardize: must be true or false, found 'maybe'\n", err


# --- the typed groups (sgt_core/config/) ---------------------------------------------------------------------


def _composed_with(key: str, value) -> dict:
    """The default config as a plain dict, with one dotted key set (or added) by hand, as a preset could."""
    cfg = compose_config()
    *parents, last = key.split(".")
    group = cfg
    for part in parents:
        group = group[part]
    group[last] = value
    return cfg


@pytest.mark.parametrize("key, value, message", [
    ("preprocess.expander.degree", "ten", "preprocess.expander.degree: must be an even integer >= 2, found 'ten'"),
    ("train.epochs", 2.5, "train.epochs: must be an integer >= 1, found 2.5"),  # a wrong type
    ("model.dropout", 1.0, "model.dropout: must be a number in [0, 1), found 1.0"),  # out of range
    ("model.input_dropout", -0.1, "model.input_dropout: must be a number in [0, 1), found -0.1"),
    ("estimator.temperature.gamma", 0, "estimator.temperature.gamma: must be a number in (0, 1], found 0"),
    ("optimizer.eps", -1e-8, "optimizer.eps: must be a number > 0, found -1e-08"),
    ("train.distributed.nnodes", True, "train.distributed.nnodes: must be an integer >= 1, found True"),
    ("model.hiden", 32, "model.hiden: unknown key; valid keys in model: deepnorm, degree_signal, degrees, dropout, feed_forward"),
    ("preprocess.expander.degre", 4, "preprocess.expander.degre: unknown key; valid keys in preprocess.expander"),
    ("sampler.name", "reservoir", "sampler.name: unknown key; valid keys in sampler: method"),
    ("colour", "blue", "colour: unknown key; valid keys in the config: dataset, estimator"),
    ("model.local", "gin", "model.local: expected one of none, gcn, sage, gatv2, appnp, gine, found 'gin'"),
    ("model.local_aggregation", "max", "model.local_aggregation: expected one of mean, sum"),
    ("model.degree_signal", "yes", "model.degree_signal: must be true or false"),
    ("model.local_steps", 0, "model.local_steps: must be null or an integer >= 1, found 0"),
    ("model.local_teleport", 1.0, "model.local_teleport: must be null or a number in [0, 1), found 1.0"),
    # the default branch is sage: the appnp branch's keys are refused on it, in one error
    ("model.local_steps", 3, ("model.local_steps: local_steps=3: only model.local=appnp reads it, but model.local "
                              "is sage; set it to null or model.local to appnp")),
    ("model.local_top_k", 32, "model.local_top_k: local_top_k=32: only model.local=appnp reads it"),
    ("model.local_top_k", 0, "model.local_top_k: must be null or an integer >= 1, found 0"),
    ("train.classification_loss", "focal",
     "train.classification_loss: expected one of cross_entropy, weighted_cross_entropy, found 'focal'"),
])
def test_a_bad_value_in_a_group_is_one_error_naming_its_key(key, value, message):
    with pytest.raises(ConfigProblems) as error:
        validate_config(_composed_with(key, value))
    assert str(error.value).startswith(message), str(error.value)
    assert len(error.value.problems) == 1, str(error.value)


def test_the_appnp_keys_belong_to_the_appnp_branch_alone():
    """Set on gcn (one hop, no special case left) they are one error naming all of them; appnp needs its
    steps and teleport."""
    cfg = _composed_with("model.local", "gcn")
    cfg["model"]["local_steps"], cfg["model"]["local_teleport"] = 10, 0.1
    with pytest.raises(ConfigProblems) as error:
        validate_config(cfg)
    assert str(error.value).startswith("model.local_steps: local_steps=10, local_teleport=0.1: only model.local=appnp "
                                       "reads them, but model.local is gcn"), str(error.value)
    assert len(error.value.problems) == 1
    cfg["model"]["local"] = "appnp"
    validate_config(cfg)
    cfg["model"]["local_teleport"] = None
    with pytest.raises(ConfigError, match=r"^model\.local_teleport: model\.local=appnp needs its propagation steps"):
        validate_config(cfg)


def test_precise_batch_norm_is_for_one_training_process():
    cfg = _composed_with("train.precise_bn_batches", 10)
    validate_config(cfg)
    cfg["train"]["batch_size"], cfg["train"]["distributed"]["nproc_per_node"] = 64, 2
    with pytest.raises(ConfigError, match=r"^train\.precise_bn_batches: must be null with train\.distributed on 2 "):
        validate_config(cfg)


def test_propagation_steps_refuse_algorithm_2_batches_without_top_k_rows():
    cfg = _composed_with("model.local", "appnp")
    cfg["model"]["local_steps"], cfg["model"]["local_teleport"], cfg["train"]["batch_size"] = 10, 0.1, 256
    with pytest.raises(ConfigError, match=r"^model\.local_steps: 10 propagation steps need full-graph training"):
        validate_config(cfg)
    cfg["train"]["batch_size"] = None
    validate_config(cfg)
    cfg["train"]["batch_size"], cfg["model"]["local_top_k"] = 256, 32  # PPRGo's rows: one hop per layer again
    validate_config(cfg)


def test_a_missing_key_is_named():
    cfg = compose_config()
    del cfg["train"]["distributed"]["nnodes"]
    with pytest.raises(ConfigError, match=r"^train\.distributed\.nnodes: missing$"):
        validate_config(cfg)


def test_problems_in_several_groups_are_all_named():
    cfg = _composed_with("train.epochs", 0)
    cfg["preprocess"]["virtual_nodes"] = -1
    cfg["optimizer"]["lr"] = "fast"
    with pytest.raises(ConfigError) as error:
        validate_config(cfg)
    assert all(f"{key}: " in str(error.value) for key in ("train.epochs", "preprocess.virtual_nodes", "optimizer.lr"))


def test_a_group_built_by_hand_is_checked_as_one_read_from_conf():
    with pytest.raises(ConfigError, match=r"^preprocess\.expander\.degree: must be an even integer >= 2, found 3$"):
        ExpanderConfig(degree=3)
    with pytest.raises(ConfigError, match=r"^preprocess\.anchors\.max_spd: must be an integer with k=2 < max_spd"):
        AnchorsConfig(k=2, max_spd=2)
    with pytest.raises(ConfigError, match=r"^preprocess\.substructures\.types\.hexagon: unknown key"):
        SubstructuresConfig(types={"hexagon": 3})
    ExpanderConfig(enabled=False, degree=3)  # a switched-off component's values are read by nothing


def test_the_typed_config_holds_every_value_of_the_dict():
    cfg = compose_config(["+experiment=all_components", "orchestration=pools"])
    config = validate_config(cfg)
    assert config.as_dict() == cfg  # so what is hashed and logged (the dict) is what the stages read
    assert config.preprocess.expander.degree == cfg["preprocess"]["expander"]["degree"]
    assert isinstance(config.preprocess.lpe, LpeConfig) and config.preprocess.lpe.m == 8


def _option_overrides() -> list[list[str]]:
    """One composition per option file of every group in conf/, plus every experiment preset."""
    required = {"npz": ["dataset.path=x.npz"], "pyg": ["dataset.pyg_name=Cora"],
                "parquet": ["dataset.nodes.path=n.parquet", "dataset.edges.path=e.parquet"],
                "molecules": ["dataset.path=m.csv", "dataset.label_columns=[y]"], "ogb": ["dataset.ogb_name=ogbn-arxiv"]}
    runs = []
    for group in sorted(path for path in config_dir().iterdir() if path.is_dir()):
        for option in sorted(group.glob("*.yaml")):
            if group.name == "experiment":
                runs.append([f"+experiment={option.stem}"])
            else:
                runs.append([f"{group.name}={option.stem}", *required.get(option.stem, [])])
    return runs


@pytest.mark.parametrize("overrides", _option_overrides(), ids=" ".join)
def test_every_yaml_file_in_conf_composes_and_validates(overrides):
    config = validate_config(compose_config(overrides))
    assert isinstance(config.sampler, SamplerConfig) and isinstance(config.optimizer, OptimizerConfig)


def test_the_default_sampler_and_optimizer_are_todays():
    cfg = compose_config()
    assert cfg["sampler"] == {"method": "reservoir"}
    assert cfg["optimizer"] == {"name": "adamw", "lr": 0.01, "weight_decay": 1.0e-3, "betas": [0.9, 0.999],
                                "eps": 1.0e-8}
    assert cfg["optimizer"]["betas"] == list(inspect.signature(AdamW).parameters["betas"].default)
    assert cfg["optimizer"]["eps"] == inspect.signature(AdamW).parameters["eps"].default
    assert compose_config(["sampler=full"])["sampler"]["method"] == "full"


def test_full_attention_takes_batches_of_whole_graphs_on_sets_of_many_graphs_only():
    """sampler=full with train.batch_size: whole graphs per batch on a set of many graphs (the graph-level
    benchmark's full-attention rows), refused on one graph, where a batch samples fixed degrees."""
    from sgt_core.config.dataset import ONE_GRAPH_LOADERS, is_one_graph
    from sgt_core.data.load import LOADERS

    assert set(ONE_GRAPH_LOADERS) < set(LOADERS)
    assert compose_config(["+experiment=zinc_cpu", "sampler=full"])["train"]["batch_size"] == 32
    assert compose_config(["+experiment=tu_cpu", "sampler=full"])["train"]["batch_size"] == 32
    tables = ["dataset=parquet", "dataset.nodes.path=nodes.parquet", "dataset.edges.path=edges.parquet",
              "sampler=full", "train.batch_size=8"]
    assert compose_config([*tables, "dataset.nodes.graph_id=mol", "dataset.graphs.path=graphs.parquet"])
    with pytest.raises(ConfigError, match="must be null with sampler=full on one graph"):
        compose_config(tables)
    assert is_one_graph({"name": "minesweeper"}) and not is_one_graph({"name": "molecules"})


def test_each_optimizer_option_names_its_class_and_takes_its_arguments():
    """`optimizer=adamw|adam`: `name` is the option's own and picks the class; the other keys are its arguments."""
    from sgt_core.optim import OPTIMIZERS

    options = sorted(path.stem for path in (REPO_ROOT / "conf" / "optimizer").glob("*.yaml"))
    assert options == sorted(OPTIMIZERS) == ["adam", "adamw"]
    for option in options:
        config = validate_config(compose_config([f"optimizer={option}"])).optimizer
        assert config.name == option
        assert set(config.arguments()) <= set(inspect.signature(OPTIMIZERS[option]).parameters)
    cora = compose_config(["+experiment=cora_hybrid"])["optimizer"]  # Adam's coupled L2, as before
    assert (cora["name"], cora["weight_decay"]) == ("adam", 1.0e-3)


def test_the_train_stage_key_and_checkpoint_cover_the_sampler_and_the_optimizer():
    assert {"sampler", "optimizer"} <= set(STAGE_BY_NAME["train"].config_sections)


def test_the_defaults_of_hand_built_groups_are_confs():
    preprocess = compose_config()["preprocess"]
    for name, group in (("expander", ExpanderConfig), ("anchors", AnchorsConfig),
                        ("substructures", SubstructuresConfig), ("lpe", LpeConfig)):
        defaults = group().as_dict()
        assert {key: value for key, value in defaults.items() if key != "enabled"} == {
            key: value for key, value in preprocess[name].items() if key != "enabled"}, name


def test_the_network_groups_pass_their_networks_arguments_and_keep_their_training_ones():
    from sgt_core.models import AttentionScoreEstimator, Spexphormer

    config = validate_config(compose_config(["+experiment=all_components"]))
    sizes = {"in_features": 3, "num_outputs": 2, "num_edge_types": 4, "num_node_kinds": 3, "lpe_eigenpairs": 8}
    estimator, model = config.estimator.network_arguments(), config.model.network_arguments()
    assert estimator.keys().isdisjoint({"epochs", "lr", "weight_decay", "warmup_epochs", "temperature", "batch_size",
                                        "regression_loss"})
    assert "degrees" not in model and model["hidden"] == config.model.hidden
    AttentionScoreEstimator(**sizes, **estimator)  # an unknown argument would raise TypeError
    Spexphormer(**sizes, **model)


def test_the_config_lists_match_the_code_they_name():
    from sgt_core.data.load import LOADERS
    from sgt_core.data.pyg import PYG_DATASETS
    from sgt_core.preprocess.interaction_graph import SUBSTRUCTURE_TYPES as VOCABULARY
    from sgt_core.preprocess.substructures.matching import DEFAULT_SUBSTRUCTURE_CAPS as MATCHING_CAPS
    from sgt_core.sampling import TRAIN_SAMPLERS

    assert DATASET_NAMES == tuple(LOADERS)
    assert [name.lower() for name in PYG_NAMES] == list(PYG_DATASETS)
    assert SUBSTRUCTURE_TYPES == VOCABULARY and DEFAULT_SUBSTRUCTURE_CAPS == MATCHING_CAPS
    assert METHODS == TRAIN_SAMPLERS


def test_checking_a_config_imports_no_model_dataset_or_torch_code():
    script = """
import sys
from sgt_core.config import compose_config, validate_config
validate_config(compose_config(["+experiment=all_components"]))
heavy = ("torch", "torch_geometric", "sgt_core.models", "sgt_core.data", "sgt_core.preprocess", "sgt_core.sampling")
print(" ".join(sorted(name for name in sys.modules if name.startswith(heavy))))
"""
    result = subprocess.run([sys.executable, "-c", script], check=False, capture_output=True, text=True,
                            cwd=REPO_ROOT)
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == [], result.stdout
