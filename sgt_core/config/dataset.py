"""The `dataset` group: which graph to load (conf/dataset/*.yaml).

Each loader's parameters (besides `seed`) are its config's keys one to one (`sgt_core.data.load.LOADERS`),
and each loader checks its own values when it runs, which the CLI does before any stage. What is checked
here, without importing a loader (PyG's dataset classes take seconds to import): the loader's name, the
PyG dataset's name and the `standardize` switch that `load_dataset` itself reads.
"""

from __future__ import annotations

from sgt_core.config.section import BOOLEAN, Problem

# The loaders' names, `LOADERS`' keys (a test checks they agree).
DATASET_NAMES: tuple[str, ...] = ("minesweeper", "npz", "pyg", "long_range", "parquet", "synthetic", "zinc",
                                  "molecules", "ogb", "sbm_pattern", "sbm_cluster", "tu", "synthetic_multilabel")
# The loaders whose dataset is always one graph (a node task over it); the others load sets of many graphs,
# and `parquet` loads one or many by whether `nodes.graph_id` names a column.
ONE_GRAPH_LOADERS: tuple[str, ...] = ("minesweeper", "npz", "pyg", "long_range", "synthetic", "ogb")
# The names `dataset=pyg dataset.pyg_name=...` accepts, case-insensitively: `sgt_core.data.pyg.PYG_DATASETS`.
PYG_NAMES: tuple[str, ...] = ("Cora", "CiteSeer", "PubMed", "Minesweeper", "Tolokers", "Roman-empire",
                              "Amazon-ratings", "Questions", "Computers", "Photo", "CS", "Physics", "WikiCS")


def dataset_problems(dataset: object) -> list[Problem]:
    """An unknown loader or PyG name, or a non-boolean `standardize`; the loaders check their own values."""
    if not isinstance(dataset, dict):
        return [("dataset", f"must be a group of keys, found {dataset!r}")]
    check, expected = BOOLEAN
    standardize = dataset.get("standardize", False)  # optional: load_dataset defaults it to false
    problems = [] if check(standardize) else [("dataset.standardize", f"{expected}, found {standardize!r}")]
    name = dataset.get("name")
    if name not in DATASET_NAMES:
        return [*problems, ("dataset.name", f"unknown dataset {name!r}; expected one of {', '.join(DATASET_NAMES)}")]
    pyg_name = dataset.get("pyg_name")
    if name == "pyg" and str(pyg_name).lower() not in {known.lower() for known in PYG_NAMES}:
        return [*problems, ("dataset.pyg_name", (f"unknown PyG dataset {pyg_name!r}; known names "
                                                 f"(case-insensitive): {', '.join(PYG_NAMES)}"))]
    return problems


def is_one_graph(dataset: dict) -> bool:
    """Whether the `dataset` group loads one graph rather than a set of many, known before loading it."""
    if not isinstance(dataset, dict):  # reported by dataset_problems
        return False
    if dataset.get("name") == "parquet":
        return (dataset.get("nodes") or {}).get("graph_id") is None
    return dataset.get("name") in ONE_GRAPH_LOADERS
