"""Sets glibc malloc's mmap threshold for the train stage (a memory-for-time trade-off, off by default)."""

from __future__ import annotations

import ctypes
import ctypes.util
import logging

log = logging.getLogger(__name__)

M_MMAP_THRESHOLD = -3  # from glibc's malloc.h


def set_mmap_threshold(kilobytes: int | None) -> bool:
    """Allocations of at least `kilobytes` KiB get their own mapping, unmapped as soon as they are freed.

    Setting it also stops glibc from raising the threshold whenever a large block is freed, which is what
    lets a training loop's freed activations pile up in the heap. None leaves malloc as it is. Returns
    whether the setting took effect (False without glibc, e.g. on macOS or musl, where it does not apply).
    The setting lasts for the rest of the process.
    """
    if kilobytes is None:
        return False
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        mallopt = libc.mallopt
    except (OSError, AttributeError):
        log.info("train.malloc_mmap_threshold_kb ignored: this C library has no mallopt")
        return False
    mallopt.argtypes, mallopt.restype = [ctypes.c_int, ctypes.c_int], ctypes.c_int
    return bool(mallopt(M_MMAP_THRESHOLD, kilobytes * 1024))
