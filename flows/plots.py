"""Matplotlib figures of what a stage computed, for its MLflow run: curves, score summaries, degrees, memory.

Figures are built as `matplotlib.figure.Figure` objects, never through pyplot: no global figure state, so
drawing is safe on any thread, and PNGs are rendered by the Agg backend without a display. A run's stage
figures are drawn in a plotting process of its own (`plotting_process`), which alone imports Matplotlib
(and DuckDB, for the score summaries), when the first figure is drawn: a run that plots nothing (a cached
one) never starts it, and the flow's process never holds them.
"""

from __future__ import annotations

import json
import math
import os
import signal
import tempfile
import threading
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from flows.hooks import StageHooks, StageRun
from sgt_core.export.outputs import SCORES_DIR
from sgt_core.lifeline import end_with
from sgt_core.preprocess.outputs import IN_DEGREES_FILE
from sgt_core.train.outputs import SAMPLED_DEGREES_FILE

if TYPE_CHECKING:
    from matplotlib.figure import Figure

    from flows.tracking import Tracker
    from sgt_core.pipeline import StageResult


PANEL_SIZE = (4.5, 3.4)  # inches per subplot; at 100 dpi a panel is 450 x 340 pixels
DPI = 100
# Up to this many distinct degrees get one bar per integer; wider ranges are binned, with a log count axis
# so that a few hubs stay visible beside millions of ordinary nodes.
MAX_INTEGER_BINS = 64


def _panels(count: int, title: str, max_columns: int = 4) -> tuple[Figure, list]:
    """A figure with `count` subplots in rows of at most `max_columns`, titled `title`."""
    from matplotlib.figure import Figure

    columns = min(count, max_columns)
    rows = math.ceil(count / columns)
    figure = Figure(figsize=(PANEL_SIZE[0] * columns, PANEL_SIZE[1] * rows + 0.4), dpi=DPI, layout="constrained")
    axes = figure.subplots(rows, columns, squeeze=False).flatten()
    for unused in axes[count:]:
        unused.set_visible(False)
    figure.suptitle(title)
    return figure, list(axes[:count])


def training_curves(history: list[dict], title: str) -> Figure:
    """One panel per logged quantity (loss, val_<metric>, temperature, ...) against the epoch.

    Rows without a quantity (epochs between evaluations) are skipped, so sparse curves still draw.
    """
    keys = list(dict.fromkeys(key for row in history for key in row if key != "epoch"))
    figure, axes = _panels(max(1, len(keys)), title)
    for ax, key in zip(axes, keys):
        epochs = [row["epoch"] for row in history if key in row]
        values = [row[key] for row in history if key in row]
        ax.plot(epochs, values, marker="o" if len(values) <= 30 else None, markersize=3)
        ax.set(title=key, xlabel="epoch", ylabel=key)
        ax.grid(alpha=0.3)
    return figure


def entropy_per_layer(per_layer: list[tuple]) -> Figure:
    """Mean per-node entropy of each layer's attention scores beside that of uniform attention (ln degree).

    Args:
        per_layer: `summarise_scores(...)["per_layer"]` rows (layer, nodes, mean entropy, mean uniform
            entropy, max normalisation error).
    """
    layers = np.array([row[0] for row in per_layer])
    figure, (ax,) = _panels(1, "Attention-score entropy per layer")
    width = 0.4
    for offset, column, label in ((-width / 2, 2, "estimator scores"), (width / 2, 3, "uniform over neighbours")):
        bars = ax.bar(layers + offset, [row[column] for row in per_layer], width, label=label)
        ax.bar_label(bars, fmt="%.2f", fontsize="x-small")
    top = max(max(row[2], row[3]) for row in per_layer)
    ax.set(xlabel="layer", ylabel="mean entropy per node (nats)", xticks=layers, ylim=(0, 1.3 * top or 1))
    ax.legend(loc="upper center", ncols=2, fontsize="small")
    ax.grid(axis="y", alpha=0.3)
    return figure


