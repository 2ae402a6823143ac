"""What `sgt run` leaves on stderr: after a good run no report of objects alive at exit, after bad input the
error line last. DuckDB's bindings (nanobind) print ~47 lines of "leaked" at exit when its objects outlive
the interpreter (`flows.cli.program`); a run over Parquet tables is what imports DuckDB in the `sgt` process."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from tests.conftest import REPO_ROOT, TINY_MODEL
from tests.flows.cli_process import TEMPORARY, temporary_server_env

SUBPROCESS_TIMEOUT = 300  # seconds; starting Python, torch and Prefect on a busy 2-core machine is slow


def write_tables(folder: Path, missing_node: bool = False) -> list[str]:
    """A 60-node graph as a node and an edge Parquet table; with `missing_node`, an edge names node id 999."""
    rng = np.random.default_rng(0)
    num_nodes = 60
    pq.write_table(pa.table({"id": np.arange(num_nodes), "f0": rng.random(num_nodes), "f1": rng.random(num_nodes),
                             "label": np.arange(num_nodes) % 2}), folder / "nodes.parquet")
    src, dst = rng.integers(0, num_nodes, 240), rng.integers(0, num_nodes, 240)
    if missing_node:
        dst[7] = 999
    pq.write_table(pa.table({"src": src, "dst": dst}), folder / "edges.parquet")
    return ["dataset=parquet", "dataset.graph_name=stderr", f"dataset.nodes.path={folder / 'nodes.parquet'}",
            f"dataset.edges.path={folder / 'edges.parquet'}", "dataset.nodes.features=f*", "dataset.nodes.split=null"]


def sgt_run(arguments: list[str], env: dict[str, str]) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "flows.cli", "run", *arguments], cwd=REPO_ROOT, env=env,
                          capture_output=True, text=True, timeout=SUBPROCESS_TIMEOUT, check=False)


def test_a_parquet_run_ends_without_leak_reports(tmp_path, pipeline_env):
    done = sgt_run([*write_tables(tmp_path), *TINY_MODEL, f"paths.artifacts={tmp_path / 'artifacts'}"],
                   pipeline_env)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "leaked" not in done.stderr, done.stderr[-3000:]
    assert "test_roc_auc" in done.stdout  # the run did read its tables and train


@pytest.mark.parametrize("case", ["found before the server starts", "found by loading the tables"])
def test_bad_parquet_input_ends_with_the_error_line(tmp_path, temporary_prefect_home, case):
    arguments = write_tables(tmp_path, missing_node=case == "found by loading the tables")
    if case == "found before the server starts":  # DuckDB reads the files' footers in the `sgt` process
        (tmp_path / "edges.parquet").write_bytes(b"PAR1 not a Parquet file")
    done = sgt_run([*arguments, TEMPORARY, f"paths.artifacts={tmp_path / 'artifacts'}"],
                   temporary_server_env(temporary_prefect_home))
    assert done.returncode == 2, done.stderr[-3000:]
    last_line = done.stderr.rstrip("\n").splitlines()[-1]
    assert last_line.startswith(f"error: {tmp_path / 'edges.parquet'}: "), done.stderr[-3000:]
    assert "leaked" not in done.stderr, done.stderr[-3000:]
