"""The `sgt` torch operators: the attention hot paths' C++ CPU kernels, built on first use (library.py)."""

from sgt_core.kernels.library import backend, cpu_kernels, draw_seed, operators, usable

__all__ = ["backend", "cpu_kernels", "draw_seed", "operators", "usable"]