def mass_per_edge_type(mass: list[tuple]) -> Figure:
    """Per layer, the mean share of a node's attention that goes to each edge type (shares sum to 1).

    Args:
        mass: `summarise_scores(...)["mass"]` rows (layer, edge type, mass, nodes with that type).
    """
    layers = sorted({row[0] for row in mass})
    edge_types = list(dict.fromkeys(row[1] for row in mass))
    by_key = {(row[0], row[1]): row[2] for row in mass}
    figure, (ax,) = _panels(1, "Attention mass per edge type")
    figure.set_figwidth(max(PANEL_SIZE[0], 1.2 * len(layers) * len(edge_types) ** 0.5 + 2))
    width = 0.8 / len(edge_types)
    for index, edge_type in enumerate(edge_types):
        positions = np.arange(len(layers)) + (index - (len(edge_types) - 1) / 2) * width
        bars = ax.bar(positions, [by_key.get((layer, edge_type), 0.0) for layer in layers], width, label=edge_type)
        ax.bar_label(bars, fmt="%.2f", fontsize="x-small")
    ax.set(xlabel="layer", ylabel="mean attention mass per node", ylim=(0, 1.08),
           xticks=np.arange(len(layers)), xticklabels=[str(layer) for layer in layers])
    ax.legend(title="edge type", fontsize="small")
    ax.grid(axis="y", alpha=0.3)
    return figure


