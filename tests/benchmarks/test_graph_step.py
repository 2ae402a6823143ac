"""The step profile (benchmarks/graph_step.py) on a toy set of graphs: the parts add up to the wall time, the
census holds the network's own products, the regions change nothing the step computes."""

from __future__ import annotations

import copy

import torch

from benchmarks.graph_step import (
    PARTS,
    attention_edges,
    dense_floor,
    epoch_seconds,
    gather_floor,
    instrument,
    linear_shapes,
    profile_batches,
    report,
)
from sgt_core.config import compose_config
from sgt_core.train.graph_set_training import GraphSetTraining
from tests.train.test_graph_set_training import SMALL, interaction_graph


def toy_training(seed: int = 0) -> GraphSetTraining:
    graph = interaction_graph("graph_regression")
    cfg = compose_config([*SMALL, "model.degrees=[3,5]", "train.batch_size=8", f"seed={seed}"])
    scores = torch.rand(2, graph.num_edges, generator=torch.Generator().manual_seed(0))
    torch.manual_seed(seed)
    return GraphSetTraining.build(cfg, graph, scores, torch.device("cpu"))


def test_the_parts_add_up_to_the_profiled_wall_time_and_the_census_is_the_networks_products():
    training = toy_training()
    batches = training.epoch_batches(torch.arange(training.batches.num_graphs))[:3]
    profile = profile_batches(training, batches)
    assert set(profile.parts) <= set(PARTS) and all(seconds >= 0 for seconds in profile.parts.values())
    # Each op counted once, by its self time: what they add up to cannot exceed the wall time they ran in
    # (counting a region, or an op's children twice, would), and the rest is the time between ops.
    assert sum(profile.parts.values()) <= 1.01 * profile.wall
    assert profile.parts["between torch ops"] > 0
    for part in ("dense layers", "attention edge work", "local branch", "sampling and block building", "optimizer"):
        assert profile.parts.get(part, 0.0) > 0, (part, profile.parts)
    shapes = linear_shapes(training.model)
    assert profile.dense and all((out, inp) in shapes for _, inp, out in profile.dense)
    assert len(profile.dense) % len(batches) == 0  # every step runs the same products
    rows_per_batch = {rows for rows, *_ in profile.dense}
    batch_rows = {training.batches.nodes(batch).numel() for batch in batches}
    assert batch_rows <= rows_per_batch  # the layers' products run on the batch's nodes


def test_full_attention_counts_as_attention():
    training = toy_training()
    training.sampler.method = "full"  # every edge, as one layer of slots built for the batch
    batches = training.epoch_batches(torch.arange(training.batches.num_graphs))[:2]
    profile = profile_batches(training, batches)
    assert profile.parts.get("attention edge work", 0.0) > 0, profile.parts
    assert profile.parts.get("sampling and block building", 0.0) > 0, profile.parts


def test_the_regions_change_nothing_the_step_computes():
    plain, traced = toy_training(), toy_training()
    traced.model.load_state_dict(plain.model.state_dict())
    graphs = torch.arange(8)
    handles = instrument(traced)
    try:
        losses = []
        for training in (plain, traced):  # the same draws for both: the sampler's and dropout's
            training.generator.manual_seed(3)
            torch.manual_seed(3)
            losses.append(training._step(graphs))
        assert losses[0] == losses[1]
    finally:
        for handle in handles:
            handle.remove()
    for (name, left), right in zip(plain.model.state_dict().items(), traced.model.state_dict().values(), strict=True):
        assert torch.equal(left, right), name


def test_attention_edges_keep_at_most_the_degree_of_each_node():
    training = toy_training()
    nodes = training.batches.nodes(torch.arange(5))
    in_degree = training.sampler.ptr[nodes + 1] - training.sampler.ptr[nodes]
    assert attention_edges(training, nodes) == [int(in_degree.clamp(max=3).sum()), int(in_degree.clamp(max=5).sum())]
    full = copy.copy(training)
    full.sampler.method = "full"
    assert attention_edges(full, nodes) == [int(in_degree.sum())] * 2


def test_the_floor_times_forward_alone_below_forward_and_backward():
    dense_forward, dense_both = dense_floor([[(512, 32, 64), (512, 64, 32)]] * 4, repeats=3)
    gather_forward, gather_both = gather_floor([[(512, 4096)] * 2] * 4, width=32, repeats=3)
    assert 0 < dense_forward < dense_both and 0 < gather_forward < gather_both


def test_the_report_has_a_row_and_every_part_per_preset():
    row = {"preset": "toy", "network": "2 x 16", "sampler": "reservoir", "batches": 5, "epoch_s": 2.0,
           "train_s": 1.8, "eval_s": 0.2, "eval_share": 0.1, "floor_s": 0.5, "ratio": 4.0, "threads": 2,
           "round_ratios": [3.5, 4.0, 4.4], "graphs": 40,
           "ns_per_node_layer": 900.0, "floor_ns_per_node_layer": 225.0, "ns_per_edge_layer": 90.0,
           "floor_ns_per_edge_layer": 22.5, "parts_s": {part: 0.2 for part in PARTS},
           "heaviest_ops_s": {"dense layers": {"aten::mm": 0.2}}}
    text = report([row])
    assert "| toy | 2 x 16 | reservoir | 40 | 5 | 2.00 |" in text and "4.00x (3.50-4.40, n=3)" in text
    assert all(part in text for part in PARTS) and "aten::mm 0.20" in text
    main_row = next(line for line in text.splitlines() if line.startswith("| toy |"))
    assert main_row.endswith("| - |")  # a row from before validation was timed alone
    row.update(eval_val_s=0.1, eval_share_not_improving=0.0526)
    assert "| 0.10 (5%) |" in report([row])


def test_an_epoch_is_timed_with_its_validation_and_test_apart():
    training = toy_training()
    units = {split: (torch.arange(start, start + 6), None) for split, start in (("train", 0), ("val", 6), ("test", 12))}
    train, val, test = epoch_seconds(training, units)
    assert train > 0 and val > 0 and test > 0
