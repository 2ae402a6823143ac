"""Times one estimator attention layer and one sampled-slot attention layer, forward and backward, on the CPU.

A random expander-like graph (every node draws `--degree` sources uniformly, no locality), the estimator at
width 8 over every edge, the wide network's attention at width 64 over `--slots` sampled slots per node.
Prints one line per thread count, the median of `--repeats` runs, and a checksum of the results so that
two builds (portable and SGT_KERNELS_NATIVE=1) can be compared bit for bit; then the edge attention
operator alone, in wall-clock and process CPU time (CPU / wall > 1: more than one thread worked, which
holds even when other processes share the cores and make the wall-clock times noisy).

    python -m benchmarks.kernels --threads 1 2
    python -m benchmarks.kernels --edge-features 8   # both layers with 8 continuous features per edge (slot)

With `--edge-features F` every edge (slot) carries F features in [0, 1] (ogbn-proteins' confidence scores;
on its interaction graph most attention edges are the input graph's own), and W_E, W_B are random, so the
kernels do the feature arithmetic the trained network does. The default (0) runs the same inputs as before.
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


def edge_features(shape: tuple[int, ...], count: int) -> torch.Tensor | None:
    """Features in [0, 1] from a generator of their own (the other inputs stay as without them), or None."""
    return torch.rand(*shape, count, generator=torch.Generator().manual_seed(9)) if count else None


def random_feature_weights(layer: torch.nn.Module) -> None:
    """W_E and W_B random instead of zero, drawn apart from the layer's other weights."""
    if getattr(layer, "feature_scale", None) is not None:
        generator = torch.Generator().manual_seed(10)
        with torch.no_grad():
            for weight in (layer.feature_scale, layer.feature_bias):
                weight.copy_(torch.randn(weight.shape, generator=generator))


def time_estimator(num_nodes: int, degree: int, repeats: int, features: int = 0) -> tuple[float, float, str]:
    from sgt_core.models import EstimatorAttention

    torch.manual_seed(0)
    extra_layer = {"edge_feature_dim": features} if features else {}
    layer = EstimatorAttention(width=8, num_edge_types=3, memory_efficient=True, **extra_layer)
    random_feature_weights(layer)
    edge_index, edge_type = expander_like(num_nodes, degree, seed=1)
    edge_index = edge_index.to(torch.int32)  # as the stages hold them
    x = torch.randn(num_nodes, 8, requires_grad=True)
    arguments = inspect.signature(layer.prepare).parameters
    extra = {"on_compiled_kernels": True} if "on_compiled_kernels" in arguments else {}
    if features:
        extra["edge_features"] = edge_features((edge_type.numel(),), features)
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


def time_edge_operator(num_nodes: int, degree: int, repeats: int, features: int = 0) -> tuple[float, float]:
    """Median wall-clock and process CPU seconds of `fused_edge_attention` forward and backward, width 8."""
    from sgt_core.models.fused_edge_attention import compact_edges, fused_edge_attention

    edge_index, code = expander_like(num_nodes, degree, seed=1)
    ptr = torch.arange(0, num_nodes * degree + 1, degree)
    edges = compact_edges(edge_index, code, ptr, 3)
    generator = torch.Generator().manual_seed(4)
    leaves = [torch.randn(num_nodes, 8, generator=generator).requires_grad_() for _ in range(3)]
    leaves += [torch.randn(3, 8, generator=generator).requires_grad_(), torch.zeros(3, requires_grad=True)]
    weights = torch.randn(num_nodes, 8, generator=generator)
    edge_rows = edge_features((code.numel(),), features)
    if features:  # W_E^T and W_B^T after the code rows
        rows = torch.Generator().manual_seed(10)
        leaves[3] = torch.cat([leaves[3].detach(), torch.randn(features, 8, generator=rows)]).requires_grad_()
        leaves[4] = torch.cat([leaves[4].detach(), torch.randn(features, generator=rows)]).requires_grad_()
    walls, cpus = [], []
    for _ in range(repeats):
        wall, cpu = time.perf_counter(), time.process_time()
        out, scores = fused_edge_attention(*leaves, None, None, None, 0.7, 8.0, edges, edge_rows)
        ((out * weights).sum() + scores.square().sum()).backward()
        walls.append(time.perf_counter() - wall)
        cpus.append(time.process_time() - cpu)
    return statistics.median(walls), statistics.median(cpus)


