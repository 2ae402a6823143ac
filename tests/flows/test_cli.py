"""The `sgt` command: bad input gives one clear error, a non-zero exit, no traceback, and writes nothing."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest

from flows.cli import main
from tests.conftest import TINY_MODEL, TINY_OVERRIDES


def write_heterophilous(path, **changes):
    n = 20
    arrays = {
        "node_features": np.random.default_rng(0).normal(size=(n, 3)).astype(np.float32),
        "node_labels": np.arange(n) % 2,
        "edges": np.stack([np.arange(n - 1), np.arange(1, n)], axis=1),
        "train_masks": (np.arange(n) % 3 == 0)[None],
        "val_masks": (np.arange(n) % 3 == 1)[None],
        "test_masks": (np.arange(n) % 3 == 2)[None],
    }
    arrays.update(changes)
    np.savez(path, **{k: v for k, v in arrays.items() if v is not None})
    return path


def nan_features():
    features = np.zeros((20, 3), np.float32)
    features[4, 1] = np.nan
    return features


BAD_FILES = {
    "missing keys": ({"edges": None}, "edges"),
    "wrong shapes": ({"node_labels": np.zeros(7, dtype=np.int64)}, "label"),
    "edges out of range": ({"edges": np.array([[0, 1], [3, 99]])}, "99"),
    "nan features": ({"node_features": nan_features()}, "NaN"),
    "labels do not match masks": ({"test_masks": np.ones((1, 5), dtype=bool)}, "mask"),
}


@pytest.mark.parametrize("case", sorted(BAD_FILES))
def test_bad_npz_gives_one_clear_error(case, tmp_path, artifacts_dir, capsys):
    changes, expected = BAD_FILES[case]
    path = write_heterophilous(tmp_path / "bad.npz", **changes)
    assert main(["run", *TINY_MODEL, "dataset=npz", f"dataset.path={path}"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and str(path) in err and expected in err
    assert "Traceback" not in err
    assert not artifacts_dir.exists()  # nothing written: no stage folder, no MLflow store


@pytest.mark.parametrize(
    "overrides, expected",
    [
        (["preprocess.expander.degree=5"], "even"),
        (["model.degrees=[3,3,3]"], "model.degrees: has 3 entries"),
        (["dataset=nope"], "dataset"),
        (["sampler=best"], "sampler: unknown option 'best'"),
    ],
)
def test_bad_config_is_rejected_before_any_stage(overrides, expected, artifacts_dir, capsys):
    assert main(["run", *TINY_OVERRIDES, *overrides]) == 2
    err = capsys.readouterr().err
    assert expected in err and "Traceback" not in err
    assert not artifacts_dir.exists()


def test_missing_file_through_the_installed_command(tmp_path, artifacts_dir):
    missing = tmp_path / "absent.npz"
    completed = subprocess.run(
        [sys.executable, "-m", "flows.cli", "run", "dataset=npz", f"dataset.path={missing}"],
        capture_output=True, text=True, timeout=120, check=False,
    )
    assert completed.returncode == 2
    assert str(missing) in completed.stderr and "no such file" in completed.stderr.lower()
    assert "Traceback" not in completed.stderr
    assert not artifacts_dir.exists()


def test_help_lists_commands():
    completed = subprocess.run([sys.executable, "-m", "flows.cli", "--help"], capture_output=True, text=True,
                               check=False)
    assert completed.returncode == 0 and "run" in completed.stdout and "scores" in completed.stdout
