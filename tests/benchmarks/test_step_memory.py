"""The benchmark's per-stage peak memory is the stage process's own, not its parent's."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


@pytest.mark.skipif(not Path("/proc/self/status").exists(), reason="needs Linux's /proc to read VmHWM")
def test_a_stage_process_does_not_inherit_its_parents_peak_memory():
    parent_mb = 400
    ballast = b"\x01" * (parent_mb << 20)  # written, so every page is resident in this process
    assert ballast[-1] == 1
    report = subprocess.run(
        [sys.executable, "-c", "from benchmarks.stage_process import peak_rss_mb; print(peak_rss_mb())"],
        capture_output=True, text=True, cwd=REPO, check=True,
    )
    child_mb = float(report.stdout)
    # A bare interpreter is ~10-20 MB; getrusage's ru_maxrss would report at least the parent's 400 MB.
    assert 0 < child_mb < 100
