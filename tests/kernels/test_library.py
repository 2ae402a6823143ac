"""The compiled CPU kernels equal their torch implementations, do not depend on the thread count, and fall back cleanly."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F
from scipy.stats import binomtest

from sgt_core.kernels import library
from sgt_core.kernels.library import cpu_kernels
from sgt_core.models import fused_edge_attention as edge_module
from sgt_core.models import fused_slot_attention as slot_module
from sgt_core.models.dropout import Dropout
from sgt_core.models.feed_forward import FeedForward
from sgt_core.sampling import sample_neighbours
from tests.threads import torch_threads

pytestmark = pytest.mark.skipif(cpu_kernels() is None, reason="no C++ compiler here: the torch kernels run instead")

REPO_ROOT = Path(__file__).resolve().parents[2]


def random_graph(num_nodes: int, num_edges: int, num_codes: int, seed: int):
    """Edges sorted by destination; a few nodes have no incoming edge and a few have many (hubs)."""
    generator = torch.Generator().manual_seed(seed)
    src = torch.randint(0, num_nodes, (num_edges,), generator=generator)
    dst = torch.randint(0, num_nodes - 3, (num_edges,), generator=generator) ** 2 % (num_nodes - 3)
    order = torch.argsort(dst * num_nodes + src)
    edge_index = torch.stack([src[order], dst[order]])
    code = torch.randint(0, num_codes, (num_edges,), generator=generator)
    return edge_index, code, torch.bincount(edge_index[1], minlength=num_nodes)


def edge_inputs(num_nodes=300, width=8, num_codes=3, spread=2.0, seed=0):
    generator = torch.Generator().manual_seed(seed)
    tensors = [torch.randn(num_nodes, width, generator=generator) * spread for _ in range(3)]
    tensors += [torch.randn(num_codes, width, generator=generator), torch.randn(num_codes, generator=generator)]
    return tensors


def compact(edge_index, code, in_degree, num_codes=3):
    ptr = torch.cat([torch.zeros(1, dtype=torch.long), in_degree.cumsum(0)])
    return edge_module.compact_edges(edge_index, code, ptr, num_codes)


def run_edge(tensors, edge_index, code, in_degree, temperature, compiled, with_scores_grad=True):
    """Output, scores and the gradients of (query, key, value, E, B): through the operator (compiled on the
    CPU) with autograd, or through its torch implementation's forward and backward functions."""
    weights = torch.randn(tensors[0].shape, generator=torch.Generator().manual_seed(1))
    if compiled:
        leaves = [t.clone().requires_grad_() for t in tensors]
        out, scores = edge_module.fused_edge_attention(*leaves, edge_index, code, in_degree, temperature, 8.0)
        loss = (out * weights).sum() + ((scores**2).sum() if with_scores_grad else 0)
        loss.backward()
        return out.detach(), scores.detach(), [leaf.grad for leaf in leaves]
    query, key, value, scale, bias = tensors
    graph = compact(edge_index, code, in_degree).tensors()
    key_value = torch.cat([key, value], dim=1)
    out, scores, inside = edge_module._edge_attention_torch(query, key_value, scale, bias, *graph, temperature, 8.0)
    grads = edge_module._edge_attention_backward_torch(weights, 2 * scores if with_scores_grad else None, query,
                                                       key_value, scale, scores, inside, *graph, temperature)
    grad_query, grad_key_value, grad_scale, grad_bias = grads
    return out, scores, [grad_query, *grad_key_value.split(key.shape[1], dim=1), grad_scale, grad_bias]


@pytest.mark.parametrize("temperature", [1.0, 0.05])  # the second clips many logits
@pytest.mark.parametrize("with_scores_grad", [True, False])
def test_edge_attention_matches_the_torch_kernel(temperature, with_scores_grad):
    edge_index, code, in_degree = random_graph(300, 5000, 3, seed=0)
    assert (in_degree == 0).any() and in_degree.max() > 50  # empty and hub neighbourhoods are covered
    tensors = edge_inputs()
    out, scores, grads = run_edge(tensors, edge_index, code, in_degree, temperature, True, with_scores_grad)
    ref_out, ref_scores, ref_grads = run_edge(tensors, edge_index, code, in_degree, temperature, False,
                                              with_scores_grad)
    assert torch.allclose(out, ref_out, atol=1e-5) and torch.allclose(scores, ref_scores, atol=1e-6)
    sums = torch.zeros(300).index_add_(0, edge_index[1], scores)
    assert torch.allclose(sums[in_degree > 0], torch.ones(int((in_degree > 0).sum())), atol=1e-5)
    for grad, ref_grad in zip(grads, ref_grads, strict=True):
        assert torch.allclose(grad, ref_grad, rtol=1e-4, atol=1e-4 * ref_grad.abs().max().item())