def time_slots(num_nodes: int, slots: int, repeats: int, features: int = 0) -> tuple[float, float, str]:
    from sgt_core.models import SampledAttention

    torch.manual_seed(0)
    layer = SampledAttention(hidden=64, heads=4, num_edge_types=3, **({"edge_feature_dim": features} if features
                                                                      else {}))
    random_feature_weights(layer)
    slot_features = edge_features((num_nodes, slots), features)
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
        out = layer(x, x, neighbours, types, mask, **({"neighbour_features": slot_features} if features else {}))
        (out * weights).sum().backward()
        times.append(time.perf_counter() - start)
        cpus.append(time.process_time() - cpu)
        result = [out, x.grad, *(p.grad for p in layer.parameters())]
    return statistics.median(times), statistics.median(cpus), digest(result)


def saved_bytes(num_nodes: int, degree: int, features: int, layers: int = 2) -> int:
    """Bytes that `layers` estimator layers over one graph keep for their backward pass, each storage counted
    once (the layers share the graph's feature tensor, as the estimator's layers do)."""
    from sgt_core.models import EstimatorAttention

    torch.manual_seed(0)
    edge_index, edge_type = expander_like(num_nodes, degree, seed=1)
    stack = [EstimatorAttention(width=8, num_edge_types=3, memory_efficient=True,
                                **({"edge_feature_dim": features} if features else {})) for _ in range(layers)]
    edges = stack[0].prepare(edge_index.to(torch.int32), edge_type, None, num_nodes,
                             **({"edge_features": edge_features((edge_type.numel(),), features)} if features else {}))
    storages: dict[int, int] = {}

    def keep(tensor: torch.Tensor) -> torch.Tensor:
        storages[tensor.untyped_storage().data_ptr()] = tensor.untyped_storage().nbytes()
        return tensor

    h = torch.randn(num_nodes, 8, requires_grad=True)
    with torch.autograd.graph.saved_tensors_hooks(keep, lambda tensor: tensor):
        for layer in stack:
            out, _scores = layer(h, None, None, 0.7, edges=edges)
            h = h + out
    return sum(storages.values())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=200_000)
    parser.add_argument("--degree", type=int, default=20, help="edges per node of the estimator's graph")
    parser.add_argument("--slots", type=int, default=16, help="sampled slots per node of the wide layer")
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--threads", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--edge-features", type=int, default=0, help="continuous features per edge (0: none)")
    args = parser.parse_args()
    features = args.edge_features
    if features:
        print(f"with {features} continuous features per edge and slot", flush=True)
    for threads in args.threads:
        torch.set_num_threads(threads)
        time_estimator(args.nodes, args.degree, 1, features)  # warm-up: builds or loads the kernels, the allocator
        estimator, estimator_cpu, estimator_digest = time_estimator(args.nodes, args.degree, args.repeats, features)
        slot, slot_cpu, slot_digest = time_slots(args.nodes, args.slots, args.repeats, features)
        edges = args.nodes * args.degree
        print(f"threads {threads}: estimator layer fwd+bwd {estimator * 1e3:7.1f} ms wall, {estimator_cpu * 1e3:7.1f} "
              f"ms CPU ({estimator / edges * 1e9:5.1f} ns/edge, {estimator_digest}); slot layer fwd+bwd "
              f"{slot * 1e3:7.1f} ms wall, {slot_cpu * 1e3:7.1f} ms CPU ({slot_digest})", flush=True)
    if features:
        edges = args.nodes * args.degree
        with_features, without = saved_bytes(args.nodes, args.degree, features), saved_bytes(args.nodes, args.degree, 0)
        print(f"saved for the backward pass by two estimator layers: {without / edges:.1f} B/edge without features, "
              f"{with_features / edges:.1f} B/edge with {features} (the difference: the graph's one [E, {features}] "
              "tensor, which both layers share)", flush=True)
    for threads in args.threads:
        torch.set_num_threads(threads)
        wall, cpu = time_edge_operator(args.nodes, args.degree, args.repeats, features)
        edges = args.nodes * args.degree
        print(f"threads {threads}: edge attention operator fwd+bwd {wall * 1e3:7.1f} ms wall, {cpu * 1e3:7.1f} ms CPU "
              f"(CPU / wall {cpu / wall:.2f}; {cpu / edges * 1e9:5.1f} ns CPU/edge)", flush=True)


if __name__ == "__main__":
    main()