def degree_histograms(histograms: dict[str, dict], title: str, xlabel: str) -> Figure:
    """One histogram panel per entry of {name: {"degree": [...], "nodes": [...]}} (`sgt_core.sampling.degrees`)."""
    from matplotlib.ticker import MaxNLocator

    figure, axes = _panels(len(histograms), title)
    for ax, (name, histogram) in zip(axes, histograms.items()):
        degree, nodes = np.asarray(histogram["degree"]), np.asarray(histogram["nodes"])
        if degree.max() - degree.min() < MAX_INTEGER_BINS:
            bins = np.arange(degree.min(), degree.max() + 2) - 0.5  # one bar per integer degree
            ylabel = "nodes"
        else:
            bins = np.linspace(degree.min(), degree.max() + 1, MAX_INTEGER_BINS // 2)
            ax.set_yscale("log")
            ylabel = "nodes (log scale)"
        ax.hist(degree, bins=bins, weights=nodes, edgecolor="white", linewidth=0.5)
        mean = float((degree * nodes).sum() / nodes.sum())
        ax.set(title=f"{name} (mean {mean:.1f}, max {degree.max()})", xlabel=xlabel, ylabel=ylabel)
        ax.xaxis.set_major_locator(MaxNLocator(nbins=6, integer=True, min_n_ticks=1))  # whole degrees
        ax.grid(axis="y", alpha=0.3)
    return figure


def memory_over_time(samples: list[tuple[float, float]], title: str) -> Figure:
    """The process's resident memory (RSS) against seconds since the stage started, peak marked."""
    seconds, rss_mb = np.array(samples).T
    figure, (ax,) = _panels(1, title)
    ax.plot(seconds, rss_mb, marker="." if len(samples) <= 60 else None)
    peak = int(rss_mb.argmax())
    late = seconds[peak] > seconds[-1] / 2  # keep the label inside the axes
    ax.annotate(f"peak {rss_mb[peak]:.0f} MB", (seconds[peak], rss_mb[peak]), textcoords="offset points",
                xytext=(0, 6), ha="right" if late else "left", fontsize="small")
    ax.set(xlabel="seconds since the stage started", ylabel="RSS (MB)", ylim=(0, rss_mb.max() * 1.15))
    ax.grid(alpha=0.3)
    return figure


def stage_figures(stage: str, result: StageResult) -> dict[str, Figure]:
    """Every figure a stage's result supports (its history, the data files in its folder), by artifact name."""
    figures = {}
    if result.history:
        figures["training_curves"] = training_curves(result.history, f"{stage}: per-epoch metrics")
    output = result.out_dir
    if (output / SCORES_DIR).is_dir():
        from sgt_core.export.summary import summarise_scores

        summary = summarise_scores(output / SCORES_DIR)
        figures["entropy_per_layer"] = entropy_per_layer(summary["per_layer"])
        figures["mass_per_edge_type"] = mass_per_edge_type(summary["mass"])
    if (output / IN_DEGREES_FILE).is_file():
        histograms = json.loads((output / IN_DEGREES_FILE).read_text())
        figures["neighbourhood_sizes"] = degree_histograms(
            histograms, "Interaction graph: neighbourhood sizes (all edges, then per edge type)",
            "incoming edges per node")
    if (output / SAMPLED_DEGREES_FILE).is_file():
        histograms = json.loads((output / SAMPLED_DEGREES_FILE).read_text())
        figures["sampled_degrees"] = degree_histograms(
            histograms, "Sampled neighbours per node in one epoch, per layer", "real (unmasked) neighbours")
    return figures


def draw_stage_figures(stage: str, result: StageResult, samples: list[tuple[float, float]], folder: Path) -> None:
    """Saves every figure of a stage's result (`stage_figures`) and its memory trace as `folder/<name>.png`."""
    figures = stage_figures(stage, result)
    if samples:  # none only where the system has no /proc to read a stage's memory from
        figures["memory"] = memory_over_time(samples, f"{stage}: resident memory (RSS) over time")
    for name, figure in figures.items():
        figure.savefig(folder / f"{name}.png")


def _plotting_process_main(jobs, flow_pid: int) -> None:
    """The plotting process: draws each job's figures (`draw_stage_figures`) and answers ("ok", None) or
    ("error", exception), until the flow's process closes its end or ends. It leaves Ctrl-C to the flow, which
    waits for the figures it asked for before it records its end."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})  # blocked since its start (PlottingProcess)
    end_with(flow_pid, signal.SIGTERM, death_signal=False)
    while True:
        try:
            job = jobs.recv()
        except EOFError:
            return
        try:
            draw_stage_figures(*job)
            jobs.send(("ok", None))
        except Exception as error:  # noqa: BLE001 - every failure is re-raised in the flow's process
            jobs.send(("error", error))


class PlottingProcess:
    """The process that draws the figures of a flow's stages: started afresh (spawn), not forked from the stages'
    server, so it holds matplotlib and DuckDB's score summaries but never torch, and the flow's process holds
    none of them (the run's largest process is a stage). One per flow process, kept for its later runs
    (`sgt tune`'s trials); a daemon, so it ends when that process exits, without being waited for."""

    def __init__(self) -> None:
        import multiprocessing

        context = multiprocessing.get_context("spawn")
        self._jobs, jobs = context.Pipe()
        self._lock = threading.Lock()
        self.process = context.Process(target=_plotting_process_main, args=(jobs, os.getpid()),
                                       name="sgt-plots", daemon=True)
        # A Ctrl-C in the terminal reaches it too: it starts with SIGINT blocked (the mask survives exec) and
        # ignores SIGINT before unblocking it, so that not even its start-up prints a KeyboardInterrupt.
        mask = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
        try:
            self.process.start()
        finally:
            signal.pthread_sigmask(signal.SIG_SETMASK, mask)
        jobs.close()

    def draw(self, stage: str, result: StageResult, samples: list[tuple[float, float]], folder: Path) -> None:
        """`draw_stage_figures` in the plotting process; its error is raised here."""
        with self._lock:
            self._jobs.send((stage, result, samples, folder))
            try:
                status, error = self._jobs.recv()
            except EOFError:
                raise RuntimeError(f"the plotting process (pid {self.process.pid}) ended while drawing {stage}'s "
                                   "figures") from None
        if status == "error":
            raise error


_plotter: PlottingProcess | None = None
_plotter_lock = threading.Lock()


def plotting_process() -> PlottingProcess:
    """This process's plotting process, started on first use."""
    global _plotter
    with _plotter_lock:
        if _plotter is None or not _plotter.process.is_alive():
            _plotter = PlottingProcess()
        return _plotter


class PlotHooks(StageHooks):
    """Draws the figures of a stage that computed, and its memory trace, and logs them to its run as
    `plots/<name>.png`, all from the tracker's logging thread so that the next stage need not wait.

    The figures are drawn in the plotting process (`plotting_process`) where the stages run in processes of
    their own (stage_isolation=process), else on the logging thread itself.
    """

    def __init__(self, tracker: Tracker, own_process: bool = True) -> None:
        self.tracker, self.own_process = tracker, own_process

    def before_stage(self, run: StageRun) -> None:
        if self.own_process and not run.cache_hit:
            plotting_process()  # starts it, if need be, while the stage runs: it is ready when the stage ends

    def after_stage(self, run: StageRun, result: StageResult) -> None:
        if not run.cache_hit:  # a cache hit's plots are on the run that computed it
            self.tracker.later(run.run_id, self._draw_and_log, run.run_id, run.stage.name, result,
                               run.memory.samples)

    def _draw_and_log(self, run_id: str, stage: str, result: StageResult, samples: list[tuple[float, float]]) -> None:
        with tempfile.TemporaryDirectory(prefix="sgt-plots-") as folder:
            if self.own_process:
                plotting_process().draw(stage, result, samples, Path(folder))
            else:
                draw_stage_figures(stage, result, samples, Path(folder))
            self.tracker.log_figure_files(run_id, Path(folder))
