"""The import graph of sgt_core and flows, from the sources: no cycles, no tracker in the algorithms.

Every import counts, also those inside functions (stages and the CLI import lazily), and importing a
module counts as importing the packages above it, whose `__init__` runs first.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from sgt_core.code_version import imported_names, parent_modules
from tests.conftest import REPO_ROOT

PACKAGES = ("sgt_core", "flows")


def modules(root: Path = REPO_ROOT) -> dict[str, Path]:
    """Every module of the packages, by dotted name (a package by its own name, for its __init__.py)."""
    found = {}
    for package in PACKAGES:
        for path in sorted((root / package).rglob("*.py")):
            parts = path.relative_to(root).with_suffix("").parts
            found[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return found


def import_graph(root: Path = REPO_ROOT) -> dict[str, set[str]]:
    """Module -> the modules of the packages that it imports, with the packages above each of them.

    The packages above the importing module itself are left out: they are already being imported when it
    runs (a package's __init__ importing its own submodules is no cycle).
    """
    known = modules(root)
    graph = {}
    for name, path in known.items():
        own = set(parent_modules(name))
        targets = set()
        for imported in imported_names(path, name):
            while imported and imported not in known:  # `from a.b import f`: f is a function of a.b
                imported = imported.rpartition(".")[0]
            if imported:
                targets.update(parent for parent in parent_modules(imported) if parent in known and parent not in own)
        graph[name] = targets
    return graph


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One cycle of the graph as [a, b, ..., a], or None (depth-first search, sorted for a stable answer)."""
    state: dict[str, str] = {}  # "open" while on the search path, "done" once all its successors are
    path: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = "open"
        path.append(node)
        for successor in sorted(graph.get(node, ())):
            if state.get(successor) == "open":
                return [*path[path.index(successor):], successor]
            if successor not in state and (cycle := visit(successor)):
                return cycle
        path.pop()
        state[node] = "done"
        return None

    for node in sorted(graph):
        if node not in state and (cycle := visit(node)):
            return cycle
    return None


def subpackage(module: str) -> str:
    """`sgt_core.preprocess` for every module under it; top-level modules stand for themselves."""
    return ".".join(module.split(".")[:2])


def test_the_graph_sees_lazy_relative_and_parent_package_imports(tmp_path):
    for name, source in {
        "sgt_core/__init__.py": "",
        "sgt_core/a/__init__.py": "from . import x\n",
        "sgt_core/a/x.py": "def later():\n    from sgt_core.b.y import thing\n",
        "sgt_core/b/__init__.py": "",
        "sgt_core/b/y.py": "from ..a import x\nthing = 1\n",
        "flows/__init__.py": "",
    }.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(source)
    graph = import_graph(tmp_path)
    assert graph["sgt_core.a"] == {"sgt_core.a.x"}
    assert graph["sgt_core.a.x"] == {"sgt_core.b", "sgt_core.b.y"}
    assert graph["sgt_core.b.y"] == {"sgt_core.a", "sgt_core.a.x"}
    assert find_cycle(graph) == ["sgt_core.a", "sgt_core.a.x", "sgt_core.b.y", "sgt_core.a"]


def test_no_module_imports_itself_back():
    cycle = find_cycle(import_graph())
    assert cycle is None, "import cycle: " + " -> ".join(cycle)


def test_no_two_subpackages_import_each_other():
    # e.g. sgt_core.preprocess and sgt_core.sampling, or the models and the samplers: each layer only
    # imports the ones below it.
    packages: dict[str, set[str]] = {}
    for module, targets in import_graph().items():
        packages.setdefault(subpackage(module), set()).update(
            subpackage(target) for target in targets if subpackage(target) != subpackage(module))
    cycle = find_cycle(packages)
    assert cycle is None, "import cycle between packages: " + " -> ".join(cycle)


def test_the_algorithms_import_neither_prefect_nor_mlflow():
    # Stages are plain functions; flows/ wires them into Prefect and records them in MLflow.
    offending = sorted(
        f"{name} imports {imported}"
        for name, path in modules().items() if name.partition(".")[0] == "sgt_core"
        for imported in imported_names(path, name) if imported.partition(".")[0] in ("prefect", "mlflow"))
    assert not offending, offending


CHECK_CONFIG = """
import sys
from sgt_core.config import compose_config
compose_config([])
print(" ".join(sorted(name for name in sys.modules
                      if name.startswith(("sgt_core.models", "torch_geometric.datasets")))))
"""


def test_checking_a_config_imports_no_model_or_dataset_code():
    completed = subprocess.run([sys.executable, "-c", CHECK_CONFIG], cwd=REPO_ROOT, capture_output=True,
                               text=True, check=True)
    assert completed.stdout.split() == []
