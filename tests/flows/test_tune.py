"""`sgt tune`: trials as nested pipeline runs sharing the stage cache, a resumed study, pruning, the space."""

from __future__ import annotations

import contextlib
import io
import json
import shutil
from pathlib import Path

import optuna
import pytest
import yaml
from mlflow.tracking import MlflowClient
from optuna.trial import FixedTrial, TrialState

from flows.cli import main
from flows.tune import (
    check_tuning,
    epoch_value,
    pruning_listener,
    sample_overrides,
    sgt_tune,
    write_preset,
)
from sgt_core.config import compose_config, config_dir
from sgt_core.config.tune import Choices, FloatRange, IntRange, PerLayer, parse_space
from sgt_core.errors import ConfigError
from sgt_core.train.evaluation_listeners import listening, notify
from tests.conftest import TINY_OVERRIDES

# Only training options are searched (conf/tune/quick.yaml), and no trial is pruned (startup_trials): every
# trial after the first reuses its preprocess, estimate and export results, and each ends complete.
QUICK = [*TINY_OVERRIDES, "tune=quick", "tune.pruner.startup_trials=10"]
PRESET = "tiny_tuned"


@pytest.fixture(scope="module")
def tuned(prefect_server, tmp_path_factory):
    """Two trials, a trial left RUNNING as by a killed process, then the same command resumed to three
    finished trials through the CLI, writing a preset into a copy of conf/."""
    root = tmp_path_factory.mktemp("tune")
    conf = shutil.copytree(config_dir(), root / "conf")
    overrides = [*QUICK, f"paths.artifacts={root / 'artifacts'}", "mlflow.tracking_uri=null"]
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("SGT_CONF_DIR", str(conf))  # the preset goes there, not into the repository's conf/
        first = sgt_tune([*overrides, "tune.trials=2"])
        study = optuna.load_study(study_name=first["study"], storage=first["storage"])
        study.ask()  # RUNNING, with no process recorded: as a `sgt tune` killed while it started a trial
        printed = io.StringIO()
        with contextlib.redirect_stdout(printed):
            assert main(["tune", *overrides, "tune.trials=3", f"tune.preset={PRESET}"]) == 0
        preset_cfg = compose_config([f"+experiment={PRESET}"])
    client = MlflowClient(f"sqlite:///{root / 'artifacts' / 'mlflow.db'}")
    study = optuna.load_study(study_name=first["study"], storage=first["storage"])
    return {"root": root, "conf": conf, "first": first, "study": study, "printed": printed.getvalue(),
            "client": client, "preset_cfg": preset_cfg, "overrides": overrides}


def tuning_runs(client: MlflowClient) -> list:
    experiment = client.get_experiment_by_name("sgt-minesweeper")
    return client.search_runs([experiment.experiment_id], "tags.`sgt.stage` = 'tuning'")


def trial_runs(client: MlflowClient, tuning_run_id: str) -> dict:
    run = client.get_run(tuning_run_id)
    runs = client.search_runs([run.info.experiment_id], f"tags.mlflow.parentRunId = '{tuning_run_id}'")
    return {int(run.data.tags["sgt.trial"]): run for run in runs}


def stage_cache_hits(client: MlflowClient, pipeline_run) -> dict[str, bool]:
    children = client.search_runs([pipeline_run.info.experiment_id],
                                  f"tags.mlflow.parentRunId = '{pipeline_run.info.run_id}'")
    return {child.data.tags["sgt.stage"]: child.data.tags["sgt.cache_hit"] == "true" for child in children}


def test_each_trial_is_a_pipeline_run_nested_in_the_tuning_run(tuned):
    client, study = tuned["client"], tuned["study"]
    (tuning,) = tuning_runs(client)
    assert tuning.info.status == "FINISHED" and tuning.data.tags["sgt.study"] == study.study_name
    trials = trial_runs(client, tuning.info.run_id)
    assert sorted(trials) == [0, 1, 3]  # trial 2 is the one left running
    for number, run in trials.items():
        assert run.data.tags["sgt.stage"] == "pipeline" and run.info.status == "FINISHED"
        assert run.data.tags["sgt.trial_state"] == "complete"
        frozen = study.trials[number]
        assert run.data.tags["sgt.trial_overrides"] == " ".join(frozen.user_attrs["overrides"])
        assert float(run.data.params["optimizer.lr"]) == pytest.approx(frozen.params["optimizer.lr"])
        assert run.data.params["model.local"] == frozen.params["model.local"]
        assert run.data.metrics["val_roc_auc"] == frozen.value  # the objective: train's selection metric
        assert not any(param.startswith("tune.") for param in run.data.params)  # the pipeline reads no tune.*
    # Trials differing only in training options reuse the first trial's upstream stages.
    assert stage_cache_hits(client, trials[0]) == dict.fromkeys(("preprocess", "estimate", "export", "train"), False)
    for later in (1, 3):
        assert stage_cache_hits(client, trials[later]) == {"preprocess": True, "estimate": True, "export": True,
                                                           "train": False}


