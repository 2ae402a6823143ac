"""Progress of long loops: a tqdm bar on a terminal, a few plain log lines everywhere else."""

from __future__ import annotations

import logging
import sys
import time
from collections.abc import Iterable, Iterator, Sized
from typing import Generic, TextIO, TypeVar

from tqdm import tqdm

Item = TypeVar("Item")

# Off a terminal (CI, Prefect, log files) a bar would be hundreds of carriage-return redraws; instead one
# line at the first step, every 10% and the last, and at least every 30 s so a slow loop still shows life.
LOG_EVERY_PERCENT = 10
LOG_EVERY_SECONDS = 30.0

# Where this process's loop is: its description and the 0-based index of the item being worked on (for
# epochs, the epoch), or a loop of a child process this one waits for (a DDP rank's). What an interrupted
# run names; None outside any loop.
_position: tuple[str, int] | None = None


def current_position() -> tuple[str, int] | None:
    """The loop this process is in (or waits for) and the index of its item; None outside any loop."""
    return _position


def note_position(description: str, index: int) -> None:
    """Records the position of a loop another process ran for this one (a DDP rank's epochs)."""
    global _position
    _position = (description, index)


class Progress(Generic[Item]):
    """Iterates `items`, reporting progress and the latest metrics of the loop body.

    Example:
        epochs = Progress(range(num_epochs), "train epoch", log)
        for epoch in epochs:
            loss = ...
            epochs.set_metrics(loss=loss)

    A bar is drawn when `stream` (default: stderr) is a terminal; otherwise `logger` gets lines such as
    `train epoch 5/10 (50%) loss=0.6931 val_roc_auc=0.7012 [00:03 elapsed, eta 00:03]`.
    """

    def __init__(
        self,
        items: Iterable[Item],
        description: str,
        logger: logging.Logger,
        *,
        total: int | None = None,
        stream: TextIO | None = None,
        every_percent: float = LOG_EVERY_PERCENT,
        every_seconds: float = LOG_EVERY_SECONDS,
    ) -> None:
        self.items = items
        self.total = total if total is not None else (len(items) if isinstance(items, Sized) else None)
        self.description = description
        self.logger = logger
        self.stream = stream if stream is not None else sys.stderr
        self.every_percent = every_percent
        self.every_seconds = every_seconds
        self.metrics: dict[str, float] = {}

    def set_metrics(self, **metrics: float) -> None:
        """The values to show; merged, so a metric measured only every few steps keeps its last value."""
        self.metrics.update(metrics)

    def __iter__(self) -> Iterator[Item]:
        return self._tracked(self._bar() if self.stream.isatty() else self._log_lines())

    def _tracked(self, items: Iterator[Item]) -> Iterator[Item]:
        """`items`, recording each one's index as the process's position; cleared when the loop ends whole
        (an exception leaves it: the position is what the error, or the interrupt, is about)."""
        global _position
        for index, item in enumerate(items):
            _position = (self.description, index)
            yield item
        _position = None

    def _bar(self) -> Iterator[Item]:
        with tqdm(total=self.total, desc=self.description, file=self.stream, dynamic_ncols=True) as bar:
            for item in self.items:
                yield item
                bar.set_postfix_str(self._formatted_metrics(), refresh=False)
                bar.update()

    def _log_lines(self) -> Iterator[Item]:
        started = last_logged = time.perf_counter()
        last_bucket = 0
        for done, item in enumerate(self.items, 1):
            yield item
            now = time.perf_counter()
            bucket = int(done * 100 / self.total // self.every_percent) if self.total else 0
            if done in (1, self.total) or bucket > last_bucket or now - last_logged >= self.every_seconds:
                self.logger.info("%s", self._line(done, now - started))
                last_bucket, last_logged = bucket, now

    def _line(self, done: int, elapsed: float) -> str:
        if self.total:
            eta = tqdm.format_interval(elapsed / done * (self.total - done))
            position = f"{done}/{self.total} ({done * 100 // self.total}%)"
            timing = f"[{tqdm.format_interval(elapsed)} elapsed, eta {eta}]"
        else:
            position, timing = str(done), f"[{tqdm.format_interval(elapsed)} elapsed]"
        return " ".join(part for part in (self.description, position, self._formatted_metrics(), timing) if part)

    def _formatted_metrics(self) -> str:
        return " ".join(f"{name}={value:.4f}" if isinstance(value, float) else f"{name}={value}"
                        for name, value in self.metrics.items())
