"""A new sqlite MLflow store copied from the empty one MLflow made once equals the store MLflow makes itself."""

from __future__ import annotations

import sqlite3

from mlflow.tracking import MlflowClient

from flows.mlflow_store import create_store, ensure_store, template_store


def schema(database) -> tuple[list, list, list]:
    """Every table and index (each definition's lines sorted: MLflow's own migrations write a table's
    constraints in an order that varies from one store to the next), the migration version, the experiments."""
    connection = sqlite3.connect(database)
    try:
        objects = connection.execute("SELECT type, name, tbl_name, sql FROM sqlite_master ORDER BY type, name")
        return ([(kind, name, table, sorted(line.strip().rstrip(",") for line in (sql or "").splitlines()))
                 for kind, name, table, sql in objects],
                connection.execute("SELECT * FROM alembic_version").fetchall(),
                connection.execute("SELECT experiment_id, name, artifact_location, lifecycle_stage FROM experiments")
                .fetchall())
    finally:
        connection.close()


def test_a_copied_store_is_the_store_mlflow_makes(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    monkeypatch.chdir(tmp_path)
    MlflowClient(f"sqlite:///{tmp_path / 'by_mlflow.db'}")  # its tables and every migration
    template = template_store()
    assert template.parent == tmp_path / "cache" / "sgt" / "mlflow-stores" and template_store() == template

    copied = tmp_path / "runs" / "mlflow.db"
    copied.parent.mkdir()
    ensure_store(f"sqlite:///{copied}")
    assert schema(copied) == schema(tmp_path / "by_mlflow.db")  # tables, indexes, version, Default's folder
    assert not list(copied.parent.glob(".*.tmp"))  # written beside, then renamed

    client = MlflowClient(f"sqlite:///{copied}")  # MLflow takes it as its own: nothing to migrate, runs log
    run = client.create_run(client.create_experiment("e", artifact_location=(tmp_path / "mlruns").as_uri())).info
    client.log_metric(run.run_id, "m", 1.0)
    assert client.get_run(run.run_id).data.metrics == {"m": 1.0}

    before = copied.stat().st_mtime_ns
    ensure_store(f"sqlite:///{copied}")  # an existing store is left alone
    assert copied.stat().st_mtime_ns == before
    create_store(tmp_path / "fresh.db")
    assert schema(tmp_path / "fresh.db")[1] == schema(copied)[1]
