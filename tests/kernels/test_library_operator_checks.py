"""The compiled operators refuse a wrong dtype, shape or layout (ValueError) and an out-of-range index
(IndexError) before they touch memory, naming the argument, what they expected and what they found."""

from __future__ import annotations

import pytest
import torch

from sgt_core.kernels.library import cpu_kernels
from sgt_core.models import fused_edge_attention as edge_module
from sgt_core.models import fused_slot_attention as slot_module

pytestmark = pytest.mark.skipif(cpu_kernels() is None, reason="no C++ compiler here: the torch kernels run instead")

NODES, EDGES, CODES, WIDTH = 20, 60, 3, 4


@pytest.fixture
def edge_args():
    """The arguments of sgt::edge_attention for a small valid graph, by name."""
    generator = torch.Generator().manual_seed(0)
    src = torch.randint(0, NODES, (EDGES,), generator=generator)
    dst = torch.sort(torch.randint(0, NODES, (EDGES,), generator=generator)).values
    code = torch.randint(0, CODES, (EDGES,), generator=generator)
    ptr = torch.cat([torch.zeros(1, dtype=torch.long), torch.bincount(dst, minlength=NODES).cumsum(0)])
    compact = edge_module.compact_edges(torch.stack([src, dst]), code, ptr, CODES)
    return {
        "query": torch.randn(NODES, WIDTH), "key_value": torch.randn(NODES, 2 * WIDTH),
        "edge_scale": torch.randn(CODES, WIDTH), "edge_bias": torch.randn(CODES),
        "ptr": compact.ptr, "src": compact.src, "code": compact.code, "source_ptr": compact.source_ptr,
        "source_edge": compact.source_edge, "source_dst": compact.source_dst, "source_code": compact.source_code,
        "temperature": 1.0, "clip": 8.0,
    }


def edge_attention(args, good=None):
    return edge_module._operators().edge_attention(*args.values())


def edge_attention_backward(args, good=None):
    """The backward pass on `args`, after a forward pass on `good` ones (else on `args`)."""
    _out, scores, inside = edge_attention(good or args)
    names = ("query", "key_value", "edge_scale")
    graph = ("ptr", "src", "code", "source_ptr", "source_edge", "source_dst", "source_code")
    return edge_module._operators().edge_attention_backward(
        torch.randn(NODES, WIDTH), None, *(args[n] for n in names), scores, inside, *(args[n] for n in graph),
        args["temperature"])


@pytest.mark.parametrize("run", [edge_attention, edge_attention_backward])
@pytest.mark.parametrize("name, dtype", [("src", torch.int64), ("src", torch.int16), ("code", torch.int64),
                                         ("ptr", torch.int32)])
def test_edge_attention_refuses_index_dtypes(edge_args, run, name, dtype):
    expected = {"src": "torch.int32", "code": "torch.uint8", "ptr": "torch.int64"}[name]
    with pytest.raises(ValueError, match=rf"sgt::{run.__name__}: {name} must be {expected}, found {dtype}"):
        run({**edge_args, name: edge_args[name].to(dtype)}, edge_args)


@pytest.mark.parametrize("run", [edge_attention, edge_attention_backward])
@pytest.mark.parametrize("name, value, bound", [("src", NODES, NODES), ("src", -1, NODES), ("code", CODES, CODES)])
def test_edge_attention_refuses_out_of_range_indices(edge_args, run, name, value, bound):
    bad = edge_args[name].clone()
    bad[7] = value
    with pytest.raises(IndexError, match=rf"sgt::{run.__name__}: {name}\[7\] = {value} is outside \[0, {bound}\)"):
        run({**edge_args, name: bad}, edge_args)


@pytest.mark.parametrize("name, value, bound", [("source_edge", EDGES, EDGES), ("source_dst", -3, NODES),
                                                ("source_code", 200, CODES)])
