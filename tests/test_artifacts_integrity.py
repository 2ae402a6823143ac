"""Cached artifacts are reused only when whole: damaged ones are found, moved aside and recomputed."""

from __future__ import annotations

import contextlib
import io
import json
import logging
import re
from pathlib import Path

import pytest
import torch

from flows.cli import main
from sgt_core.artifacts import CORRUPT_PREFIX, MANIFEST_FILE, METRICS_FILE, ArtifactError, ArtifactStore
from sgt_core.estimate.stage import run_estimate
from sgt_core.export.outputs import SCORES_DIR
from sgt_core.preprocess.outputs import INTERACTION_GRAPH_FILE
from sgt_core.train.outputs import MODEL_FILE
from tests.conftest import TINY_OVERRIDES


def run_cli(capsys, *arguments: str) -> tuple[int, str]:
    """`sgt ARGUMENTS` in this process; its exit status and what it printed."""
    status = main(list(arguments))
    captured = capsys.readouterr()
    return status, captured.out + captured.err


def stage_states(*overrides: str, verify: bool = False) -> dict[str, dict]:
    output = io.StringIO()
    with contextlib.redirect_stdout(output):
        assert main(["stages", *TINY_OVERRIDES, *overrides, "--json", *(["--verify"] if verify else [])]) == 0
    return {stage["stage"]: stage for stage in json.loads(output.getvalue())["stages"]}


def ran(output: str, stage: str) -> bool:
    match = re.search(rf"^\s+{stage}\s+(ran|cached)\s", output, re.MULTILINE)
    assert match, output
    return match.group(1) == "ran"


@pytest.fixture(scope="module")
def store(prefect_server, tmp_path_factory):
    """One tiny run's artifacts, shared by the tests below: each damages one file and reruns, which
    leaves the store whole again."""
    root = tmp_path_factory.mktemp("integrity") / "artifacts"
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("SGT_ARTIFACTS", str(root))
        patch.delenv("MLFLOW_TRACKING_URI", raising=False)
        assert main(["run", *TINY_OVERRIDES]) == 0
        yield root


def folder_of(root: Path, stage: str) -> Path:
    (folder,) = [path for path in (root / stage).iterdir() if not path.name.startswith(".")]
    return folder


def truncate(path: Path) -> None:
    path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])


def test_the_manifest_records_every_file_with_its_size_and_checksum(store):
    for stage in ("preprocess", "estimate", "export", "train"):
        folder = folder_of(store, stage)
        files = json.loads((folder / MANIFEST_FILE).read_text())["files"]
        on_disk = {p.relative_to(folder).as_posix() for p in folder.rglob("*") if p.is_file()} - {MANIFEST_FILE}
        assert set(files) == on_disk and METRICS_FILE in files
        assert all(files[name]["size"] == (folder / name).stat().st_size for name in files)
        assert all(re.fullmatch(r"[0-9a-f]{16}", record["xxh3"]) for record in files.values())


def test_a_folder_without_its_manifest_is_moved_aside_and_recomputed(store, capsys, caplog):
    estimate = folder_of(store, "estimate")
    (estimate / MANIFEST_FILE).unlink()
    assert not stage_states()["estimate"]["cached"]

    with caplog.at_level(logging.WARNING, logger="sgt_core.artifacts"):
        status, output = run_cli(capsys, "run", *TINY_OVERRIDES)
    assert status == 0, output
    assert ran(output, "estimate") and not ran(output, "export") and not ran(output, "train")
    assert (estimate / MANIFEST_FILE).is_file()
    (aside,) = (store / "estimate").glob(f"{CORRUPT_PREFIX}{estimate.name}-*")  # kept for inspection
    assert (aside / "attention_scores.pt").is_file()
    assert any("damaged" in r.getMessage() and "no manifest.json" in r.getMessage() for r in caplog.records)
    status, output = run_cli(capsys, "run", *TINY_OVERRIDES)
    assert status == 0 and not any(ran(output, stage) for stage in ("preprocess", "estimate", "export", "train"))


def test_a_truncated_score_file_is_found_and_the_forced_train_rebuilds_it(store, capsys):
    layer = folder_of(store, "export") / SCORES_DIR / "layer_0.parquet"
    truncate(layer)
    states = stage_states()
    assert not states["export"]["cached"] and "layer_0.parquet" in states["export"]["damage"]

    status, output = run_cli(capsys, "run", *TINY_OVERRIDES, "stage=train")
    assert status == 0, output
    assert ran(output, "export") and ran(output, "train")
    assert stage_states()["export"]["cached"]


@pytest.mark.parametrize(("stage", "name"), [
    ("train", MODEL_FILE), ("preprocess", INTERACTION_GRAPH_FILE), ("estimate", METRICS_FILE),
])
def test_a_truncated_file_is_recomputed_instead_of_served(store, capsys, stage, name):
    truncate(folder_of(store, stage) / name)
    status, output = run_cli(capsys, "run", *TINY_OVERRIDES)
    assert status == 0, output
    assert ran(output, stage)
    assert "test_roc_auc" in output
    assert all(state["cached"] for state in stage_states().values())


