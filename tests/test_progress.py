"""The progress helper: a few log lines off a terminal, a tqdm bar on one."""

from __future__ import annotations

import io
import logging

from sgt_core.progress import Progress

log = logging.getLogger("sgt_core.test_progress")


class Terminal(io.StringIO):
    """A text stream that says it is a terminal, as stderr does in an interactive shell."""

    def isatty(self) -> bool:
        return True


def run_loop(steps: int, **options) -> list[int]:
    epochs = Progress(range(steps), "train epoch", log, **options)
    seen = []
    for epoch in epochs:
        seen.append(epoch)
        epochs.set_metrics(loss=1.0 / (epoch + 1))
        if epoch % 5 == 0:  # measured only every few steps: later lines keep the last value
            epochs.set_metrics(val_roc_auc=0.5 + epoch / 100)
    return seen


def test_off_a_terminal_it_logs_a_few_lines_with_the_latest_metrics(caplog, capsys):
    with caplog.at_level(logging.INFO, logger=log.name):
        assert run_loop(100) == list(range(100))
    lines = [record.getMessage() for record in caplog.records]
    # the first step, every 10% and the last, not one line per step
    assert len(lines) == 11
    assert lines[0].startswith("train epoch 1/100 (1%) loss=1.0000 val_roc_auc=0.5000")
    assert lines[-1].startswith("train epoch 100/100 (100%) loss=0.0100 val_roc_auc=1.4500")
    assert "elapsed, eta" in lines[-1]
    assert "|" not in capsys.readouterr().err  # no bar drawn


def test_a_slow_loop_logs_at_least_every_few_seconds(caplog):
    with caplog.at_level(logging.INFO, logger=log.name):
        run_loop(100, every_seconds=0.0)
    assert len(caplog.records) == 100


def test_on_a_terminal_it_draws_a_bar_instead(caplog):
    terminal = Terminal()
    with caplog.at_level(logging.INFO, logger=log.name):
        assert run_loop(20, stream=terminal) == list(range(20))
    assert caplog.records == []
    drawn = terminal.getvalue()
    assert "train epoch" in drawn and "20/20" in drawn and "loss=0.0500" in drawn and "|" in drawn
