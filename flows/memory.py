"""Samples a stage's resident memory (RSS) in a background thread while it runs, here or in its own process."""

from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import Self

# Often enough to catch a stage's peak, rare enough that the sampling thread costs nothing measurable.
INTERVAL_SECONDS = 0.5


def status_mb(field: str) -> float | None:
    """A memory field of /proc/self/status (VmRSS; VmHWM, the peak) in MB; None where there is no such file.

    Imports nothing, so a process measuring its own peak (a stage, a benchmark) carries no extra module.
    """
    status = Path("/proc/self/status")
    if status.exists():
        for line in status.read_text().splitlines():
            if line.startswith(f"{field}:"):
                return int(line.split()[1]) / 1024  # kB
    return None


class MemorySampler:
    """Context manager recording (seconds since start, RSS in MB) every `interval` seconds.

    The thread mostly sleeps in `Event.wait`, so it holds the GIL for microseconds per sample; a sample is
    also taken on entry and on exit, so even a stage shorter than one interval has a start and an end.
    """

    def __init__(self, interval: float = INTERVAL_SECONDS) -> None:
        self.interval = interval
        self.samples: list[tuple[float, float]] = []
        import psutil  # here, not at the top: status_mb's users should not pay for it

        self._psutil = psutil
        self._process = psutil.Process()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="sgt-memory-sampler", daemon=True)
        self._started = 0.0
        self.started_at = 0.0  # wall-clock time (time.time()) of the first sample

    def follow(self, pid: int) -> None:
        """Samples process `pid` (the stage's own process) instead of this one, from its start."""
        self.samples.clear()  # this process's entry sample is not the stage's
        self._started, self.started_at = time.perf_counter(), time.time()
        try:
            self._process = self._psutil.Process(pid)
        except self._psutil.NoSuchProcess:  # a short stage can end before a busy flow process gets here
            self._process = None  # its own high-water mark (`record`) is all there is to know
            return
        self._sample()

    def record(self, rss_mb: float) -> None:
        """Adds a sample taken elsewhere now: the stage process's own high-water mark as it ended."""
        self.samples.append((time.perf_counter() - self._started, rss_mb))

    def __enter__(self) -> Self:
        self._started, self.started_at = time.perf_counter(), time.time()
        self._sample()
        self._thread.start()
        return self

    def __exit__(self, *exc_info) -> None:
        self._stop.set()
        self._thread.join()
        self._sample()

    @property
    def peak_mb(self) -> float:
        return max((rss for _, rss in self.samples), default=0.0)

    def _sample(self) -> None:
        if self._process is None:
            return
        try:
            rss_mb = self._process.memory_info().rss / 2**20
        except self._psutil.NoSuchProcess:  # the stage's process has just ended
            return
        if rss_mb == 0:
            # No address space: the process is exiting or a zombie not yet reaped (Linux reports 0 then,
            # without an error); that is not the stage's memory, and a 0 would end every trace at the floor.
            return
        self.samples.append((time.perf_counter() - self._started, rss_mb))

    def _run(self) -> None:
        while not self._stop.wait(self.interval):
            self._sample()
