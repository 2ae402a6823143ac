"""Datasets: every loader returns a validated `torch_geometric.data.Data` with the same fields.

Fields of the returned graph (the contract the rest of the pipeline relies on):
    x: float32 [N, F] node features
    y: int64 [N] class labels in [0, num_classes)
    edge_index: int64 [2, E] each undirected edge in both directions, no self-loops, no duplicates
    train_mask, val_mask, test_mask: bool [N], pairwise disjoint, none empty
    num_classes: int
    source: str, where the graph came from (file path or generator description), for error messages
"""


__all__ = ["load_dataset"]


def __getattr__(name: str):
    # Imported on first use: the loaders pull in torch_geometric and scipy (seconds of imports), which a process that
    # only reads sgt_core.data.tables (the flow's, computing cache keys) never needs.
    if name == "load_dataset":
        from sgt_core.data.load import load_dataset

        return load_dataset
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
