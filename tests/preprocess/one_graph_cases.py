"""The one-graph interaction graphs whose bits must never change, and their checksums.

`CHECKSUMS_FILE` holds the checksums the builder gave before the interaction graph's components learned
to work per graph (issue 48), computed by `python -m tests.preprocess.one_graph_cases` on that code (and
again, on code giving the same bits, when floats came to be compared to `DECIMALS`); the
test (`test_builder_one_graph_unchanged.py`) rebuilds every case and compares. Regenerate it only for an intended
change of the one-graph output, and say so in the commit.

The cases: the default Minesweeper grid with the default preprocess options, as the stage builds it; every
combination of the six components on a small random graph (a connected graph whose Laplacian has a simple
spectrum, so the LPE's eigenvectors are unique up to sign); the per-component expander on a disconnected
graph; and a dataset of one graph with categorical node and edge features (`build_graph_set`, G = 1).
"""

from __future__ import annotations

import hashlib
import itertools
import json
from pathlib import Path

import numpy as np
import torch
from torch_geometric.data import Data

from sgt_core.config import compose_config
from sgt_core.config.preprocess import AnchorsConfig, ExpanderConfig, LpeConfig, SubstructuresConfig
from sgt_core.data import load_dataset
from sgt_core.data.many_graphs import build_graph_set
from sgt_core.preprocess.builder import SUBSTRUCTURE_STREAM, build_interaction_graph
from sgt_core.preprocess.interaction_graph import InteractionGraph
from sgt_core.preprocess.substructure_tokens import sample_substructure_tokens

CHECKSUMS_FILE = Path(__file__).parent / "data" / "one_graph_checksums.json"
COMPONENTS = ("self_loops", "expander", "virtual_nodes", "anchors", "substructures", "lpe")
SEED = 3
# Small caps keep the matching quick on the test graphs.
CAPS = {"cycle_3": 50, "cycle_5": 50, "cycle_6": 50, "star_2": 50, "star_3": 50, "path_4": 50, "path_6": 50,
        "hop2": None, "random_walk": None}