def slot_inputs(num_queries=200, num_keys=260, degree=7, hidden=16, heads=4, num_codes=3, seed=0):
    generator = torch.Generator().manual_seed(seed)
    tensors = [torch.randn(num_queries, hidden, generator=generator), torch.randn(num_keys, 2 * hidden, generator=generator),
               torch.randn(num_codes, hidden, generator=generator), torch.randn(num_codes, heads, generator=generator)]
    neighbours = torch.randint(0, num_keys, (num_queries, degree), generator=generator)
    code = torch.randint(0, num_codes, (num_queries, degree), generator=generator)
    mask = torch.rand(num_queries, degree, generator=generator) < 0.7
    mask[0] = False  # a row without any real neighbour gives zeros
    return tensors, neighbours, code, mask, heads


def run_slot(tensors, neighbours, code, mask, heads, compiled):
    grad_out = torch.randn(tensors[0].shape, generator=torch.Generator().manual_seed(1))
    if compiled:
        leaves = [t.clone().requires_grad_() for t in tensors]
        out = slot_module.fused_slot_attention(*leaves, neighbours, code, mask, heads)
        (out * grad_out).sum().backward()
        return out.detach(), [leaf.grad for leaf in leaves]
    out, attention = slot_module._slot_attention_torch(*tensors, neighbours, code, mask, heads)
    query, key_value, scale, _bias = tensors
    grads = slot_module._slot_attention_backward_torch(grad_out, query, key_value, scale, neighbours, code,
                                                       attention, heads)
    return out, list(grads)


def test_slot_attention_matches_the_torch_kernel():
    tensors, neighbours, code, mask, heads = slot_inputs()
    out, grads = run_slot(tensors, neighbours, code, mask, heads, compiled=True)
    ref_out, ref_grads = run_slot(tensors, neighbours, code, mask, heads, compiled=False)
    assert torch.equal(out[0], torch.zeros_like(out[0]))
    assert torch.allclose(out, ref_out, atol=1e-5)
    for grad, ref_grad in zip(grads, ref_grads, strict=True):
        assert torch.allclose(grad, ref_grad, atol=1e-4)


def test_projected_slot_attention_matches_projections_then_attention():
    tensors, neighbours, code, mask, heads = slot_inputs(num_queries=260)
    query_x, key_x = torch.randn(260, 16), torch.randn(260, 16)
    weights = [torch.randn(16, 16), torch.randn(16), torch.randn(32, 16), torch.randn(32)]
    scale, bias = tensors[2], tensors[3]

    def run(projected):
        leaves = [t.clone().requires_grad_() for t in (query_x, key_x, *weights, scale, bias)]
        qx, kx, qw, qb, kvw, kvb, es, eb = leaves
        if projected:  # recomputes the projections in its backward pass
            out = slot_module.fused_slot_attention(qx, kx, es, eb, neighbours, code, mask, heads,
                                                   projections=(qw, qb, kvw, kvb))
        else:  # autograd keeps them
            out = slot_module.fused_slot_attention(F.linear(qx, qw, qb), F.linear(kx, kvw, kvb), es, eb,
                                                   neighbours, code, mask, heads)
        (out * torch.randn(out.shape, generator=torch.Generator().manual_seed(2))).sum().backward()
        return out.detach(), [leaf.grad for leaf in leaves]

    (out, grads), (ref_out, ref_grads) = run(True), run(False)
    assert torch.equal(out, ref_out)
    for grad, ref_grad in zip(grads, ref_grads, strict=True):
        assert torch.allclose(grad, ref_grad, rtol=1e-5, atol=1e-5)