def test_the_tuning_run_holds_the_best_configuration_and_the_trials_plot(tuned, tmp_path):
    client, study = tuned["client"], tuned["study"]
    (tuning,) = tuning_runs(client)
    run_id = tuning.info.run_id
    assert tuning.data.metrics["best_value"] == study.best_value
    assert [m.step for m in client.get_metric_history(run_id, "trial_value")] == [0, 1, 3]
    best_steps = client.get_metric_history(run_id, "best_value")
    assert max(best_steps, key=lambda m: m.step).value == study.best_value
    assert {"best_config.yaml", "plots"} <= {artifact.path for artifact in client.list_artifacts(run_id)}
    assert "plots/trials.png" in {artifact.path for artifact in client.list_artifacts(run_id, "plots")}
    best = yaml.safe_load(Path(client.download_artifacts(run_id, "best_config.yaml", str(tmp_path))).read_text())
    assert best["trial"] == study.best_trial.number and best["value"] == study.best_value
    assert best["overrides"] == study.best_trial.user_attrs["overrides"] and best["metric"] == "val_roc_auc"
    assert best["config"]["optimizer"]["lr"] == pytest.approx(study.best_params["optimizer.lr"])
    assert "best: trial" in tuned["printed"] and run_id in tuned["printed"]


def test_the_preset_composes_to_the_best_trial(tuned):
    study, cfg = tuned["study"], tuned["preset_cfg"]
    path = tuned["conf"] / "experiment" / f"{PRESET}.yaml"
    assert path.read_text().startswith("# @package _global_\n")
    assert f"preset written to {path}" in tuned["printed"]
    assert cfg["optimizer"]["lr"] == pytest.approx(study.best_params["optimizer.lr"])
    assert cfg["model"]["dropout"] == pytest.approx(study.best_params["model.dropout"])
    assert cfg["model"]["local"] == study.best_params["model.local"]
    assert cfg["dataset"]["height"] == 12 and cfg["model"]["degrees"] == [6, 4]  # the base overrides too
    assert not (config_dir() / "experiment" / f"{PRESET}.yaml").exists()
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("SGT_CONF_DIR", str(tuned["conf"]))
        with pytest.raises(ConfigError, match=r"^tune\.preset: .* exists; .*tune\.overwrite_preset=true"):
            write_preset(PRESET, False, [], {}, "")


def test_a_preset_includes_the_base_preset_and_group_choices(tmp_path, monkeypatch):
    monkeypatch.setenv("SGT_CONF_DIR", str(shutil.copytree(config_dir(), tmp_path / "conf")))
    overrides = ["+experiment=cora", "dataset=npz", "dataset.path=elsewhere.npz", "paths.artifacts=/x",
                 "tune.trials=3", "optimizer.lr=0.0123", "model.degrees=[8,8]", "model.local=sage"]
    path = write_preset("cora_tuned", False, overrides, compose_config(overrides), "# @package _global_\n")
    assert path.read_text().splitlines()[1:5] == ["defaults:", "- cora", "- override /dataset: npz", "- _self_"]
    cfg = compose_config(["+experiment=cora_tuned"])
    assert cfg["dataset"]["path"] == "elsewhere.npz" and cfg["estimator"]["width"] == 8  # cora's estimator
    assert (cfg["optimizer"]["lr"], cfg["model"]["degrees"], cfg["model"]["local"]) == (0.0123, [8, 8], "sage")
    with pytest.raises(ConfigError, match=r"^tune\.preset: cannot write the override ~model\.local"):
        write_preset("other", False, ["~model.local"], {}, "# @package _global_\n")
    assert not (tmp_path / "conf" / "experiment" / "other.yaml").exists()


def test_a_resumed_study_fails_the_stale_trial_and_runs_only_the_missing_one(tuned):
    study, first = tuned["study"], tuned["first"]
    assert [trial["number"] for trial in first["trials"]] == [0, 1]
    states = [trial.state for trial in study.trials]
    assert states == [TrialState.COMPLETE, TrialState.COMPLETE, TrialState.FAIL, TrialState.COMPLETE]
    assert study.user_attrs["mlflow_run_id"] == first["run_id"]  # the same tuning run, reopened
    assert [run.info.run_id for run in tuning_runs(tuned["client"])] == [first["run_id"]]
    assert first["study"].startswith("minesweeper-")  # named from the search, not from tune.trials or preset
    assert tuned["first"]["storage"] == f"sqlite:///{tuned['root'] / 'artifacts' / 'tune' / first['study']}.db"


