"""What MLflow shows: each stage's plots, the memory trace and the preprocess run's graph statistics."""

from __future__ import annotations

import io
import mmap
import os
import subprocess
import sys
import time

import numpy as np
import psutil
import pytest
from matplotlib.figure import Figure
from matplotlib.image import imread
from mlflow.tracking import MlflowClient

from flows.memory import MemorySampler
from flows.pipeline import sgt_pipeline
from flows.plots import (
    degree_histograms,
    entropy_per_layer,
    mass_per_edge_type,
    memory_over_time,
    plotting_process,
    training_curves,
)
from sgt_core.pipeline import StageResult
from tests.conftest import TINY_OVERRIDES
from tests.flows.test_pipeline import children

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


def png_pixels(figure: Figure) -> np.ndarray:
    """Renders like MLflow's log_figure does (savefig) and decodes the PNG back: [H, W, channels]."""
    buffer = io.BytesIO()
    figure.savefig(buffer, format="png")
    data = buffer.getvalue()
    assert data.startswith(PNG_SIGNATURE)
    pixels = imread(io.BytesIO(data), format="png")
    assert pixels.shape[0] >= 200 and pixels.shape[1] >= 300
    assert pixels.std() > 0.01  # something was drawn, not a blank canvas
    return pixels


def test_training_curves_one_panel_per_quantity():
    history = [
        {"epoch": 0, "loss": 0.9, "val_roc_auc": 0.5},
        {"epoch": 1, "loss": 0.7},  # an epoch between evaluations
        {"epoch": 2, "loss": 0.6, "val_roc_auc": 0.7},
    ]
    figure = training_curves(history, "train: per-epoch metrics")
    png_pixels(figure)
    loss, val = [ax for ax in figure.axes if ax.get_visible()]
    assert (loss.get_title(), val.get_title()) == ("loss", "val_roc_auc")
    assert loss.get_xlabel() == "epoch"
    assert list(val.lines[0].get_xdata()) == [0, 2] and list(val.lines[0].get_ydata()) == [0.5, 0.7]


def test_score_summaries_draw_the_given_values():
    per_layer = [(0, 144, 1.2, 2.4, 1e-7), (1, 144, 0.8, 2.4, 2e-7)]
    entropy = entropy_per_layer(per_layer)
    png_pixels(entropy)
    heights = [bar.get_height() for bar in entropy.axes[0].patches]
    assert heights == [1.2, 0.8, 2.4, 2.4]  # estimator entropies, then the uniform reference
    assert "nats" in entropy.axes[0].get_ylabel()

    mass = [(0, "graph", 0.6, 144), (0, "expander", 0.3, 144), (0, "self", 0.1, 144),
            (1, "graph", 0.5, 144), (1, "expander", 0.5, 144)]
    figure = mass_per_edge_type(mass)
    png_pixels(figure)
    ax = figure.axes[0]
    assert [text.get_text() for text in ax.get_legend().get_texts()] == ["graph", "expander", "self"]
    assert [bar.get_height() for bar in ax.patches] == [0.6, 0.5, 0.3, 0.5, 0.1, 0.0]


def test_degree_histograms_narrow_and_hub_ranges():
    histograms = {
        "all": {"degree": [8, 9, 13], "nodes": [4, 40, 100]},
        "virtual": {"degree": [1, 5000], "nodes": [999, 1]},  # one hub among many leaves
    }
    figure = degree_histograms(histograms, "neighbourhood sizes", "incoming edges per node")
    png_pixels(figure)
    narrow, hub = figure.axes[:2]
    assert sum(bar.get_height() for bar in narrow.patches) == 144
    assert len(narrow.patches) == 6  # one bar per integer degree 8..13
    assert narrow.get_yscale() == "linear" and hub.get_yscale() == "log"
    assert sum(bar.get_height() for bar in hub.patches) == 1000
    assert narrow.get_title() == "all (mean 11.8, max 13)"  # (4*8 + 40*9 + 100*13) / 144


def test_memory_sampler_and_plot_follow_an_allocation():
    with MemorySampler(interval=0.05) as memory:
        time.sleep(0.2)
        # A fresh anonymous mapping, written so its pages are resident: numpy's allocator may instead reuse
        # memory an earlier test in this worker freed but the heap kept resident, and the RSS would not move
        # (CI saw that once).
        block = mmap.mmap(-1, 64 * 2**20)
        np.frombuffer(block, dtype=np.uint8)[:] = 1
        time.sleep(0.2)
    block.close()
    seconds = [s for s, _ in memory.samples]
    assert len(seconds) >= 6 and seconds == sorted(seconds) and seconds[0] < 0.05
    assert memory.peak_mb - memory.samples[0][1] > 50
    figure = memory_over_time(memory.samples, "train: resident memory (RSS) over time")
    png_pixels(figure)
    ax = figure.axes[0]
    assert ax.get_ylabel() == "RSS (MB)" and ax.get_xlabel() == "seconds since the stage started"
    assert ax.texts[0].get_text() == f"peak {memory.peak_mb:.0f} MB"


