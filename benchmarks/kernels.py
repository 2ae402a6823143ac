"""Times one estimator attention layer and one sampled-slot attention layer, forward and backward, on the CPU.

A random expander-like graph (every node draws `--degree` sources uniformly, no locality), the estimator at
width 8 over every edge, the wide network's attention at width 64 over `--slots` sampled slots per node.
Prints one line per thread count, the median of `--repeats` runs, and a checksum of the results so that
two builds (portable and SGT_KERNELS_NATIVE=1) can be compared bit for bit; then the edge attention
operator alone, in wall-clock and process CPU time (CPU / wall > 1: more than one thread worked, which
holds even when other processes share the cores and make the wall-clock times noisy).

    python -m benchmarks.kernels --threads 1 2
"""

from __future__ import annotations

import argparse
import hashlib
import inspect
import statistics
import time

import torch


def expander_like(num_nodes: int, degree: int, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    """[2, E] edges sorted by destination, `degree` random sources per node, and a type per edge in [0, 3)."""
    generator = torch.Generator().manual_seed(seed)
    src = torch.randint(0, num_nodes, (num_nodes * degree,), generator=generator)
    dst = torch.arange(num_nodes).repeat_interleave(degree)
    return torch.stack([src, dst]), torch.randint(0, 3, (src.numel(),), generator=generator)


def digest(tensors: list[torch.Tensor]) -> str:
    hasher = hashlib.sha256()
    for tensor in tensors:
        hasher.update(tensor.detach().contiguous().numpy().tobytes())
    return hasher.hexdigest()[:12]


def time_estimator(num_nodes: int, degree: int, repeats: int) -> tuple[float, float, str]:
    from sgt_core.models import EstimatorAttention

    torch.manual_seed(0)
    layer = EstimatorAttention(width=8, num_edge_types=3, memory_efficient=True)
    edge_index, edge_type = expander_like(num_nodes, degree, seed=1)
    edge_index = edge_index.to(torch.int32)  # as the stages hold them
    x = torch.randn(num_nodes, 8, requires_grad=True)
    arguments = inspect.signature(layer.prepare).parameters
    extra = {"on_compiled_kernels": True} if "on_compiled_kernels" in arguments else {}
    edges = layer.prepare(edge_index, edge_type, None, num_nodes, **extra)
    weights = torch.randn(num_nodes, 8, generator=torch.Generator().manual_seed(2))
    times, cpus, result = [], [], []
    for _ in range(repeats):
        layer.zero_grad()
        x.grad = None
        start, cpu = time.perf_counter(), time.process_time()
        out, scores = layer(x, edge_index, edge_type, 0.7, edges=edges)
        ((out * weights).sum() + scores.square().sum()).backward()
        times.append(time.perf_counter() - start)
        cpus.append(time.process_time() - cpu)
        result = [out, scores, x.grad, *(p.grad for p in layer.parameters())]
    return statistics.median(times), statistics.median(cpus), digest(result)


def time_edge_operator(num_nodes: int, degree: int, repeats: int) -> tuple[float, float]:
    """Median wall-clock and process CPU seconds of `fused_edge_attention` forward and backward, width 8."""
    from sgt_core.models.fused_edge_attention import compact_edges, fused_edge_attention

    edge_index, code = expander_like(num_nodes, degree, seed=1)
    ptr = torch.arange(0, num_nodes * degree + 1, degree)
    edges = compact_edges(edge_index, code, ptr, 3)
    generator = torch.Generator().manual_seed(4)
    leaves = [torch.randn(num_nodes, 8, generator=generator).requires_grad_() for _ in range(3)]
    leaves += [torch.randn(3, 8, generator=generator).requires_grad_(), torch.zeros(3, requires_grad=True)]
    weights = torch.randn(num_nodes, 8, generator=generator)
    walls, cpus = [], []
    for _ in range(repeats):
        wall, cpu = time.perf_counter(), time.process_time()
        out, scores = fused_edge_attention(*leaves, None, None, None, 0.7, 8.0, edges)
        ((out * weights).sum() + scores.square().sum()).backward()
        walls.append(time.perf_counter() - wall)
        cpus.append(time.process_time() - cpu)
    return statistics.median(walls), statistics.median(cpus)


def time_slots(num_nodes: int, slots: int, repeats: int) -> tuple[float, float, str]:
    from sgt_core.models import SampledAttention

    torch.manual_seed(0)
    layer = SampledAttention(hidden=64, heads=4, num_edge_types=3)
    generator = torch.Generator().manual_seed(3)
    x = torch.randn(num_nodes, 64, generator=generator).requires_grad_()
    neighbours = torch.randint(0, num_nodes, (num_nodes, slots), generator=generator)
    types = torch.randint(0, 3, (num_nodes, slots), generator=generator)
    mask = torch.rand(num_nodes, slots, generator=generator) < 0.9
    weights = torch.randn(num_nodes, 64, generator=generator)
    times, cpus, result = [], [], []
    for _ in range(repeats):
        layer.zero_grad()
        x.grad = None
        start, cpu = time.perf_counter(), time.process_time()
        out = layer(x, x, neighbours, types, mask)
        (out * weights).sum().backward()
        times.append(time.perf_counter() - start)
        cpus.append(time.process_time() - cpu)
        result = [out, x.grad, *(p.grad for p in layer.parameters())]
    return statistics.median(times), statistics.median(cpus), digest(result)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=200_000)
    parser.add_argument("--degree", type=int, default=20, help="edges per node of the estimator's graph")
    parser.add_argument("--slots", type=int, default=16, help="sampled slots per node of the wide layer")
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--threads", type=int, nargs="+", default=[1, 2])
    args = parser.parse_args()
    for threads in args.threads:
        torch.set_num_threads(threads)
        time_estimator(args.nodes, args.degree, 1)  # warm-up: builds or loads the kernels, the allocator
        estimator, estimator_cpu, estimator_digest = time_estimator(args.nodes, args.degree, args.repeats)
        slot, slot_cpu, slot_digest = time_slots(args.nodes, args.slots, args.repeats)
        edges = args.nodes * args.degree
        print(f"threads {threads}: estimator layer fwd+bwd {estimator * 1e3:7.1f} ms wall, {estimator_cpu * 1e3:7.1f} "
              f"ms CPU ({estimator / edges * 1e9:5.1f} ns/edge, {estimator_digest}); slot layer fwd+bwd "
              f"{slot * 1e3:7.1f} ms wall, {slot_cpu * 1e3:7.1f} ms CPU ({slot_digest})", flush=True)
    for threads in args.threads:
        torch.set_num_threads(threads)
        wall, cpu = time_edge_operator(args.nodes, args.degree, args.repeats)
        print(f"threads {threads}: edge attention operator fwd+bwd {wall * 1e3:7.1f} ms wall, {cpu * 1e3:7.1f} ms CPU "
              f"(CPU / wall {cpu / wall:.2f})", flush=True)


if __name__ == "__main__":
    main()