def test_edge_attention_backward_refuses_out_of_range_source_grouping(edge_args, name, value, bound):
    bad = edge_args[name].clone()
    bad[5] = value
    with pytest.raises(IndexError, match=rf"edge_attention_backward: {name}\[5\] = {value} is outside \[0, {bound}\)"):
        edge_attention_backward({**edge_args, name: bad}, edge_args)


def test_edge_attention_refuses_bad_offsets_shapes_and_layouts(edge_args):
    ptr = edge_args["ptr"].clone()
    ptr[-1] += 1
    with pytest.raises(ValueError, match=f"ptr must rise from 0 to {EDGES}"):
        edge_attention({**edge_args, "ptr": ptr})
    with pytest.raises(ValueError, match=r"key_value must have shape \[20, 8\], found \[20, 4\]"):
        edge_attention({**edge_args, "key_value": torch.randn(NODES, WIDTH)})
    with pytest.raises(ValueError, match="key_value must be contiguous"):
        edge_attention({**edge_args, "key_value": torch.randn(2 * WIDTH, NODES).t()})
    with pytest.raises(ValueError, match="edge_bias must be torch.float32, found torch.float64"):
        edge_attention({**edge_args, "edge_bias": edge_args["edge_bias"].double()})
    with pytest.raises(ValueError, match="query must be torch.float32 or torch.float64, found torch.float16"):
        edge_attention({**edge_args, "query": edge_args["query"].half()})


def test_edges_by_source_refuses_wrong_dtypes_and_sources(edge_args):
    ops = edge_module._operators()
    with pytest.raises(ValueError, match="src must be torch.int32, found torch.int64"):
        ops.edges_by_source(edge_args["ptr"], edge_args["src"].long(), edge_args["code"])
    src = edge_args["src"].clone()
    src[0] = NODES
    with pytest.raises(IndexError, match=rf"edges_by_source: src\[0\] = {NODES} is outside \[0, {NODES}\)"):
        ops.edges_by_source(edge_args["ptr"], src, edge_args["code"])


@pytest.fixture
def slot_args():
    generator = torch.Generator().manual_seed(1)
    queries, keys, degree, hidden, heads = 9, 11, 4, 8, 2
    return {
        "query": torch.randn(queries, hidden, generator=generator),
        "key_value": torch.randn(keys, 2 * hidden, generator=generator),
        "edge_scale": torch.randn(CODES, hidden, generator=generator),
        "edge_bias": torch.randn(CODES, heads, generator=generator),
        "neighbours": torch.randint(0, keys, (queries, degree), generator=generator),
        "code": torch.randint(0, CODES, (queries, degree), generator=generator),
        "mask": torch.ones(queries, degree, dtype=torch.bool), "heads": heads,
    }


def slot_attention(args, good=None):
    return slot_module._operators().slot_attention(*args.values())


def slot_attention_backward(args, good=None):
    """The backward pass on `args`, after a forward pass on `good` ones (else on `args`)."""
    _out, attention = slot_attention(good or args)
    return slot_module._operators().slot_attention_backward(
        torch.randn_like(args["query"]), args["query"], args["key_value"], args["edge_scale"], args["neighbours"],
        args["code"], attention, args["heads"])


@pytest.mark.parametrize("run", [slot_attention, slot_attention_backward])
@pytest.mark.parametrize("name, dtype", [("neighbours", torch.int32), ("code", torch.int32), ("code", torch.uint8)])
def test_slot_attention_refuses_index_dtypes(slot_args, run, name, dtype):
    with pytest.raises(ValueError, match=rf"sgt::{run.__name__}: {name} must be torch.int64, found {dtype}"):
        run({**slot_args, name: slot_args[name].to(dtype)}, slot_args)