def test_results_do_not_depend_on_the_thread_count():
    edge_index, code, in_degree = random_graph(3000, 60000, 3, seed=1)
    tensors = edge_inputs(num_nodes=3000)
    slot = slot_inputs(num_queries=2000, num_keys=3000)
    ptr = torch.cat([torch.zeros(1, dtype=torch.long), in_degree.cumsum(0)])
    scores = torch.rand(edge_index.shape[1])
    results = []
    for count in (1, 2, 3):
        with torch_threads(count):
            edge = run_edge(tensors, edge_index, code, in_degree, 0.5, compiled=True)
            slots = run_slot(*slot, compiled=True)
            sample = sample_neighbours(ptr, scores, 5, generator=torch.Generator().manual_seed(3))[0]
        results.append([edge[0], edge[1], *edge[2], slots[0], *slots[1], sample])
    for other in results[1:]:
        assert all(torch.equal(a, b) for a, b in zip(results[0], other, strict=True))


def test_dropout_keeps_one_minus_p_scales_and_reproduces_from_the_seed():
    dropout = Dropout(0.3)
    x = torch.ones(200_000, requires_grad=True)
    torch.manual_seed(5)
    out = dropout(x)
    kept = out != 0
    assert binomtest(int(kept.sum()), kept.numel(), 0.7).pvalue > 1e-3
    assert torch.allclose(out[kept], torch.full_like(out[kept], 1 / 0.7))
    out.sum().backward()
    assert torch.equal(x.grad != 0, kept)  # the backward pass uses the forward pass's mask
    torch.manual_seed(5)
    assert torch.equal(dropout(x), out)
    assert torch.equal(dropout.eval()(x), x)


def test_feed_forward_matches_its_plain_sequential():
    torch.manual_seed(0)
    block = FeedForward(8, dropout=0.4)
    x = torch.randn(500, 8, requires_grad=True)
    torch.manual_seed(1)
    out = block(x)  # the fused function
    out.square().sum().backward()
    fused_grads = [x.grad.clone()] + [p.grad.clone() for p in block.parameters()]
    x.grad = None
    block.zero_grad()
    torch.manual_seed(1)
    keep = block[2].keep_mask((500, 16), x.device)  # the same mask, drawn from the same seed
    inner, _, _, outer = block
    plain = outer(torch.relu(inner(x)) * keep / 0.6)
    plain.square().sum().backward()
    assert torch.allclose(out, plain, atol=1e-6)
    for fused, grad in zip(fused_grads, [x.grad] + [p.grad for p in block.parameters()], strict=True):
        assert torch.allclose(fused, grad, atol=1e-5)


# A child process: the two attentions on fixed inputs through the operators, saved for the parent.
CHILD = """
import logging, sys, torch
logging.basicConfig(level=logging.WARNING)
from sgt_core.kernels import library
from tests.kernels.test_library import edge_inputs, random_graph, run_edge, run_slot, slot_inputs
edge_index, code, in_degree = random_graph(300, 5000, 3, seed=0)
edge = run_edge(edge_inputs(), edge_index, code, in_degree, 0.5, compiled=True)
slot = run_slot(*slot_inputs(), compiled=True)
torch.save({"backend": library.backend(), "edge": edge, "slot": slot}, sys.argv[1])
"""


@pytest.mark.parametrize("environment", [{"CXX": "false"}, {library.SWITCH: "0"}])
def test_without_the_compiled_kernels_the_same_operators_run_in_torch(environment, tmp_path):
    """A failed build (a "compiler" that always fails) or the switch: the schemas still come from the C++
    source, the torch implementations answer them on the CPU, with a warning, and nothing half-built is
    loaded. In a child process, since this one has the compiled library loaded."""
    env = {**os.environ, "SGT_KERNEL_CACHE": str(tmp_path / "cache"), **environment}
    env["PYTHONPATH"] = os.pathsep.join([str(REPO_ROOT), env.get("PYTHONPATH", "")])
    completed = subprocess.run([sys.executable, "-c", CHILD, str(tmp_path / "out.pt")], cwd=REPO_ROOT, env=env,
                               capture_output=True, text=True, check=False)
    assert completed.returncode == 0, completed.stderr[-3000:]
    if "CXX" in environment:
        assert "could not be built" in completed.stderr
    assert not list((tmp_path / "cache").glob("**/*.so"))
    child = torch.load(tmp_path / "out.pt")
    assert child["backend"] == "torch"
    edge_index, code, in_degree = random_graph(300, 5000, 3, seed=0)
    edge = run_edge(edge_inputs(), edge_index, code, in_degree, 0.5, compiled=True)
    slot = run_slot(*slot_inputs(), compiled=True)
    for theirs, ours in zip([*child["edge"][:2], *child["edge"][2], child["slot"][0], *child["slot"][1]],
                            [*edge[:2], *edge[2], slot[0], *slot[1]], strict=True):
        assert torch.allclose(theirs, ours, rtol=1e-4, atol=1e-4)