def random_connected_graph(num_nodes: int, extra_edges: int, seed: int) -> Data:
    """A random tree plus random extra edges, both directions, sorted, with features, labels and a split."""
    rng = np.random.default_rng(seed)
    parent = np.array([rng.integers(0, v) for v in range(1, num_nodes)])
    pairs = np.stack([parent, np.arange(1, num_nodes)], axis=1)
    extra = rng.integers(0, num_nodes, size=(extra_edges, 2))
    pairs = np.concatenate([pairs, extra[extra[:, 0] != extra[:, 1]]])
    keys = np.unique(np.concatenate([pairs[:, 0] * num_nodes + pairs[:, 1], pairs[:, 1] * num_nodes + pairs[:, 0]]))
    edge_index = torch.from_numpy(np.stack([keys // num_nodes, keys % num_nodes]))
    split = rng.random(num_nodes)
    return Data(
        x=torch.from_numpy(rng.standard_normal((num_nodes, 4), dtype=np.float32)),
        y=torch.from_numpy(rng.integers(0, 3, num_nodes)),
        edge_index=edge_index,
        train_mask=torch.from_numpy(split < 0.5),
        val_mask=torch.from_numpy((split >= 0.5) & (split < 0.75)),
        test_mask=torch.from_numpy(split >= 0.75),
        num_classes=3,
    )


def two_components() -> Data:
    """Two random connected graphs side by side (ids 0..39 and 40..69), as one graph."""
    first, second = random_connected_graph(40, 30, 1), random_connected_graph(30, 20, 2)
    edge_index = torch.cat([first.edge_index, second.edge_index + 40], dim=1)
    return Data(x=torch.cat([first.x, second.x]), y=torch.cat([first.y, second.y]), edge_index=edge_index,
                **{name: torch.cat([first[name], second[name]]) for name in ("train_mask", "val_mask", "test_mask")},
                num_classes=3)


def one_graph_set() -> Data:
    """A dataset of one graph (G = 1) with categorical node features and a node task.

    No edge features: `build_graph_set` refuses them at the time of writing (PyG's `remove_self_loops` is
    given a list of attributes).
    """
    graph = random_connected_graph(50, 40, 4)
    rng = np.random.default_rng(5)
    src, dst = graph.edge_index
    once = (src < dst).numpy()
    return build_graph_set(
        "one graph", task="node_classification", graph_ptr=[0, 50], edge_index=graph.edge_index[:, once],
        y=graph.y, train_mask=graph.train_mask, val_mask=graph.val_mask, test_mask=graph.test_mask,
        x=graph.x, x_cat=rng.integers(0, 5, (50, 2)), x_cat_sizes=[5, 5],
    )


def _options(on: set[str], graph: Data) -> dict:
    tokens = None
    if "substructures" in on:
        options = SubstructuresConfig(threshold=2, max_size=8, types=CAPS)
        tokens = sample_substructure_tokens(graph.edge_index.numpy(), graph.num_nodes, options,
                                            np.random.default_rng([SEED, SUBSTRUCTURE_STREAM]))
    return {
        "self_loops": "self_loops" in on,
        "expander": ExpanderConfig(degree=6, max_tries=50) if "expander" in on else None,
        "virtual_nodes": 2 if "virtual_nodes" in on else 0,
        "seed": SEED,
        "anchors": AnchorsConfig(k=2, max_khop_per_node=4, max_anchors_per_node=3, max_spd=6)
        if "anchors" in on else None,
        "substructure_tokens": tokens,
        "lpe": LpeConfig(m=6) if "lpe" in on else None,
    }


def cases() -> dict:
    """Case name -> a function building its interaction graph."""
    built = {}

    def minesweeper() -> InteractionGraph:
        cfg = compose_config()
        graph = load_dataset(cfg["dataset"], seed=cfg["seed"])
        preprocess = cfg["preprocess"]
        return build_interaction_graph(
            graph, self_loops=preprocess["self_loops"], expander=ExpanderConfig.from_dict(preprocess["expander"]),
            virtual_nodes=preprocess["virtual_nodes"], seed=cfg["seed"], compact=True)

    built["minesweeper_default"] = minesweeper
    graph = random_connected_graph(60, 50, 0)
    for size in range(len(COMPONENTS) + 1):
        for on in itertools.combinations(COMPONENTS, size):
            name = "+".join(on) or "none"
            built[name] = lambda on=on: build_interaction_graph(graph, **_options(set(on), graph))
    built["all_compact"] = lambda: build_interaction_graph(graph, **_options(set(COMPONENTS), graph), compact=True)
    built["anchors_uncapped"] = lambda: build_interaction_graph(
        graph, **{**_options({"self_loops", "expander"}, graph), "anchors": AnchorsConfig(k=2, max_khop_per_node=None)})
    split = two_components()
    built["per_component_expander"] = lambda: build_interaction_graph(
        split, self_loops=True, expander=ExpanderConfig(degree=4, per_component=True, max_tries=50), virtual_nodes=1,
        seed=SEED)
    graph_set = one_graph_set()
    built["graph_set_of_one"] = lambda: build_interaction_graph(graph_set, **_options(set(COMPONENTS), graph_set))
    return built


# Floats are compared to this many decimals: LAPACK's last bits differ between CPUs (MKL takes other kernels on
# Intel and AMD), so a Laplacian's zero eigenvalue is 1e-16 on one and 2e-16 on another, and the expander's
# second eigenvalue differs in its 16th digit. Any change of the builder's own is far larger.
DECIMALS = 6


def _rounded(value):
    """Floats (tensors, scalars, in dicts) rounded to DECIMALS, -0.0 as 0.0; everything else as it is."""
    if isinstance(value, torch.Tensor) and value.is_floating_point():
        return torch.round(value.double(), decimals=DECIMALS).to(value.dtype) + 0.0
    if isinstance(value, float):
        return round(value, DECIMALS) + 0.0
    if isinstance(value, dict):
        return {key: _rounded(item) for key, item in value.items()}
    return value


def _digest(value) -> str:
    value = _rounded(value)
    if isinstance(value, torch.Tensor):
        value = value.contiguous()
        payload = f"{value.dtype}{tuple(value.shape)}".encode() + value.numpy().tobytes()
    else:
        payload = json.dumps(value, sort_keys=True, default=str).encode()
    return hashlib.sha256(payload).hexdigest()[:16]


def checksums(interaction_graph: InteractionGraph) -> dict[str, str]:
    """One digest per field (dtype, shape and bytes of tensors, floats to DECIMALS); the stats without their
    timings."""
    fields = {name: getattr(interaction_graph, name) for name in interaction_graph.__dataclass_fields__}
    fields["stats"] = {key: value for key, value in fields["stats"].items() if not key.startswith("seconds_")}
    return {name: _digest(value) for name, value in fields.items()}


if __name__ == "__main__":
    CHECKSUMS_FILE.write_text(json.dumps({name: checksums(build()) for name, build in cases().items()}, indent=1,
                                         sort_keys=True) + "\n")
    print(f"wrote {CHECKSUMS_FILE}")
