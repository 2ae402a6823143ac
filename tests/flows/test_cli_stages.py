"""`sgt stages`, `sgt report` and every subcommand's --help, around one tiny real pipeline run."""

from __future__ import annotations

import contextlib
import io
import json
from pathlib import Path

import pytest
from mlflow.tracking import MlflowClient

from flows.cli import main
from flows.pipeline import sgt_pipeline
from sgt_core.config import STAGE_NAMES
from tests.conftest import TINY_OVERRIDES


def stages_json(*overrides: str) -> list[dict]:
    output = io.StringIO()
    with contextlib.redirect_stdout(output):
        assert main(["stages", *overrides, "--json"]) == 0
    return json.loads(output.getvalue())["stages"]


@pytest.fixture(scope="module")
def tiny_run(prefect_server, tmp_path_factory):
    """One tiny run in a private artifacts root (as `artifacts_dir` sets up, for the whole module), with
    `sgt stages` taken just before it."""
    root = tmp_path_factory.mktemp("cli") / "artifacts"
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("SGT_ARTIFACTS", str(root))
        patch.delenv("MLFLOW_TRACKING_URI", raising=False)
        before = stages_json(*TINY_OVERRIDES)
        result = sgt_pipeline(TINY_OVERRIDES)
        yield {"root": root, "before": before, "result": result}


def test_stages_before_a_run_shows_nothing_cached(tiny_run):
    before, result = tiny_run["before"], tiny_run["result"]
    assert [stage["stage"] for stage in before] == list(STAGE_NAMES)
    for stage in before:
        assert stage["key"] == result["keys"][stage["stage"]]
        assert stage["cached"] is False and stage["files"] == []
        assert Path(stage["path"]) == tiny_run["root"].resolve() / stage["stage"] / stage["key"]


def test_stages_after_a_run_lists_the_cached_artifacts(tiny_run, capsys):
    after = stages_json(*TINY_OVERRIDES)
    result = tiny_run["result"]
    for stage in after:
        assert stage["cached"] is True, stage["stage"]
        assert Path(stage["path"]) == Path(result["stages"][stage["stage"]]["path"]).resolve()
        assert stage["files"] and all(Path(file).is_file() for file in stage["files"])
    names = {stage["stage"]: {Path(f).relative_to(stage["path"]).as_posix() for f in stage["files"]}
             for stage in after}
    assert "interaction_graph.pt" in names["preprocess"]
    assert {"attention_scores.pt", "estimator.pt"} <= names["estimate"]
    assert names["export"] == {"attention_scores/layer_0.parquet", "attention_scores/layer_1.parquet"}
    assert names["train"] == {"model.pt"}

    assert main(["stages", *TINY_OVERRIDES]) == 0
    table = capsys.readouterr().out
    rows = {line.split()[0]: line.split() for line in table.splitlines() if line.split()[:1] == ["train"]}
    assert rows["train"][1:3] == [result["keys"]["train"], "yes"]
    assert "attention_scores/layer_1.parquet" in table and "model.pt" in table

    # another training option: only train's key changes, so only train is not cached
    changed = {stage["stage"]: stage["cached"] for stage in stages_json(*TINY_OVERRIDES, "optimizer.lr=0.5")}
    assert changed == {"preprocess": True, "estimate": True, "export": True, "train": False}


def test_report_shows_the_latest_run(tiny_run, capsys):
    result = tiny_run["result"]
    assert main(["report"]) == 0
    text = capsys.readouterr().out
    assert result["run_id"] in text
    assert f"test_roc_auc = {result['metrics']['test_roc_auc']:.4f}" in text
    assert all(str(Path(stage["path"]).resolve()) in text for stage in result["stages"].values())

    assert main(["report", *TINY_OVERRIDES, "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["run_id"] == result["run_id"] and report["status"] == "FINISHED"
    assert report["metrics"] == pytest.approx(result["metrics"])
    assert report["config"]["model.degrees"] == "[6, 4]" and report["config"]["train.epochs"] == "4"
    assert report["pipeline_seconds"] > 0
    assert [stage["stage"] for stage in report["stages"]] == list(STAGE_NAMES)
    for stage in report["stages"]:
        assert stage["cache_hit"] is False and stage["seconds"] > 0
        assert stage["key"] == result["keys"][stage["stage"]]
        assert stage["artifact_dir"] == str(Path(result["stages"][stage["stage"]]["path"]).resolve())


def test_report_by_run_id_of_a_stage_reports_its_pipeline(tiny_run, capsys):
    result = tiny_run["result"]
    client = MlflowClient(result["tracking_uri"])
    parent = client.get_run(result["run_id"])
    train_run = client.search_runs(
        [parent.info.experiment_id],
        f"tags.mlflow.parentRunId = '{result['run_id']}' AND tags.`sgt.stage` = 'train'",
    )[0]
    assert main(["report", "--run-id", train_run.info.run_id, "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["run_id"] == result["run_id"]

    assert main(["report", "--run-id", "0" * 32]) == 2
    assert "no such run" in capsys.readouterr().err


def test_report_of_a_configuration_never_run_is_an_error(tiny_run, capsys):
    assert main(["report", *TINY_OVERRIDES, "optimizer.lr=0.5"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and "no pipeline run of this configuration" in err
    assert "Traceback" not in err


def test_report_before_any_run_is_an_error_and_writes_nothing(artifacts_dir, capsys):
    assert main(["report"]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"error: {artifacts_dir.resolve() / 'mlflow.db'}: ") and "no pipeline run" in err
    assert not artifacts_dir.exists()


@pytest.mark.parametrize("command", ["run", "stages", "scores", "report"])
def test_every_subcommand_has_help_with_examples(command, capsys):
    with pytest.raises(SystemExit) as exit_info:
        main([command, "--help"])
    assert exit_info.value.code == 0
    out = capsys.readouterr().out
    assert out.startswith(f"usage: sgt {command}")
    assert out.count(f"  sgt {command}") >= 2  # at least two example command lines


def test_stages_without_top_k_rows_lists_none(tiny_run):
    output = io.StringIO()
    with contextlib.redirect_stdout(output):
        assert main(["stages", *TINY_OVERRIDES, "--json"]) == 0
    assert json.loads(output.getvalue())["propagation_rows"] is None


def test_stages_lists_the_top_k_propagation_rows_once_their_graph_is_cached(prefect_server, artifacts_dir, capsys):
    """`model.local_top_k`'s rows are kept beside the stages; their key is known from the cached graph."""
    top_k = [*TINY_OVERRIDES, "model.local=appnp", "model.local_steps=10", "model.local_teleport=0.1",
             "model.local_top_k=8", "train.batch_size=16"]

    def rows() -> dict:
        assert main(["stages", *top_k, "--json"]) == 0
        return json.loads(capsys.readouterr().out)["propagation_rows"]

    before = rows()
    assert before["key"] is None and before["cached"] is False and "preprocess" in before["unknown"]
    sgt_pipeline(top_k)
    after = rows()
    (kept,) = (artifacts_dir / "propagation").iterdir()
    assert after["key"] == kept.name and after["cached"] is True and after["damage"] is None
    assert after["files"] == [str((kept / "rows.pt").resolve())]
    assert main(["stages", *top_k]) == 0
    assert f"key {kept.name}, cached yes" in capsys.readouterr().out
    # another training option would read the same rows; another k would need its own
    assert main(["stages", *top_k, "optimizer.lr=0.5", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["propagation_rows"]["cached"] is True
    assert main(["stages", *top_k, "model.local_top_k=9", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["propagation_rows"]["cached"] is False
