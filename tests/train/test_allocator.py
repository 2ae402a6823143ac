"""train.malloc_mmap_threshold_kb: freed activation-sized blocks go back to the system instead of the heap."""

from __future__ import annotations

import ctypes.util
import subprocess
import sys

import pytest

from sgt_core.train.allocator import set_mmap_threshold

# Run in a fresh process: the setting lasts for the rest of a process. The pattern is a training loop's:
# a freed 1.5 MB block (which raises glibc's default threshold), then many such blocks, each followed by a
# small long-lived one that pins the heap above it, then the big ones freed.
PATTERN = """
import sys, torch
from sgt_core.train.allocator import set_mmap_threshold
took = set_mmap_threshold(int(sys.argv[1]) or None)

def rss_mb():
    for line in open("/proc/self/status"):
        if line.startswith("VmRSS"):
            return int(line.split()[1]) / 1024

warm = torch.ones(393_216)  # 1.5 MB
del warm
blocks, pins = [], []
for _ in range(60):
    blocks.append(torch.ones(393_216))
    pins.append(torch.ones(64))
before = rss_mb()
blocks.clear()
print(took, before - rss_mb())
"""


def released_mb(threshold_kb: int) -> tuple[bool, float]:
    out = subprocess.run([sys.executable, "-c", PATTERN, str(threshold_kb)], capture_output=True, text=True,
                         check=True).stdout.split()
    return out[0] == "True", float(out[1])


@pytest.mark.skipif(not sys.platform.startswith("linux") or "libc.so" not in (ctypes.util.find_library("c") or ""),
                    reason="mallopt's M_MMAP_THRESHOLD is glibc's")
def test_a_fixed_threshold_returns_freed_blocks_to_the_system():
    took, released = released_mb(1024)
    assert took and released > 70  # 60 x 1.5 MB = 90 MB handed back
    took, released = released_mb(0)  # glibc's default: the same blocks stay in the heap
    assert not took and released < 20


def test_none_leaves_malloc_alone():
    assert set_mmap_threshold(None) is False
