"""Code versions: which sgt_core sources a stage runs (its static import closure and the C++ sources beside
it), hashed into every cache key so that editing a stage's code reruns it."""

from __future__ import annotations

import ast
import functools
import hashlib
import threading
from pathlib import Path

# The sgt_core folder: the modules a stage imports are looked up, and hashed, under it.
PACKAGE_ROOT = Path(__file__).resolve().parent
PACKAGE = PACKAGE_ROOT.name
# Sources that modules read at run time instead of importing: the C++ kernels that sgt_core/kernels/library.py
# compiles. Those beside any module of a stage's import closure count as part of its code.
RUNTIME_SOURCE_SUFFIXES = (".cpp", ".h")
# CPython 3.11 keeps the depth counter of `ast.parse` in one place for all threads (CPython issue gh-106905):
# when another thread parses while ours is switched out (a finaliser that releases the GIL mid-parse; Python
# 3.11's tracebacks parse each line they underline), ours fails with this spurious SystemError. Its tree was
# never returned, so parsing again is sound; our own parses take turns.
_SPURIOUS_AST_ERROR = "AST constructor recursion depth mismatch"
_AST_ATTEMPTS = 100
_parse_lock = threading.Lock()


def module_file(module: str, root: Path = PACKAGE_ROOT) -> Path | None:
    """The source file of a dotted sgt_core module under `root` (a package's __init__.py); None if none."""
    parts = module.split(".")
    if parts[0] != PACKAGE:
        return None
    base = root.joinpath(*parts[1:])
    for candidate in (base / "__init__.py", base.with_suffix(".py")):
        if candidate.is_file():
            return candidate
    return None


def parent_modules(module: str) -> list[str]:
    """`a`, `a.b`, `a.b.c` for `a.b.c`: importing a module runs every package above it first."""
    parts = module.split(".")
    return [".".join(parts[:end]) for end in range(1, len(parts) + 1)]


def parse_source(source: bytes, path: Path) -> ast.Module:
    """`ast.parse`, parsing again when another thread's parse spoiled ours (see _SPURIOUS_AST_ERROR)."""
    with _parse_lock:
        for attempt in range(_AST_ATTEMPTS):
            try:
                return ast.parse(source, filename=str(path))
            except SystemError as error:
                if not str(error).startswith(_SPURIOUS_AST_ERROR) or attempt == _AST_ATTEMPTS - 1:
                    raise


def imported_names(path: Path, module: str) -> set[str]:
    """Every dotted name that the source of `module` imports, anywhere in it (stages import lazily in functions).

    `from a import b` yields both `a` and `a.b`, since b may be a submodule; names that are not modules
    are dropped later, when no file answers them. Relative imports are resolved against `module`.
    """
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    names: set[str] = set()
    for node in ast.walk(parse_source(path.read_bytes(), path)):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:  # `from . import x` (level 1) is relative to the package, `..` to its parent
                anchor = package.split(".")[:len(package.split(".")) - node.level + 1]
                base = ".".join([*anchor, *([node.module] if node.module else [])])
            names.add(base)
            names.update(f"{base}.{alias.name}" for alias in node.names if alias.name != "*")
    return names


@functools.cache
def module_closure(module: str, root: Path = PACKAGE_ROOT) -> tuple[str, ...]:
    """The sgt_core modules that running `module` can import: itself, its packages and all they import, sorted.

    Found statically, so an import inside a function that a given run skips still counts: the closure may be
    larger than what one run loads, never smaller.
    """
    if module_file(module, root) is None:
        raise ValueError(f"{module}: no such module under {root}")
    seen: set[str] = set()
    pending = [module]
    while pending:
        for name in parent_modules(pending.pop()):
            path = module_file(name, root)
            if name in seen or path is None:  # known already, or not an sgt_core module (torch, a function)
                continue
            seen.add(name)
            pending.extend(imported_names(path, name))
    return tuple(sorted(seen))


@functools.cache
def code_files(module: str, root: Path = PACKAGE_ROOT) -> tuple[str, ...]:
    """Paths (relative to root's parent, sorted) of the sources that running `module` uses.

    Those are the Python files of its import closure and the C sources beside any of them.
    """
    files: set[Path] = set()
    for name in module_closure(module, root):
        path = module_file(name, root)
        files.add(path)
        files.update(beside for beside in path.parent.iterdir() if beside.suffix in RUNTIME_SOURCE_SUFFIXES)
    return tuple(sorted(path.relative_to(root.parent).as_posix() for path in files))


@functools.cache
def code_version(*modules: str, root: Path = PACKAGE_ROOT) -> str:
    """Hash of the sources that running `modules` uses (see `code_files`), part of every cache key.

    Each file enters as its relative path and its content's hash, so renaming a file counts too, and the
    key does not depend on where the checkout lives.
    """
    digest = hashlib.sha256()
    for relative in sorted({path for module in modules for path in code_files(module, root)}):
        content = hashlib.sha256((root.parent / relative).read_bytes()).hexdigest()
        digest.update(f"{relative}\0{content}\n".encode())
    return digest.hexdigest()[:16]
