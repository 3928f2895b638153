"""loadtests/malloc_tuning.py: after `fix_malloc_thresholds`, glibc no longer raises its mmap
threshold when a large mmap'd block is freed (the growth the soak measured). Observed through
glibc's own counter of mmap'd blocks (mallinfo2.hblks)."""

from __future__ import annotations

import ctypes
import ctypes.util

import pytest

from vllm_slo.loadtests.malloc_tuning import fix_malloc_thresholds


class _MallInfo2(ctypes.Structure):
    _fields_ = [(name, ctypes.c_size_t) for name in (
        "arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks", "fsmblks", "uordblks",
        "fordblks", "keepcost")]


def _libc() -> ctypes.CDLL:
    name = ctypes.util.find_library("c")
    if name is None:
        pytest.skip("no C library found")
    libc = ctypes.CDLL(name)
    if not hasattr(libc, "mallinfo2"):
        pytest.skip("not glibc >= 2.33 (no mallinfo2)")
    libc.mallinfo2.restype = _MallInfo2
    libc.malloc.restype, libc.malloc.argtypes = ctypes.c_void_p, [ctypes.c_size_t]
    libc.free.argtypes = [ctypes.c_void_p]
    return libc


def test_a_freed_large_block_does_not_raise_the_mmap_threshold() -> None:
    libc = _libc()
    assert fix_malloc_thresholds()
    big = libc.malloc(30 << 20)  # mmap'd (above the threshold); freeing it would, by glibc's
    libc.free(big)  # default, raise the threshold to 30 MiB
    before = libc.mallinfo2().hblks
    # above the fixed threshold, below 30 MiB, and larger than any free chunk an arena could
    # serve it from (a threshold only decides how an arena that must grow gets the memory)
    block = libc.malloc(16 << 20)
    try:
        assert libc.mallinfo2().hblks == before + 1, "the block came from an arena"
    finally:
        libc.free(block)
