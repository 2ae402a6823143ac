"""`atomic_path`: a file appears whole under its name, or not at all, and no temporary file stays behind."""

from __future__ import annotations

import pytest

from sgt_core.artifacts import PARTIAL_PREFIX, atomic_path


def test_the_file_appears_under_its_name_once_written(tmp_path):
    target = tmp_path / "scale.png"
    with atomic_path(target) as partial:
        # beside it (a rename within one folder is atomic), with its suffix (matplotlib reads the format there)
        assert partial.parent == tmp_path and partial.suffix == ".png" and partial.name.startswith(PARTIAL_PREFIX)
        partial.write_text("new")
        assert not target.exists()
    assert target.read_text() == "new" and list(tmp_path.iterdir()) == [target]


def test_a_failed_write_keeps_the_old_file_and_removes_the_temporary_one(tmp_path):
    target = tmp_path / "layer_0.parquet"
    target.write_text("old")
    with pytest.raises(RuntimeError, match="disk full"), atomic_path(target) as partial:
        partial.write_text("half")
        raise RuntimeError("disk full")
    assert target.read_text() == "old" and list(tmp_path.iterdir()) == [target]


def test_the_temporary_file_matches_no_pattern_the_readers_glob(tmp_path):
    with atomic_path(tmp_path / "layer_0.parquet") as partial:
        partial.write_text("rows")
        assert not list(tmp_path.glob("layer_*.parquet"))