@pytest.mark.parametrize("run", [slot_attention, slot_attention_backward])
@pytest.mark.parametrize("name, value, bound", [("neighbours", 11, 11), ("neighbours", -1, 11), ("code", CODES, CODES)])
def test_slot_attention_refuses_out_of_range_indices(slot_args, run, name, value, bound):
    bad = slot_args[name].clone()
    bad[2, 3] = value
    with pytest.raises(IndexError, match=rf"sgt::{run.__name__}: {name}\[11\] = {value} is outside \[0, {bound}\)"):
        run({**slot_args, name: bad}, slot_args)


def test_slot_attention_refuses_bad_heads_and_masks(slot_args):
    with pytest.raises(ValueError, match="the width 8 must divide into 3 heads"):
        slot_attention({**slot_args, "heads": 3})
    with pytest.raises(ValueError, match="mask must be torch.bool, found torch.uint8"):
        slot_attention({**slot_args, "mask": slot_args["mask"].to(torch.uint8)})


def test_sample_neighbours_refuses_wrong_nodes_and_offsets():
    ops = cpu_kernels()
    ptr, scores = torch.tensor([0, 2, 5, 5]), torch.rand(5)
    with pytest.raises(ValueError, match="nodes must be torch.int64, found torch.int32"):
        ops.sample_neighbours(ptr, scores, torch.tensor([0, 1], dtype=torch.int32), 2, 0, 7)
    with pytest.raises(IndexError, match=r"nodes\[1\] = 3 is outside \[0, 3\)"):
        ops.sample_neighbours(ptr, scores, torch.tensor([0, 3]), 2, 0, 7)
    with pytest.raises(ValueError, match="ptr must rise from 0 to at most the 4 scores"):
        ops.sample_neighbours(ptr, scores[:4], None, 2, 0, 7)
    with pytest.raises(ValueError, match="ptr must be torch.int64, found torch.int32"):
        ops.sample_neighbours(ptr.int(), scores, None, 2, 0, 7)
    edges = ops.sample_neighbours(ptr, scores, torch.tensor([2, 0]), 2, 0, 7)
    assert edges.tolist()[0] == [-1, -1] and sorted(edges.tolist()[1]) == [0, 1]


def test_propagation_step_refuses_wrong_layouts_and_columns():
    ops = cpu_kernels()
    # Â of a path 0 - 1 - 2 as CSR, and the identity in the operator's fixed-width layout
    step = (torch.tensor([0, 2, 5, 7]), torch.tensor([0, 1, 0, 1, 2, 1, 2], dtype=torch.int32), torch.rand(7))
    counts, columns, values = torch.ones(3, dtype=torch.long), torch.arange(3, dtype=torch.int32)[:, None], torch.ones(3, 1)
    with pytest.raises(ValueError, match="step_cols must be torch.int32, found torch.int64"):
        ops.propagation_step(step[0], step[1].long(), step[2], counts, columns, values, 0.1, 2)
    with pytest.raises(ValueError, match=r"op_cols must be \[3, W\]"):
        ops.propagation_step(*step, counts, columns[:2], values, 0.1, 2)
    with pytest.raises(IndexError, match=r"op_counts\[0\] = 2 is outside \[0, 2\)"):  # more entries than slots
        ops.propagation_step(*step, torch.tensor([2, 1, 1]), columns, values, 0.1, 2)
    with pytest.raises(IndexError, match="op_cols holds 7 in row 1, outside"):
        ops.propagation_step(*step, counts, torch.tensor([[0], [7], [2]], dtype=torch.int32), values, 0.1, 2)
    with pytest.raises(ValueError, match="keep must be >= 1"):
        ops.propagation_step(*step, counts, columns, values, 0.1, 0)
    # a padding slot may hold anything: only each row's first counts[j] slots are read
    padded = torch.tensor([[0, -5], [1, 99], [2, 3]], dtype=torch.int32)
    got = ops.propagation_step(*step, counts, padded, torch.ones(3, 2), 0.1, 3)
    expected = ops.propagation_step(*step, counts, columns, values, 0.1, 3)
    assert all(torch.equal(a, b) for a, b in zip(got, expected))
