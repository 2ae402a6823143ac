"""Bad input is answered before any Prefect server starts and before torch is imported: a missing dataset file,
a CSV row that does not parse, an artifacts folder that cannot be written. (How fast, measured by hand, is in
benchmarks/results/2026-11-27-issue47.md: a unit test asserts the mechanism, not a time.)"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import psutil
import pytest

from flows.prefect_server import OUR_MODULE
from tests.conftest import REPO_ROOT
from tests.flows.cli_process import TEMPORARY, temporary_server_env
from tests.flows.test_stage_run import write_npz

HEAVY = ("torch", "prefect")  # what the fast path must not import


def sgt(arguments: list[str], env: dict[str, str], importtime: bool = False) -> tuple[int, str, set[str]]:
    """`python [-X importtime] -m flows.cli ARGUMENTS`: its status, its output less the import times, and the
    top-level packages it imported (with `importtime`)."""
    flags = ["-X", "importtime"] if importtime else []
    done = subprocess.run([sys.executable, *flags, "-m", "flows.cli", *arguments], cwd=REPO_ROOT,
                          env=env, capture_output=True, text=True, timeout=300, check=False)
    imported = {line.split("|")[-1].strip().split(".")[0] for line in done.stderr.splitlines()
                if line.startswith("import time:")}
    output = "\n".join(line for line in (done.stdout + done.stderr).splitlines() if not line.startswith("import time:"))
    return done.returncode, output, imported


def error_line(output: str) -> str:
    (line,) = [line for line in output.splitlines() if line.startswith("error:")]
    return line


def broken_tables(folder: Path) -> list[str]:
    """dataset=parquet over a node CSV whose third line has a field too many."""
    (folder / "nodes.csv").write_text("id,features,label\n1,0.5,0\n2,0.1,1,7\n3,0.2,1\n")
    (folder / "edges.csv").write_text("src,dst\n1,2\n")
    return ["dataset=parquet", f"dataset.nodes.path={folder / 'nodes.csv'}", f"dataset.edges.path={folder / 'edges.csv'}",
            "dataset.nodes.split=null"]


@pytest.mark.parametrize("case", ["missing npz", "unreadable csv", "unwritable artifacts", "missing zinc folder",
                                  "tu folder without its files", "smiles table without its label column",
                                  "tu fold out of range", "too few generated graphs"])
def test_bad_input_is_answered_before_torch_or_prefect_is_imported(tmp_path, case):
    artifacts = tmp_path / "artifacts"
    (tmp_path / "EMPTY").mkdir()
    (tmp_path / "molecules.csv").write_text("smiles,active\nCCO,1\n")
    arguments, expected = {
        "missing zinc folder": (["dataset=zinc", f"dataset.path={tmp_path / 'zinc'}"],
                                f"error: {tmp_path / 'zinc'}: no such file or folder (dataset.path)"),
        "tu folder without its files": (["dataset=tu", f"dataset.path={tmp_path / 'EMPTY'}"],
                                        f"error: {tmp_path / 'EMPTY' / 'EMPTY_A.txt'}: no such file"),
        "smiles table without its label column": (
            ["dataset=molecules", f"dataset.path={tmp_path / 'molecules.csv'}", "dataset.label_columns=[HIV_active]"],
            f"error: {tmp_path / 'molecules.csv'}: no column 'HIV_active'; its columns are smiles, active"),
        "tu fold out of range": (["dataset=tu", f"dataset.path={tmp_path / 'EMPTY'}", "dataset.fold=-1"],
                                 "error: dataset.fold: must be an integer in 0..9 (dataset.num_folds=10), found -1"),
        "too few generated graphs": (["+experiment=pattern_cpu", "dataset.num_graphs=2"],
                                     "error: dataset.num_graphs: must be at least 7"),
        "missing npz": (["dataset=npz", f"dataset.path={tmp_path / 'missing.npz'}"],
                        f"error: {tmp_path / 'missing.npz'}: no such file"),
        "unreadable csv": (broken_tables(tmp_path),
                           f"error: {tmp_path / 'nodes.csv'}: CSV parse error: Invalid Input Error: CSV Error on Line: 3"),
        "unwritable artifacts": ([], "error: /proc/forbidden: No such file or directory"),
    }[case]
    where = "paths.artifacts=/proc/forbidden" if case == "unwritable artifacts" else f"paths.artifacts={artifacts}"
    status, output, imported = sgt(["run", *arguments, where, TEMPORARY], temporary_server_env(tmp_path / "home"),
                                   importtime=True)
    assert status == 2, output
    assert error_line(output).startswith(expected), output
    assert "Traceback" not in output
    assert not imported & set(HEAVY), sorted(imported & set(HEAVY))
    assert not artifacts.exists() and not (tmp_path / "home").exists()  # nothing written, no Prefect home made


def test_bad_content_found_once_the_server_started_stops_it_at_once(tmp_path, temporary_prefect_home):
    """A 1-D feature array is found by the dataset's loader (torch), while the temporary server starts: the
    run answers without waiting for the server, and stops it."""
    path = write_npz(tmp_path / "flat.npz")
    arrays = dict(np.load(path))
    arrays["node_features"] = arrays["node_features"][:, 0]  # [N]: one value per node, no feature axis
    np.savez(path, **arrays)
    status, output, _ = sgt(["run", "dataset=npz", f"dataset.path={path}", TEMPORARY,
                             f"paths.artifacts={tmp_path / 'artifacts'}"], temporary_server_env(temporary_prefect_home))
    assert status == 2, output
    assert error_line(output).startswith(f"error: {path}: node features must be a 2-D array"), output
    assert servers_of(temporary_prefect_home) == []  # none left behind


def servers_of(home: Path) -> list[psutil.Process]:
    """The temporary Prefect servers running on the Prefect home `home`."""
    found = []
    for process in psutil.process_iter(["cmdline"]):
        try:
            if OUR_MODULE in (process.info["cmdline"] or []) and process.environ().get("PREFECT_HOME") == str(home):
                found.append(process)
        except psutil.Error:
            continue
    return found