def test_same_size_damage_is_found_by_checksum_before_a_stage_reads_it(store, capsys):
    graph = folder_of(store, "preprocess") / INTERACTION_GRAPH_FILE
    data = bytearray(graph.read_bytes())
    data[len(data) // 2] ^= 0xFF  # the size stays: only a checksum tells
    graph.write_bytes(bytes(data))
    assert stage_states()["preprocess"]["cached"]  # sizes only
    assert "checksum" in stage_states(verify=True)["preprocess"]["damage"]

    status, output = run_cli(capsys, "run", *TINY_OVERRIDES, "stage=estimate")
    assert status == 0, output
    assert ran(output, "preprocess") and ran(output, "estimate")
    assert stage_states(verify=True)["preprocess"]["cached"]


def test_a_final_result_swapped_for_another_runs_file_of_the_same_size_is_recomputed(store, capsys, caplog):
    """The train stage's result is the run's final one: no later stage reads it, so sizes alone used to let
    another run's checkpoint of the same shape be served with this run's metrics."""
    model = folder_of(store, "train") / MODEL_FILE
    status, output = run_cli(capsys, "run", *TINY_OVERRIDES, "optimizer.lr=0.02")  # another run's train
    assert status == 0, output
    others = [path for path in (store / "train").iterdir() if path.name != model.parent.name
              and not path.name.startswith(".")]
    (other,) = others
    assert (other / MODEL_FILE).stat().st_size == model.stat().st_size
    assert (other / MODEL_FILE).read_bytes() != model.read_bytes()
    model.write_bytes((other / MODEL_FILE).read_bytes())
    assert stage_states()["train"]["cached"]  # sizes only: `sgt stages` cannot tell
    assert "checksum" in stage_states(verify=True)["train"]["damage"]
    set_aside = set((store / "train").glob(f"{CORRUPT_PREFIX}*"))  # earlier tests' damaged folders

    with caplog.at_level(logging.WARNING, logger="sgt_core.artifacts"):
        status, output = run_cli(capsys, "run", *TINY_OVERRIDES)
    assert status == 0, output
    assert ran(output, "train") and not ran(output, "export")
    warnings = [r.getMessage() for r in caplog.records if "damaged" in r.getMessage()]
    assert len(warnings) == 1 and "model.pt's checksum differs" in warnings[0] and "moved it to" in warnings[0]
    (aside,) = set((store / "train").glob(f"{CORRUPT_PREFIX}{model.parent.name}-*")) - set_aside
    assert (aside / MODEL_FILE).read_bytes() == (other / MODEL_FILE).read_bytes()
    assert stage_states(verify=True)["train"]["cached"]


def test_sgt_scores_refuses_damaged_scores_of_the_same_size(store, capsys):
    layer = folder_of(store, "export") / SCORES_DIR / "layer_1.parquet"
    data = bytearray(layer.read_bytes())
    data[len(data) // 2] ^= 0xFF
    layer.write_bytes(bytes(data))
    status, output = run_cli(capsys, "scores", *TINY_OVERRIDES)
    assert status == 2
    (line,) = [line for line in output.splitlines() if line.startswith("error:")]
    assert "layer_1.parquet's checksum differs" in line and "the next `sgt run` moves it aside" in line
    status, output = run_cli(capsys, "run", *TINY_OVERRIDES)  # a cache hit on the reported scores: verified
    assert status == 0 and ran(output, "export"), output
    assert run_cli(capsys, "scores", *TINY_OVERRIDES)[0] == 0


def test_an_unreadable_input_names_the_file_and_the_override_that_rebuilds_it(tmp_path):
    preprocess = tmp_path / "preprocess"
    preprocess.mkdir()
    (preprocess / INTERACTION_GRAPH_FILE).write_bytes(b"not a torch file")
    with pytest.raises(ArtifactError) as error:
        run_estimate({"estimator": {}, "seed": 0}, {"preprocess": preprocess}, tmp_path / "estimate")
    message = str(error.value)
    assert str(preprocess / INTERACTION_GRAPH_FILE) in message and "sgt run stage=preprocess" in message


def test_writing_replaces_an_incomplete_folder_at_the_key(tmp_path):
    store = ArtifactStore(tmp_path)
    leftover = tmp_path / "train" / "k"
    leftover.mkdir(parents=True)
    (leftover / MODEL_FILE).write_bytes(b"half")
    with store.writing("train", "k") as staging:
        torch.save({"state_dict": {}}, staging / MODEL_FILE)
        store.finish(staging, {"ok": 1}, {})
    assert store.is_complete("train", "k", checksums=True) and store.metrics("train", "k") == {"ok": 1}
    (aside,) = (tmp_path / "train").glob(f"{CORRUPT_PREFIX}k-*")
    assert (aside / MODEL_FILE).read_bytes() == b"half"


def test_a_manifest_without_file_records_is_not_taken_as_complete(tmp_path):
    store = ArtifactStore(tmp_path)
    folder = tmp_path / "export" / "k"
    folder.mkdir(parents=True)
    (folder / METRICS_FILE).write_text("{}")
    (folder / MANIFEST_FILE).write_text(json.dumps({"stage": "export", "key": "k"}))  # an older SGT's
    assert not store.is_complete("export", "k")
    assert not store.reuse("export", "k") and not folder.exists()
