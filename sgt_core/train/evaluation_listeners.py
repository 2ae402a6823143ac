"""Who hears the train stage's evaluated epochs in this process: a tuner that prunes a trial, for one.

The list is process-wide, not per thread or context: Prefect may run the train stage in a thread of its
own. Only a stage running in the listener's process is heard (stage_isolation=inline, one process).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager

# callback(epoch, row): the epoch's row of the history (loss, val_loss, val_<metric>); it may raise to stop
# the training, and its error leaves the stage as the stage's own.
Listener = Callable[[int, dict], None]

_listeners: list[Listener] = []


@contextmanager
def listening(callback: Listener) -> Iterator[Listener]:
    """Registers `callback` for every evaluated epoch while the block runs."""
    _listeners.append(callback)
    try:
        yield callback
    finally:
        _listeners.remove(callback)


def notify(epoch: int, metrics: dict) -> None:
    """Tells every registered listener, in the order they registered, about one evaluated epoch."""
    for listener in _listeners:
        listener(epoch, metrics)
