"""Compiled CPU kernels for the attention hot paths (C with OpenMP, loaded through ctypes)."""

from sgt_core.kernels.library import address, checked, cpu_kernels, draw_seed, group_by, usable

__all__ = ["address", "checked", "cpu_kernels", "draw_seed", "group_by", "usable"]