def test_a_pruned_trial_ends_its_pipeline_run_killed(tuned, capsys):
    def stop_at_epoch_one(epoch: int, row: dict) -> None:
        if epoch == 1:
            raise optuna.TrialPruned("stopped by the test at epoch 1")

    # stage=train: the new study's first draw is the other's first, whose train result is cached.
    overrides = [*tuned["overrides"], "tune.study=pruned", "tune.trials=1", "stage=train"]
    with listening(stop_at_epoch_one):
        assert main(["tune", *overrides]) == 0
    captured = capsys.readouterr()
    assert "Traceback" not in captured.err and "no trial completed" in captured.out
    study = optuna.load_study(study_name="pruned", storage=f"sqlite:///{tuned['root'] / 'artifacts/tune/pruned.db'}")
    (trial,) = study.trials
    assert trial.state == TrialState.PRUNED and trial.intermediate_values == {0: pytest.approx(trial.value)}
    client = tuned["client"]
    (tuning,) = [run for run in tuning_runs(client) if run.data.tags["sgt.study"] == "pruned"]
    pipeline = trial_runs(client, tuning.info.run_id)[0]
    assert pipeline.info.status == "KILLED" and pipeline.data.tags["sgt.trial_state"] == "pruned"
    assert stage_cache_hits(client, pipeline) == {"preprocess": True, "estimate": True, "export": True,
                                                  "train": False}


def test_the_pruning_listener_stops_a_trial_through_the_train_stage_hook():
    study = optuna.create_study(direction="maximize",
                                pruner=optuna.pruners.MedianPruner(n_startup_trials=1, n_warmup_steps=1))
    good = study.ask()
    with listening(pruning_listener(good, None)):
        for epoch, value in enumerate([0.7, 0.8, 0.9]):
            notify(epoch, {"epoch": epoch, "loss": 1.0, "val_loss": 0.5, "val_roc_auc": value})
    study.tell(good, 0.9)
    poor = study.ask()
    with listening(pruning_listener(poor, None)):
        notify(0, {"epoch": 0, "loss": 1.0, "val_loss": 0.5, "val_roc_auc": 0.2})  # warm-up: not pruned
        notify(1, {"epoch": 1, "loss": 1.0, "val_loss": 0.5})  # no metric on this row: nothing reported
        with pytest.raises(optuna.TrialPruned, match="pruned at epoch 2"):
            notify(2, {"epoch": 2, "loss": 1.0, "val_loss": 0.5, "val_roc_auc": 0.3})
    assert study.trials[1].intermediate_values == {0: 0.2, 2: 0.3}  # the best so far, per epoch
    notify(3, {"epoch": 3})  # the block has ended: nobody listens
    assert epoch_value({"val_loss": 0.4, "val_accuracy": 0.6}, None) == 0.6
    assert epoch_value({"val_accuracy": 0.6, "val_f1": 0.2}, "val_f1") == 0.2


def test_the_space_reads_each_spec_form():
    space = parse_space({
        "optimizer": {"lr": {"low": 1e-3, "high": 3e-2, "log": True}},
        "model": {"hidden": {"choices": [32, 64]}, "num_layers": {"low": 2, "high": 6, "int": True},
                  "degrees": {"first": {"choices": [8, 12]}, "others": {"low": 3, "high": 9, "int": True}}},
    })
    assert space == {
        "optimizer.lr": FloatRange(1e-3, 3e-2, log=True),
        "model.hidden": Choices((32, 64)),
        "model.num_layers": IntRange(2, 6),
        "model.degrees": PerLayer(Choices((8, 12)), IntRange(3, 9)),
    }


