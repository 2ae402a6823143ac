"""Bad configuration values: `sgt run` exits 2 with one line `error: <key>: <problem>` and writes nothing."""

from __future__ import annotations

import pytest

from flows.cli import main
from sgt_core.config import compose_config, config_dir
from tests.conftest import TINY_MODEL, TINY_OVERRIDES

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
                          "unknown key; valid keys in train: batch_size, device, distributed, epochs, eval_every, lr"),
    "force-added unknown key": (["++model.hiden=32"], "model.hiden", "unknown key; valid keys in model: deepnorm"),
    "added unknown nested key": (["+preprocess.expander.degre=4"], "preprocess.expander.degre",
                                 "valid keys in preprocess.expander: degree, enabled, max_tries"),
    "added unknown dataset key": (["+experiment=cora", "+dataset.standardise=true"], "dataset.standardise",
                                  "valid keys in dataset: name, path, split, split_index, standardize"),
    "missing value": (["dataset=npz"], "dataset.path", "Missing mandatory value"),
    "unknown sampler": (["train.sampler=best"], "train.sampler", "expected one of reservoir"),
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
    "zero learning rate": (["train.lr=0"], "train.lr", "> 0"),
    "negative weight decay": (["estimator.weight_decay=-1"], "estimator.weight_decay", ">= 0"),
    "negative warm-up": (["train.warmup_epochs=-1"], "train.warmup_epochs", "integer >= 0"),
    "zero batch size": (["train.batch_size=0"], "train.batch_size", "null or an integer >= 1"),
    "batches with full attention": (["train.sampler=full", "train.batch_size=8"], "train.batch_size",
                                    "must be null with train.sampler=full"),
    "zero eval interval": (["train.eval_every=0"], "train.eval_every", "integer >= 1"),
    "negative mmap threshold": (["train.malloc_mmap_threshold_kb=-1"], "train.malloc_mmap_threshold_kb",
                                "null or an integer >= 1"),
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


@pytest.mark.parametrize("preset", sorted(path.stem for path in (config_dir() / "experiment").glob("*.yaml")))
def test_every_preset_passes_validation(preset):
    compose_config([f"+experiment={preset}"])  # raises ConfigError if a rule rejects a shipped preset


def test_force_added_existing_keys_and_presets_still_apply():
    cfg = compose_config(["+experiment=cora", "++train.epochs=7", "++dataset.split.train=0.5"])
    assert cfg["train"]["epochs"] == 7 and cfg["dataset"]["split"]["train"] == 0.5
    assert cfg["dataset"]["path"].endswith("cora.npz") and cfg["model"]["hidden"] == 64  # the preset's values


def test_every_dataset_config_has_the_standardize_switch_off():
    required = {"npz": ["dataset.path=x.npz"], "pyg": ["dataset.pyg_name=Cora"],
                "parquet": ["dataset.nodes.path=n.parquet", "dataset.edges.path=e.parquet"]}
    for name in sorted(path.stem for path in (config_dir() / "dataset").glob("*.yaml")):
        assert compose_config([f"dataset={name}", *required.get(name, [])])["dataset"]["standardize"] is False


def test_standardize_must_be_a_boolean(artifacts_dir, capsys):
    assert main(["run", *TINY_OVERRIDES, "dataset.standardize=maybe"]) == 2
    err = capsys.readouterr().err
    assert err == "error: dataset.standardize: must be true or false, found 'maybe'\n", err
