"""The `dataset` group: which graph to load (conf/dataset/*.yaml).

Each loader's parameters (besides `seed`) are its config's keys one to one (`sgt_core.data.load.LOADERS`),
and each loader checks its own values when it runs. What is checked here, with the rest of the typed
configuration and without importing a loader (PyG's dataset classes take seconds to import): the loader's
name, the PyG dataset's name, the `standardize` switch that `load_dataset` itself reads, and the values that
need no file to judge: a TU set's fold keys, a generated set's size and seed. The loaders call the same
checks, so a direct call refuses the same values with the same words.
"""

from __future__ import annotations

from sgt_core.config.section import BOOLEAN, ConfigProblems, Problem, is_int, is_number

# The loaders' names, `LOADERS`' keys (a test checks they agree).
DATASET_NAMES: tuple[str, ...] = ("minesweeper", "npz", "pyg", "long_range", "parquet", "synthetic", "zinc",
                                  "molecules", "ogb", "sbm_pattern", "sbm_cluster", "tu", "synthetic_multilabel")
# The loaders whose dataset is always one graph (a node task over it); the others load sets of many graphs,
# and `parquet` loads one or many by whether `nodes.graph_id` names a column.
ONE_GRAPH_LOADERS: tuple[str, ...] = ("minesweeper", "npz", "pyg", "long_range", "synthetic", "ogb")
# The names `dataset=pyg dataset.pyg_name=...` accepts, case-insensitively: `sgt_core.data.pyg.PYG_DATASETS`.
PYG_NAMES: tuple[str, ...] = ("Cora", "CiteSeer", "PubMed", "Minesweeper", "Tolokers", "Roman-empire",
                              "Amazon-ratings", "Questions", "Computers", "Photo", "CS", "Physics", "WikiCS")
# The generated sets' full (train, val, test) graph counts (Benchmarking GNNs: 100 / 20 / 20 graphs per
# pattern for PATTERN); `dataset.num_graphs` takes a share of them in these proportions (sgt_core.data.sbm).
SBM_SPLITS: dict[str, tuple[int, int, int]] = {"sbm_pattern": (10_000, 2_000, 2_000),
                                               "sbm_cluster": (10_000, 1_000, 1_000)}
# The TU loader's fold keys and their defaults (`sgt_core.data.tu.load_tu`'s), for a config that omits one.
TU_SPLIT_DEFAULTS = {"fold": 0, "num_folds": 10, "val_fraction": 0.1, "split_seed": 0, "degree_cap": 64}


def smallest_num_graphs(full: tuple[int, int, int]) -> int:
    """The fewest graphs for which each split's share of `full` is at least one graph (7 for PATTERN, 12 for
    CLUSTER)."""
    return -(-sum(full) // min(full))


def num_graphs_problems(num_graphs: object, full: tuple[int, int, int], name: str) -> list[Problem]:
    """A generated set's `dataset.num_graphs`: an integer, at least `smallest_num_graphs(full)`, where `full`
    is the full set's (train, val, test) counts and `name` the dataset's, for messages."""
    smallest = smallest_num_graphs(full)
    if not is_int(num_graphs):
        return [("dataset.num_graphs", f"must be an integer >= {smallest} ({name}), found {num_graphs!r}")]
    if num_graphs < smallest:
        return [("dataset.num_graphs", (f"must be at least {smallest} so that train, val and test each get a "
                                        f"graph ({name}: {full[0]:,} / {full[1]:,} / {full[2]:,} in the full "
                                        f"set), found {num_graphs}"))]
    return []


def generator_seed_problems(generator_seed: object) -> list[Problem]:
    """A generated set's `dataset.generator_seed`: an integer >= 0."""
    if is_int(generator_seed) and generator_seed >= 0:
        return []
    return [("dataset.generator_seed", f"must be an integer >= 0, found {generator_seed!r}")]


def fold_problems(fold: object, num_folds: object, val_fraction: object, split_seed: object,
                  degree_cap: object) -> list[Problem]:
    """A TU set's fold protocol: the first key out of range (`fold` is judged against `num_folds`)."""
    if not is_int(num_folds) or num_folds < 2:
        return [("dataset.num_folds", f"must be an integer >= 2, found {num_folds!r}")]
    if not is_int(fold) or not 0 <= fold < num_folds:
        return [("dataset.fold", (f"must be an integer in 0..{num_folds - 1} (dataset.num_folds={num_folds}), "
                                  f"found {fold!r}"))]
    if not (is_number(val_fraction) and 0 < val_fraction < 1):
        return [("dataset.val_fraction", f"must be a number in (0, 1), found {val_fraction!r}")]
    if not is_int(split_seed) or split_seed < 0:
        return [("dataset.split_seed", f"must be an integer >= 0, found {split_seed!r}")]
    if not is_int(degree_cap) or degree_cap < 1:
        return [("dataset.degree_cap", f"must be an integer >= 1, found {degree_cap!r}")]
    return []


def raise_problems(problems: list[Problem]) -> None:
    """Raises ConfigProblems for `problems`, if any: for the loaders, which run the same checks."""
    if problems:
        raise ConfigProblems(problems)


def dataset_problems(dataset: object) -> list[Problem]:
    """An unknown loader or PyG name, a non-boolean `standardize`, and the loader's values that need no file:
    a TU set's fold keys, a generated set's size and seed; the loaders check the rest of theirs."""
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
    if name == "tu":
        problems += fold_problems(**{key: dataset.get(key, default) for key, default in TU_SPLIT_DEFAULTS.items()})
    if name in SBM_SPLITS:
        problems += num_graphs_problems(dataset.get("num_graphs", sum(SBM_SPLITS[name])), SBM_SPLITS[name], name)
        problems += generator_seed_problems(dataset.get("generator_seed", 0))
    return problems


def is_one_graph(dataset: dict) -> bool:
    """Whether the `dataset` group loads one graph rather than a set of many, known before loading it."""
    if not isinstance(dataset, dict):  # reported by dataset_problems
        return False
    if dataset.get("name") == "parquet":
        return (dataset.get("nodes") or {}).get("graph_id") is None
    return dataset.get("name") in ONE_GRAPH_LOADERS
