"""Compiles the C attention kernels once per machine and source version, and loads them with ctypes."""

from __future__ import annotations

import ctypes
import functools
import hashlib
import logging
import os
import platform
import shutil
import subprocess
import tempfile
from pathlib import Path

import torch  # loaded first so that the kernels share torch's OpenMP runtime: one thread pool

log = logging.getLogger(__name__)

SOURCE = Path(__file__).with_name("attention.c")
# -march=native: the cache key includes this CPU's model and flags, so a library built for one CPU is
# never loaded on another. No -ffast-math: it would change exp() and NaN handling; `omp simd` already
# lets the compiler vectorise the short reductions.
FLAGS = ["-O3", "-march=native", "-fopenmp", "-fPIC", "-shared", "-std=c11"]
# SGT_CPU_KERNELS=0 turns the compiled kernels off (the torch implementations run instead).
SWITCH = "SGT_CPU_KERNELS"

_i64, _u64, _f32, _f64, _ptr = ctypes.c_int64, ctypes.c_uint64, ctypes.c_float, ctypes.c_double, ctypes.c_void_p
_int = ctypes.c_int
# name: (argument types, result type). An int result is 0 on success and 1 when the kernel's scratch
# allocation failed, which `checked` turns into a MemoryError.
SIGNATURES = {
    "sgt_group_by": ([_ptr, _i64, _i64, _ptr, _ptr], _int),
    "sgt_edges_by_source": ([_i64, _ptr, _ptr, _ptr, _ptr, _ptr, _ptr, _ptr], _int),
    "sgt_edge_attention_forward": ([_i64, _i64, _ptr, _ptr, _ptr, _ptr, _ptr, _ptr, _ptr, _f32, _f32,
                                    _ptr, _ptr, _ptr], None),
    "sgt_edge_attention_backward": ([_i64, _i64, _i64, _ptr, _ptr, _ptr, _ptr, _ptr, _ptr, _ptr, _ptr, _ptr,
                                     _ptr, _ptr, _ptr, _f32, _ptr, _ptr, _ptr, _ptr, _ptr, _ptr], _int),
    "sgt_slot_attention_forward": ([_i64, _i64, _i64, _i64, _ptr, _ptr, _ptr, _ptr, _ptr, _ptr, _ptr, _ptr,
                                    _ptr], None),
    "sgt_slot_attention_backward": ([_i64, _i64, _i64, _i64, _i64, _i64, _ptr, _ptr, _ptr, _ptr, _ptr, _ptr,
                                     _ptr, _ptr, _ptr, _ptr, _ptr, _ptr, _ptr, _ptr], _int),
    "sgt_sample_neighbours": ([_i64, _ptr, _ptr, _ptr, _i64, _i64, _u64, _ptr], None),
    "sgt_dropout_mask": ([_i64, _f64, _u64, _ptr], None),
}


def cache_dir() -> Path:
    """$SGT_KERNEL_CACHE, else $XDG_CACHE_HOME/sgt/kernels, else ~/.cache/sgt/kernels."""
    if os.environ.get("SGT_KERNEL_CACHE"):
        return Path(os.environ["SGT_KERNEL_CACHE"])
    base = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(base) / "sgt" / "kernels"


def _cpu_identity() -> str:
    """The CPU's model and feature flags (what -march=native compiles for)."""
    try:
        lines = Path("/proc/cpuinfo").read_text().splitlines()
    except OSError:
        return platform.processor() or platform.machine()
    wanted = ("model name", "flags", "Features", "CPU part")
    return "\n".join(sorted({line for line in lines if line.split(":")[0].strip() in wanted}))


def _compiler() -> str | None:
    return os.environ.get("CC") or shutil.which("cc") or shutil.which("gcc")


def build(compiler: str, target_dir: Path) -> Path:
    """Compiles the kernels into `target_dir` (atomically) and returns the library's path."""
    version = subprocess.run([compiler, "--version"], capture_output=True, text=True, check=True).stdout
    key = hashlib.sha256("\n".join([SOURCE.read_text(), " ".join(FLAGS), version, _cpu_identity(),
                                    platform.machine()]).encode()).hexdigest()[:16]
    library = target_dir / f"sgt_attention_{key}.so"
    if library.is_file():
        return library
    target_dir.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=target_dir) as staging:
        partial = Path(staging) / library.name
        completed = subprocess.run([compiler, *FLAGS, str(SOURCE), "-o", str(partial), "-lm"],
                                   capture_output=True, text=True, check=False)
        if completed.returncode:
            raise RuntimeError(f"{compiler} failed on {SOURCE}:\n{completed.stderr[-2000:]}")
        os.replace(partial, library)  # concurrent builders each rename a whole file; either one wins
    return library


@functools.cache
def cpu_kernels() -> ctypes.CDLL | None:
    """The compiled kernels, or None (switched off, no C compiler, or the build failed: torch runs instead).

    Built on first use into `cache_dir()`, keyed by the source, flags, compiler and CPU, so an edited
    source or another machine gets its own build; later processes only load it (milliseconds).
    """
    if os.environ.get(SWITCH, "1") == "0":
        return None
    compiler = _compiler()
    if compiler is None:
        log.warning("no C compiler (cc/gcc, or $CC) found: using the slower torch attention kernels on CPU")
        return None
    try:
        library = ctypes.CDLL(str(build(compiler, cache_dir())))
    except (OSError, RuntimeError, subprocess.CalledProcessError) as error:
        log.warning("the CPU attention kernels could not be built (%s): using the torch kernels", error)
        return None
    for name, (argtypes, restype) in SIGNATURES.items():
        function = getattr(library, name)
        function.argtypes, function.restype = argtypes, restype
    return library


def checked(status: int, kernel: str) -> None:
    """Raises MemoryError when a kernel reports that its scratch allocation failed."""
    if status:
        raise MemoryError(f"{kernel}: out of memory for the kernel's scratch buffers")


def usable(*tensors: torch.Tensor) -> bool:
    """Whether the compiled kernels can take these tensors: all on the CPU, floating ones float32."""
    return all(t.device.type == "cpu" and (not t.is_floating_point() or t.dtype == torch.float32)
               for t in tensors) and cpu_kernels() is not None


def address(tensor: torch.Tensor | None) -> int | None:
    """The data pointer of a contiguous tensor (None for None), for a ctypes call."""
    if tensor is None:
        return None
    if not tensor.is_contiguous():
        raise ValueError("the CPU kernels need contiguous tensors")
    return tensor.data_ptr()


def draw_seed(generator: torch.Generator | None) -> int:
    """A 62-bit seed for one kernel call, drawn from `generator` (torch's default one when None)."""
    return int(torch.randint(0, 1 << 62, (1,), generator=generator))


def group_by(key: torch.Tensor, num_groups: int) -> tuple[torch.Tensor, torch.Tensor]:
    """CSR grouping of items by key in [0, num_groups): (ptr [G + 1], order [n]), items ascending in a group."""
    key = key.contiguous()
    if key.numel() and not (0 <= int(key.min()) and int(key.max()) < num_groups):
        raise ValueError(f"group keys must lie in [0, {num_groups})")
    ptr = torch.empty(num_groups + 1, dtype=torch.int64)
    order = torch.empty(key.numel(), dtype=torch.int64)
    checked(cpu_kernels().sgt_group_by(address(key), key.numel(), num_groups, address(ptr), address(order)),
            "sgt_group_by")
    return ptr, order
