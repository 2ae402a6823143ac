"""Builds the `sgt` torch operators' C++ CPU kernels (the sources beside this file, one per operator family) once
per machine and loads them."""

from __future__ import annotations

import functools
import hashlib
import logging
import os
import platform
import re
import shutil
import subprocess
import types
from pathlib import Path

import torch

log = logging.getLogger(__name__)

KERNEL_DIR = Path(__file__).parent
# The file whose `m.def` lines hold the operator schemas (`schemas`).
SCHEMAS = KERNEL_DIR / "schemas.cpp"
# -O3 as the C kernels had; -fopenmp because at::parallel_for is OpenMP code inlined from ATen's headers
# (without it the loops run on one thread); the library then shares the libgomp that torch loaded (same
# soname), so torch.set_num_threads governs it. -ffp-contract=off: no fused multiply-adds, whatever the
# CPU, so that an add's rounding never depends on the build. No -ffast-math: it would change exp() and
# NaN handling; `omp simd` already lets the compiler vectorise the short reductions.
FLAGS = ["-O3", "-fopenmp", "-ffp-contract=off"]
# SGT_KERNELS_NATIVE=1 adds -march=native: code for this CPU's vector units (docs/design-notes.md,
# "Compiled CPU kernels"). Its results differ in the last bits from the portable build's (wider vector
# sums), so it is a backend of its own in the stages' cache keys.
NATIVE = "SGT_KERNELS_NATIVE"
# SGT_CPU_KERNELS=0 turns the compiled kernels off (the torch implementations run instead).
SWITCH = "SGT_CPU_KERNELS"

# The library loaded into this process: a second one with the same TORCH_LIBRARY would abort the process.
_loaded: Path | None = None


def cache_dir() -> Path:
    """$SGT_KERNEL_CACHE, else $XDG_CACHE_HOME/sgt/kernels, else ~/.cache/sgt/kernels."""
    if os.environ.get("SGT_KERNEL_CACHE"):
        return Path(os.environ["SGT_KERNEL_CACHE"])
    base = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(base) / "sgt" / "kernels"


def native() -> bool:
    """Whether builds target this CPU (SGT_KERNELS_NATIVE=1) rather than the portable baseline."""
    return os.environ.get(NATIVE, "0") == "1"


def flags() -> list[str]:
    return [*FLAGS, "-march=native"] if native() else list(FLAGS)


@functools.cache  # once per process: it reads /proc/cpuinfo
def _cpu_identity() -> str:
    """The CPU's model and feature flags (what -march=native compiles for)."""
    try:
        lines = Path("/proc/cpuinfo").read_text().splitlines()
    except OSError:
        return platform.processor() or platform.machine()
    wanted = ("model name", "flags", "Features", "CPU part")
    return "\n".join(sorted({line for line in lines if line.split(":")[0].strip() in wanted}))


@functools.cache  # once per process: it runs the compiler
def _compiler_version() -> str:
    compiler = os.environ.get("CXX") or shutil.which("c++") or "c++"
    completed = subprocess.run([compiler, "--version"], capture_output=True, text=True, check=False)
    return completed.stdout


def sources(directory: Path = KERNEL_DIR) -> list[Path]:
    """The C++ sources compiled together into the library, sorted: every .cpp file in `directory`."""
    return sorted(directory.glob("*.cpp"))


def extension_name(directory: Path | None = None) -> str:
    """The build's name: a hash of the sources and headers (names and text) in `directory`, the flags, the
    compiler, torch's version and (native builds) the CPU.

    An edited, added or renamed source, another compiler or torch, or another CPU for a native build each
    get a build folder of their own, so a stale library is never loaded.
    """
    directory = directory or KERNEL_DIR
    files = sorted([*directory.glob("*.cpp"), *directory.glob("*.h")])
    parts = [*(f"{path.name}\0{path.read_text()}" for path in files), " ".join(flags()), _compiler_version(),
             torch.__version__, platform.machine(), _cpu_identity() if native() else ""]
    return "sgt_kernels_" + hashlib.sha256("\n".join(parts).encode()).hexdigest()[:16]


