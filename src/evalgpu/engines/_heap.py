"""The C heap under the transformers engine on a CPU: freed tensor memory goes back to the system.

Torch's CPU allocator is the C library's `malloc`. glibc serves an allocation below its mmap
threshold from its heap, and raises that threshold (up to 32 MB) each time a larger mmapped
block is freed; the KV cache is reallocated a little larger at every decoding step and every
join (`torch.cat`), each layer's tensor a few MB, so those come from the heap, and freed ones
leave holes too small for the next, larger ones. Measured on SmolLM2 (bfloat16, a wave of 16
FRANK requests, 1 thread): the wave's peak was 1.73 GB above the loaded model for a KV cache of
0.58 GB; with a fixed threshold of 1 MB, 0.73 GB (each large tensor its own mapping, returned
on free), for 8 s more system time in page faults (31 s of user time either way).

A no-op where the C library is not glibc.
"""

from __future__ import annotations

import ctypes
import ctypes.util
from typing import Any

__all__ = ["MMAP_THRESHOLD", "map_large_blocks", "trim"]

MMAP_THRESHOLD = 1 << 20
"""Bytes from which an allocation gets its own mapping (glibc's `M_MMAP_THRESHOLD`)."""

_M_MMAP_THRESHOLD = -3  # from glibc's malloc.h


def _libc() -> Any:
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
    except OSError:
        return None
    return libc if hasattr(libc, "mallopt") and hasattr(libc, "malloc_trim") else None


def map_large_blocks(threshold: int = MMAP_THRESHOLD) -> bool:
    """Fix the process's mmap threshold (which stops glibc from raising it); whether it took.

    It applies to the whole process: set once, by an engine that computes on the CPU.
    """
    libc = _libc()
    return bool(libc is not None and libc.mallopt(_M_MMAP_THRESHOLD, threshold) == 1)


def trim() -> None:
    """Give the heap's free pages back to the system (glibc's `malloc_trim`), after a wave."""
    libc = _libc()
    if libc is not None:
        libc.malloc_trim(0)