def test_an_edited_source_flags_or_cpu_get_their_own_build(tmp_path, monkeypatch):
    monkeypatch.delenv(library.NATIVE, raising=False)
    for kernel_file in [*library.sources(), *library.KERNEL_DIR.glob("*.h")]:
        (tmp_path / kernel_file.name).write_text(kernel_file.read_text())
    first = library.extension_name(tmp_path)
    assert library.extension_name(tmp_path) == first  # cached: the same name finds the same build
    monkeypatch.setenv(library.NATIVE, "1")
    assert library.extension_name(tmp_path) != first  # -march=native, keyed by this CPU too
    monkeypatch.delenv(library.NATIVE)
    header = tmp_path / "common.h"
    header.write_text(header.read_text() + "\n// edited\n")  # a header counts as much as a source
    assert library.extension_name(tmp_path) != first
    header.write_text(header.read_text().removesuffix("\n// edited\n"))
    (tmp_path / "edge_attention.cpp").rename(tmp_path / "edges.cpp")  # and a file's name
    assert library.extension_name(tmp_path) != first


def test_the_schemas_are_read_from_the_source_as_registered():
    names = set()
    for text in library.schemas():
        parsed = torch._C.parse_schema(f"sgt::{text}")
        names.add(parsed.name)
        registered = getattr(torch.ops.sgt, parsed.name.removeprefix("sgt::")).default._schema
        assert [a.name for a in registered.arguments] == [a.name for a in parsed.arguments]
        assert len(registered.returns) == len(parsed.returns)
    assert {"sgt::edge_attention", "sgt::slot_attention", "sgt::sample_neighbours", "sgt::dropout_mask"} <= names


def test_every_device_reaches_the_same_operators_with_autograd():
    """CUDA (any device but the CPU) gets the torch implementations under the same names, and autograd."""
    edge_module._operators(), slot_module._operators()
    has_kernel = torch._C._dispatch_has_kernel_for_dispatch_key
    for name in ("edges_by_source", "edge_attention", "edge_attention_backward", "slot_attention",
                 "slot_attention_backward", "projected_slot_attention"):
        assert has_kernel(f"sgt::{name}", "CompositeExplicitAutograd"), name
    for name in ("edge_attention", "slot_attention", "projected_slot_attention"):
        assert has_kernel(f"sgt::{name}", "Autograd"), name


def test_the_operators_autograd_does_not_import_dynamo():
    """The C++ autograd: torch.library.register_autograd's Python wrapper imports torch._dynamo on its first
    call, which cost every stage process 1.3 s and ~70 MB (the train stage's peak and time regressed)."""
    child = """
import sys
from tests.kernels.test_library import edge_inputs, random_graph, run_edge, run_slot, slot_inputs
edge_index, code, in_degree = random_graph(300, 5000, 3, seed=0)
run_edge(edge_inputs(), edge_index, code, in_degree, 0.5, compiled=True)
run_slot(*slot_inputs(), compiled=True)
print("torch._dynamo" in sys.modules)
"""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO_ROOT), os.environ.get("PYTHONPATH", "")])}
    completed = subprocess.run([sys.executable, "-c", child], cwd=REPO_ROOT, env=env, capture_output=True,
                               text=True, check=False)
    assert completed.returncode == 0, completed.stderr[-3000:]
    assert completed.stdout.split()[-1] == "False"