def test_memory_sampler_skips_a_process_that_has_ended_but_is_not_reaped():
    """A stage's process between its exit and its parent's wait (a zombie) reads as 0 MB: no sample, not 0."""
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    try:
        process = psutil.Process(child.pid)
        deadline = time.monotonic() + 30
        while process.status() != psutil.STATUS_ZOMBIE:  # exited; not reaped until child.wait() below
            assert time.monotonic() < deadline
            time.sleep(0.01)
        assert process.memory_info().rss == 0  # what Linux reports for it, without an error
        memory = MemorySampler(interval=0.05)
        memory.follow(child.pid)
        memory.record(123.0)  # the stage's own high-water mark, as flows/stage_run.py adds it
        assert [rss for _, rss in memory.samples] == [123.0] and memory.peak_mb == 123.0
    finally:
        child.wait()


def test_the_plotting_process_draws_a_stages_figures_and_raises_its_errors(tmp_path):
    plotter = plotting_process()
    assert plotter.process.pid != os.getpid() and plotting_process() is plotter  # one, kept for later runs
    history = [{"epoch": epoch, "loss": 1.0 / (epoch + 1), "val_accuracy": 0.5 + epoch / 100} for epoch in range(20)]
    result = StageResult({}, history, (), tmp_path)
    plotter.draw("estimate", result, [(0.0, 100.0), (1.0, 180.0), (2.0, 150.0)], tmp_path)
    assert sorted(path.name for path in tmp_path.glob("*.png")) == ["memory.png", "training_curves.png"]
    assert (tmp_path / "memory.png").read_bytes().startswith(PNG_SIGNATURE)
    with pytest.raises(FileNotFoundError):  # the figure's own error, raised here
        plotter.draw("estimate", result, [], tmp_path / "missing")
    plotter.draw("estimate", result, [], tmp_path)  # and the process goes on drawing


# Every computed stage logs its memory plot; besides that, what each stage's data supports.
EXPECTED_PLOTS = {
    "preprocess": {"neighbourhood_sizes", "memory"},
    "estimate": {"training_curves", "memory"},
    "export": {"entropy_per_layer", "mass_per_edge_type", "memory"},
    "train": {"training_curves", "sampled_degrees", "memory"},
}


@pytest.fixture(scope="module")
def tiny_pipeline(prefect_server, tmp_path_factory):
    root = tmp_path_factory.mktemp("plots") / "artifacts"
    overrides = [*TINY_OVERRIDES, f"paths.artifacts={root}", "mlflow.tracking_uri=null"]
    first = sgt_pipeline(overrides)
    return first, sgt_pipeline(overrides), MlflowClient(first["tracking_uri"])


def test_computing_runs_hold_their_plots(tiny_pipeline, tmp_path):
    first, _, client = tiny_pipeline
    for name, run in children(client, first["run_id"]).items():
        run_id = run.info.run_id
        plots = {artifact.path for artifact in client.list_artifacts(run_id, "plots")}
        assert plots == {f"plots/{plot}.png" for plot in EXPECTED_PLOTS[name]}, name
        local = client.download_artifacts(run_id, "plots/memory.png", str(tmp_path / name))
        image = imread(local)
        assert image.shape[0] >= 200 and image.std() > 0.01


def test_computing_runs_hold_a_memory_trace(tiny_pipeline):
    first, _, client = tiny_pipeline
    for name, run in children(client, first["run_id"]).items():
        trace = client.get_metric_history(run.info.run_id, "rss_mb")
        assert len(trace) >= 2, name  # at least the samples on entry and exit
        steps = [m.step for m in sorted(trace, key=lambda m: m.timestamp)]
        assert steps == sorted(steps) and steps[0] < 500  # milliseconds since the stage started
        values = [m.value for m in trace]
        assert all(50 < value < 64_000 for value in values), name  # a Python process with torch loaded
        assert run.data.metrics["rss_peak_mb"] == pytest.approx(max(values))


def test_preprocess_run_logs_the_tiny_grids_statistics(tiny_pipeline):
    first, _, client = tiny_pipeline
    metrics = children(client, first["run_id"])["preprocess"].data.metrics
    # 12 x 12 king's-move grid: 2*11*12 straight + 2*11*11 diagonal undirected edges, stored both ways;
    # corner cells have 3 neighbours, inner cells 8; expander degree 4, one self-loop per node.
    grid_edges = 2 * (2 * 11 * 12 + 2 * 11 * 11)
    assert metrics["num_real_nodes"] == 144 and metrics["num_nodes"] == 144
    assert metrics["num_virtual_nodes"] == 0 and metrics["num_substructure_nodes"] == 0
    assert metrics["num_anchors"] == 0
    assert metrics["num_input_edges"] == grid_edges
    assert metrics["input_mean_degree"] == pytest.approx(grid_edges / 144)
    assert metrics["input_max_degree"] == 8
    assert metrics["edges_graph"] == grid_edges
    assert metrics["edges_expander"] == 144 * 4
    assert metrics["edges_self"] == 144
    assert metrics["edges_virtual"] == 0
    assert metrics["max_in_degree"] == 8 + 4 + 1
    assert metrics["num_components"] == 1


def test_cache_hits_do_not_plot_again(tiny_pipeline):
    _, second, client = tiny_pipeline
    for name, run in children(client, second["run_id"]).items():
        assert run.data.tags["sgt.cache_hit"] == "true", name
        assert client.list_artifacts(run.info.run_id, "plots") == [], name
        assert client.get_metric_history(run.info.run_id, "rss_mb") == [], name