def build(verbose: bool = False) -> Path:
    """Compiles the kernel sources (or finds them built) under `cache_dir()` and loads it into this process.

    torch.utils.cpp_extension builds in a folder of its own per name and holds a lock file there, so
    processes starting together build once and the others wait for that build. Returns the library's path.
    """
    global _loaded
    if _loaded is not None:
        return _loaded
    name = extension_name()
    directory = cache_dir() / name
    built = directory / f"{name}.so"
    if built.is_file() and not (directory / "lock").exists():
        # Built, and no build under way (cpp_extension holds `lock` while it builds): load it directly,
        # without importing cpp_extension (setuptools) and running ninja, ~0.5 s of every stage's start.
        torch.ops.load_library(str(built))
        _loaded = built
        return _loaded
    from torch.utils import cpp_extension

    directory.mkdir(parents=True, exist_ok=True)
    path = cpp_extension.load(name=name, sources=[str(path) for path in sources()], extra_cflags=flags(), extra_ldflags=["-fopenmp"],
                              build_directory=str(directory), is_python_module=False, verbose=verbose)
    _loaded = Path(path)
    return _loaded


@functools.cache
def cpu_kernels() -> types.ModuleType | None:
    """`torch.ops.sgt` with its C++ CPU kernels, or None (switched off, no compiler, or the build failed).

    None means the torch implementations answer the same operators on the CPU too (`operators`). Built on
    first use (about a minute) or ahead of time by `python -m sgt_core.kernels.build` (`make setup`);
    later processes only load it (milliseconds).
    """
    if os.environ.get(SWITCH, "1") == "0":
        return None
    try:
        build()
    except Exception as error:  # noqa: BLE001 - whatever stops the build, the torch kernels still run
        log.warning("the CPU attention kernels could not be built (%s): using the slower torch kernels",
                    str(error)[-2000:])
        return None
    return torch.ops.sgt


def backend() -> str:
    """The CPU kernels that run, for cache keys: "compiled", "compiled-native" (their results differ in
    the last bits) or "torch" (a different random stream as well)."""
    if cpu_kernels() is None:
        return "torch"
    return "compiled-native" if native() else "compiled"


def schemas(source: Path | None = None) -> list[str]:
    """The operator schemas, read from schemas.cpp's `m.def("...")` lines: they are written only there."""
    return re.findall(r'm\.def\("([^"]+)"\);', (source or SCHEMAS).read_text())


def loaded() -> bool:
    """Whether the C++ library is loaded into this process: its operators then carry their autograd and
    `projected_slot_attention` for every device, and Python registers only the other devices' kernels."""
    return _loaded is not None


# The operators' Python side (their torch implementations and autograd), registered once per process.
_fallback_library: torch.library.Library | None = None


@functools.cache
def operators() -> types.ModuleType:
    """`torch.ops.sgt`, defined: by the C++ library, or (without it) from its schemas for the torch kernels."""
    global _fallback_library
    if cpu_kernels() is None and _loaded is None:
        _fallback_library = torch.library.Library("sgt", "DEF")
        for schema in schemas():
            _fallback_library.define(schema)
    return torch.ops.sgt


def usable(*tensors: torch.Tensor) -> bool:
    """Whether the compiled random draws (sampling, dropout) take these tensors: all on the CPU, floating
    ones float32, and the kernels built. Elsewhere torch's generator draws, a different stream."""
    return all(t.device.type == "cpu" and (not t.is_floating_point() or t.dtype == torch.float32)
               for t in tensors) and cpu_kernels() is not None


def draw_seed(generator: torch.Generator | None) -> int:
    """A 62-bit seed for one kernel call, drawn from `generator` (torch's default one when None)."""
    return int(torch.randint(0, 1 << 62, (1,), generator=generator))