def test_sampled_degrees_follow_the_sampled_depth_and_the_overrides_compose():
    cfg = compose_config(TINY_OVERRIDES)
    distributions = compose_config(["tune=default"])["tune"]["space"]
    fixed = FixedTrial({"optimizer.lr": 0.005, "model.dropout": 0.25, "model.input_dropout": 0.5,
                        "model.hidden": 64, "model.num_layers": 3,
                        "model.degrees.first": 12, "model.degrees.others": 5, "model.local": "none",
                        "model.local_aggregation": "sum", "model.degree_signal": True,
                        "preprocess.expander.degree": 6, "estimator.width": 4})
    sampled = sample_overrides(fixed, parse_space(distributions), cfg)
    assert sampled == ["optimizer.lr=0.005", "model.dropout=0.25", "model.input_dropout=0.5", "model.hidden=64",
                       "model.num_layers=3",
                       "estimator.num_layers=3", "model.degrees=[12,5,5]", "model.local=none",
                       "model.local_aggregation=sum", "model.degree_signal=true", "preprocess.expander.degree=6",
                       "estimator.width=4"]
    composed = compose_config([*TINY_OVERRIDES, *sampled])
    assert composed["model"]["degrees"] == [12, 5, 5] and composed["model"]["local"] == "none"
    # Without a sampled depth, the base configuration's (2 layers) decides.
    quick = parse_space({"model": {"degrees": {"first": {"choices": [9]}, "others": {"choices": [4]}}}})
    assert sample_overrides(FixedTrial({"model.degrees.first": 9, "model.degrees.others": 4}), quick, cfg) == [
        "model.degrees=[9,4]"]


def test_a_drawn_branch_is_only_its_own_override():
    # No branch has a special case: a drawn gcn is one GCN hop, and the appnp branch's keys are appnp's own,
    # so on an appnp base (cora_hybrid's) a drawn sage is an invalid trial, which the study skips.
    appnp_base = [*TINY_OVERRIDES, "model.local=appnp", "model.local_steps=10", "model.local_teleport=0.1"]
    cfg = compose_config(appnp_base)
    space = parse_space({"model": {"local": {"choices": ["gcn", "sage", "none"]}}})
    for branch in ("gcn", "sage", "none"):
        assert sample_overrides(FixedTrial({"model.local": branch}), space, cfg) == [f"model.local={branch}"]
        composed = compose_config([*TINY_OVERRIDES, f"model.local={branch}"])
        assert (composed["model"]["local"], composed["model"]["local_steps"]) == (branch, None)
    with pytest.raises(ConfigError, match=r"model\.local_steps"):  # what the trial fails on
        compose_config([*appnp_base, "model.local=sage"])


@pytest.mark.parametrize("overrides, message", [
    (["tune.space.model.dropout.low=0.9"], r"^tune\.space\.model\.dropout: low and high must be numbers with low < high"),
    (["+tune.space.model.hidden={choices:[]}"], r"^tune\.space\.model\.hidden: choices: must be a non-empty list"),
    (["+tune.space.model.heads={low:1,high:4,step:1}"], r"^tune\.space\.model\.heads: unknown keys step"),
    (["tune.space.optimizer.lr.low=0"], r"^tune\.space\.optimizer\.lr: log: true needs low > 0"),
    (["+tune.space.model.num_layers={choices:[2,3]}"],
     r"^tune\.space\.model\.num_layers: sampling the depth needs tune\.space\.model\.degrees as \{first"),
    (["+tune.space.model.hidden={first:{choices:[3]},others:{choices:[2]}}"],
     r"^tune\.space\.model\.hidden: \{first, others\} samples one entry per layer, for model\.degrees only"),
    (["tune.trials=0"], r"^tune\.trials: must be an integer >= 1"),
    (["tune.metric=val_loss"], r"^tune\.metric: must be null or a validation metric to maximise"),
])
def test_a_bad_space_or_tune_value_gives_one_clear_error(overrides, message):
    with pytest.raises(ConfigError, match=message) as error:
        compose_config(["tune=quick", *overrides])
    assert len(error.value.problems) == 1, str(error.value)


def test_tune_checks_the_space_names_keys_of_the_configuration():
    with pytest.raises(ConfigError, match=r"^tune\.space\.model\.widht: model\.widht names no value"):
        check_tuning(compose_config(["tune=quick", "+tune.space.model.widht={choices:[1,2]}"]))
    with pytest.raises(ConfigError, match=r"^paths\.artifacts: sgt tune keeps its Optuna study in a sqlite file"):
        check_tuning(compose_config(["tune=quick", "paths.artifacts=s3://bucket/sgt", "mlflow.tracking_uri=x"]))


def test_tune_options_leave_every_stage_key_unchanged(tmp_path, capsys):
    def keys(*overrides: str) -> dict:
        assert main(["stages", "--json", f"paths.artifacts={tmp_path}", *overrides]) == 0
        return {stage["stage"]: stage["key"] for stage in json.loads(capsys.readouterr().out)["stages"]}

    assert keys() == keys("tune=quick", "tune.trials=7", "tune.study=x", "tune.space.model.dropout.high=0.3")
