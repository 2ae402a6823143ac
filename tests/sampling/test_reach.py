"""A batch's reach: the estimate against real sampling, and the warning for batches that defeat themselves."""

from __future__ import annotations

import logging

import pytest
import torch

from sgt_core.sampling import LayerSampler
from sgt_core.sampling.reach import batch_reach, layer_fractions, warn_if_batches_reach_the_graph
from sgt_core.train.stage import run_train
from tests.stage_runner import run_stages


def random_in_neighbours(num_nodes: int, candidates: int, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    """A graph where every node has `candidates` in-edges from uniformly random sources: edge_index, ptr."""
    generator = torch.Generator().manual_seed(seed)
    sources = torch.randint(num_nodes, (num_nodes * candidates,), generator=generator)  # [E]
    targets = torch.arange(num_nodes).repeat_interleave(candidates)  # [E] sorted: CSR over targets
    ptr = torch.arange(0, num_nodes * candidates + 1, candidates)  # [N + 1]
    return torch.stack([sources, targets]), ptr


@pytest.mark.parametrize(("batch", "degrees"), [(20, [6, 4]), (60, [5, 5, 3]), (5, [12, 5, 5])])
def test_the_estimate_matches_what_sampling_a_batch_reads(batch, degrees):
    num_nodes, candidates = 3000, 40
    edge_index, ptr = random_in_neighbours(num_nodes, candidates)
    scores = torch.rand(len(degrees), edge_index.shape[1], generator=torch.Generator().manual_seed(1))
    sampler = LayerSampler(edge_index, torch.zeros(edge_index.shape[1], dtype=torch.long), ptr, scores, degrees,
                           "uniform", torch.Generator().manual_seed(2))
    order = torch.randperm(num_nodes, generator=torch.Generator().manual_seed(3))
    read = [sampler.batch(order[start:start + batch])[0].numel() / num_nodes for start in range(0, 20 * batch, batch)]
    assert sum(read) / len(read) == pytest.approx(layer_fractions(num_nodes, batch, degrees)[0], rel=0.05)


def test_no_draws_read_only_the_targets_and_many_read_everything():
    assert layer_fractions(1000, 10, [0, 0]) == pytest.approx([0.01, 0.01])
    assert layer_fractions(1000, 10, [200, 200])[0] == pytest.approx(1.0)
    # One batch of every node with every neighbour kept is a full-graph epoch, give or take its input rows.
    assert batch_reach(1000, 1000 * 8, 1000, 1000, [100, 100]).epoch_cost == pytest.approx(1.0, abs=0.01)


def test_the_issues_setting_is_named_with_its_cost(caplog):
    """`sgt run dataset=synthetic dataset.num_nodes=1000000 train.batch_size=10000` with the default 4 layers of
    degrees [12, 5, 5, 5]: 31 attention edges per node (20 graph, 10 expander, 1 self), half the nodes train."""
    nodes = 10**6
    with caplog.at_level(logging.WARNING, logger="sgt_core.sampling.reach"):
        estimate = warn_if_batches_reach_the_graph(nodes, 31 * nodes, nodes // 2, 10_000, [12, 5, 5, 5])
    assert estimate.reach > 0.99 and estimate.batches == 50 and 15 < estimate.epoch_cost < 50
    (warning,) = caplog.messages
    assert "each batch of 10000 targets reaches about 100% of the graph's 1000000 nodes through 4 layers" in warning
    assert f"costs about {estimate.epoch_cost:.0f}x a full-graph epoch" in warning
    assert "train.batch_size=null" in warning and "model.num_layers" in warning and "model.degrees" in warning


@pytest.mark.parametrize(("batch_size", "degrees"), [
    (None, [12, 5, 5, 5]),  # full-graph training
    (1000, [10, 10]),  # Amazon2M's preset shape: each batch reads ~5% of the graph
    (500_000, [12, 5, 5, 5]),  # one batch: all of the graph, but once an epoch
])
def test_settings_that_do_not_defeat_themselves_draw_no_warning(caplog, batch_size, degrees):
    nodes = 10**6
    with caplog.at_level(logging.WARNING, logger="sgt_core.sampling.reach"):
        warn_if_batches_reach_the_graph(nodes, 31 * nodes, nodes // 2, batch_size, degrees)
    assert caplog.messages == []


def test_the_train_stage_warns_once_before_its_first_epoch(tmp_path, caplog):
    cfg, outputs, _ = run_stages(tmp_path, ["train.batch_size=4"], until="export")
    out_dir = tmp_path / "train"
    out_dir.mkdir()
    with caplog.at_level(logging.INFO):
        run_train(cfg, {name: outputs[name] for name in ("preprocess", "export")}, out_dir)
    messages = [record.getMessage() for record in caplog.records]
    warnings = [message for message in messages if "a full-graph epoch" in message]
    assert len(warnings) == 1 and "each batch of 4 targets reaches about" in warnings[0]
    assert messages.index(warnings[0]) < min(i for i, m in enumerate(messages) if m.startswith("train epoch"))
