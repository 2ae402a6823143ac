"""paths.artifacts as an object-store URL: the pipeline against a real S3-compatible server (moto's, in a thread)."""

from __future__ import annotations

import json

import pytest
from mlflow.tracking import MlflowClient

from flows.cli import main
from flows.pipeline import sgt_pipeline
from sgt_core.artifacts import MANIFEST_FILE
from sgt_core.config import STAGE_NAMES
from sgt_core.object_store import ObjectArtifactStore
from tests.conftest import TINY_OVERRIDES

moto_server = pytest.importorskip("moto.server", reason="moto[server] is not installed (the [dev] extra has it)")
pytest.importorskip("s3fs", reason="s3fs is not installed (the [dev] extra has it)")

BUCKET = "sgt-test"


@pytest.fixture(scope="module")
def s3_endpoint():
    """A real S3-compatible server on a free local port for this module."""
    server = moto_server.ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    yield f"http://{host}:{port}"
    server.stop()


@pytest.fixture
def s3(s3_endpoint, monkeypatch, tmp_path):
    """Credentials and endpoint through the standard variables, a fresh bucket, a private local cache."""
    monkeypatch.setenv("AWS_ENDPOINT_URL", s3_endpoint)
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    monkeypatch.setenv("AWS_DEFAULT_REGION", "us-east-1")
    monkeypatch.setenv("SGT_OBJECT_CACHE", str(tmp_path / "cache"))
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    import s3fs

    s3fs.S3FileSystem.clear_instance_cache()
    fs = s3fs.S3FileSystem()
    if not fs.exists(BUCKET):
        fs.mkdir(BUCKET)
    return fs


def test_pipeline_on_an_object_store(prefect_server, s3, tmp_path, monkeypatch, capsys):
    url = f"s3://{BUCKET}/run-{tmp_path.name}"
    tracking = f"sqlite:///{tmp_path / 'mlflow.db'}"
    overrides = [*TINY_OVERRIDES, f"paths.artifacts={url}", f"mlflow.tracking_uri={tracking}"]
    first = sgt_pipeline(overrides)
    assert first["artifacts"] == url
    for name, key in first["keys"].items():
        prefix = f"{BUCKET}/run-{tmp_path.name}/{name}/{key}"
        manifest = json.loads(s3.cat_file(f"{prefix}/{MANIFEST_FILE}"))
        stored = {path.removeprefix(prefix + "/") for path in s3.find(prefix)}
        assert stored == {*manifest["files"], MANIFEST_FILE}, name
        assert first["stages"][name]["path"] == f"{url}/{name}/{key}" and not first["stages"][name]["cache_hit"]
    client = MlflowClient(tracking)
    parent = client.get_run(first["run_id"])
    children = client.search_runs([parent.info.experiment_id], f"tags.mlflow.parentRunId = '{first['run_id']}'")
    assert {run.data.tags["sgt.artifact_dir"] for run in children} == {
        f"{url}/{name}/{first['keys'][name]}" for name in STAGE_NAMES}

    # Another machine: an empty local cache. Every stage is a cache hit, downloaded and verified.
    monkeypatch.setenv("SGT_OBJECT_CACHE", str(tmp_path / "other-cache"))
    second = sgt_pipeline(overrides)
    assert all(stage["cache_hit"] for stage in second["stages"].values())
    assert second["metrics"] == first["metrics"]

    # A writer killed mid-upload leaves the files without their manifest (uploaded last): not a result.
    train_key = first["keys"]["train"]
    s3.rm_file(f"{BUCKET}/run-{tmp_path.name}/train/{train_key}/{MANIFEST_FILE}")
    store = ObjectArtifactStore(url)
    assert not store.is_complete("train", train_key)
    assert main(["stages", *overrides, "--json"]) == 0
    listed = {s["stage"]: s for s in json.loads(capsys.readouterr().out)["stages"]}
    assert not listed["train"]["cached"] and listed["train"]["damage"].startswith("no manifest.json")
    assert listed["export"]["cached"] and listed["export"]["files"]
    third = sgt_pipeline(overrides)
    hits = {name: stage["cache_hit"] for name, stage in third["stages"].items()}
    assert hits == {"preprocess": True, "estimate": True, "export": True, "train": False}
    assert store.is_complete("train", train_key, checksums=True)
    assert third["metrics"] == first["metrics"]


def test_object_store_needs_an_mlflow_store_elsewhere(s3, capsys):
    assert main(["run", *TINY_OVERRIDES, f"paths.artifacts=s3://{BUCKET}/x", "mlflow.tracking_uri=null"]) == 2
    assert capsys.readouterr().err.startswith("error: mlflow.tracking_uri: must be set")


def test_top_k_propagation_rows_kept_in_an_object_store(s3, tmp_path, monkeypatch):
    """The train stage's rows (`model.local_top_k`) go to the object store like a stage's result, and another
    machine, with an empty local cache, reads them instead of computing them."""
    import torch

    from sgt_core.train import propagation_rows
    from sgt_core.train.propagation_rows import PROPAGATION, ROWS_FILE, kept_top_k

    url = f"s3://{BUCKET}/rows-{tmp_path.name}"
    generator = torch.Generator().manual_seed(0)
    source, target = torch.randint(0, 300, (2, 2000), generator=generator)
    keep = (source[source != target], target[source != target], 300, 10, 0.1, 8)
    computed = kept_top_k(ObjectArtifactStore(url), *keep)
    (key,) = {path.split("/")[-1] for path in s3.ls(f"{BUCKET}/rows-{tmp_path.name}/{PROPAGATION}")}
    prefix = f"{BUCKET}/rows-{tmp_path.name}/{PROPAGATION}/{key}"
    assert set(json.loads(s3.cat_file(f"{prefix}/{MANIFEST_FILE}"))["files"]) >= {ROWS_FILE}

    monkeypatch.setenv("SGT_OBJECT_CACHE", str(tmp_path / "other-cache"))
    monkeypatch.setattr(propagation_rows, "appnp_top_k", lambda *args: pytest.fail("computed again"))
    read = kept_top_k(ObjectArtifactStore(url), *keep)
    assert torch.equal(read.neighbours, computed.neighbours) and torch.equal(read.weights, computed.weights)
    assert (tmp_path / "other-cache").is_dir()
