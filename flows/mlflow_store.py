"""A new sqlite MLflow store, made as a copy of an empty store that MLflow created and migrated once.

MLflow builds a new sqlite store by creating its first tables and then running every Alembic migration since
(seconds of CPU), and a run waits for that before its first stage. The result depends only on MLflow's and
SQLAlchemy's versions, so it is made once per pair of versions (`template_store`, under
$XDG_CACHE_HOME/sgt/mlflow-stores, by MLflow's own `SqlAlchemyStore`), and every new store is a copy of it
(SQLite's backup API, milliseconds). The copy is the store MLflow would have made, but for the folder of
experiment 0 ("Default", which SGT never uses): MLflow puts it under the current folder, as the copy does.
"""

from __future__ import annotations

import os
import sqlite3
from pathlib import Path

from filelock import FileLock


def template_folder() -> Path:
    """$XDG_CACHE_HOME/sgt/mlflow-stores, else ~/.cache/sgt/mlflow-stores."""
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "sgt" / "mlflow-stores"


def template_store() -> Path:
    """The empty store MLflow made for this MLflow and SQLAlchemy, made now if it is not there yet."""
    import mlflow
    import sqlalchemy

    folder = template_folder()
    template = folder / f"empty-mlflow-{mlflow.__version__}-sqlalchemy-{sqlalchemy.__version__}.db"
    if template.is_file():
        return template
    folder.mkdir(parents=True, exist_ok=True)
    with FileLock(template.with_name(template.name + ".lock")):  # one process makes it; the others wait
        if not template.is_file():
            from mlflow.store.tracking.sqlalchemy_store import SqlAlchemyStore

            made = template.with_name(f".{template.name}.{os.getpid()}.tmp")
            made.unlink(missing_ok=True)
            store = SqlAlchemyStore(f"sqlite:///{made}", (folder / "mlruns").as_uri())  # tables, migrations
            store.engine.dispose()
            made.replace(template)
    return template


def create_store(database: Path) -> None:
    """Creates the sqlite store `database` (which must not exist) as a copy of `template_store()`, whole or
    not at all: it is written beside and renamed into place."""
    written = database.with_name(f".{database.name}.{os.getpid()}.tmp")
    source, target = sqlite3.connect(template_store()), sqlite3.connect(written)
    try:
        source.backup(target)
        with target:  # Default's folder where MLflow would have put it: ./mlruns/0 of the current folder
            target.execute("UPDATE experiments SET artifact_location = ? WHERE experiment_id = 0",
                           (str(Path.cwd() / "mlruns" / "0"),))
    finally:
        source.close()
        target.close()
    written.replace(database)


def ensure_store(uri: str) -> None:
    """Creates a sqlite store that does not exist yet (`create_store`); leaves any other store to MLflow. Call it
    under the store's creation lock, as every opening of a new store is."""
    if not uri.startswith("sqlite:///"):
        return
    database = Path(uri.removeprefix("sqlite:///"))
    if not database.exists():
        create_store(database)
