"""Fixed glibc malloc thresholds for a Locust process, so its memory stays flat over hours.

glibc raises its mmap threshold (and, with it, the trim threshold) each time a block larger
than the current threshold that was mmap'd is freed, up to 32 MiB: from then on such blocks
come from an arena and go back to it, not to the system, and that arena keeps growing in
holes. Measured with `benchmarks/soak.py` (20 minutes at 20 req/s, two soaks side by side on
this 2-core box, samples in the soak's rss.csv): with glibc's defaults the Locust process's RSS
grew +6.2 MiB (+0.52 MiB/min), all of it in anonymous mappings (its [heap] stayed flat, and
tracemalloc saw the Python heap grow by tens of KiB); with the thresholds fixed
(`MALLOC_MMAP_THRESHOLD_=131072 MALLOC_TRIM_THRESHOLD_=262144`) it grew +0.2 MiB
(+0.02 MiB/min). Setting a threshold through mallopt also turns the dynamic adjustment off,
like those environment variables; it is done here, in the process, so workers a user starts
on other hosts get it too. Nothing happens outside glibc (musl, macOS).
"""

from __future__ import annotations

import ctypes
import ctypes.util

M_TRIM_THRESHOLD = -1  # glibc <malloc.h>
M_MMAP_THRESHOLD = -3
MMAP_THRESHOLD_BYTES = 128 * 1024  # glibc's own starting value, kept fixed
TRIM_THRESHOLD_BYTES = 256 * 1024


def fix_malloc_thresholds() -> bool:
    """Fix this process's mmap and trim thresholds; False where there is no glibc mallopt."""
    name = ctypes.util.find_library("c")
    if name is None:
        return False
    try:
        mallopt = ctypes.CDLL(name).mallopt
    except (OSError, AttributeError):
        return False
    mallopt.argtypes, mallopt.restype = [ctypes.c_int, ctypes.c_int], ctypes.c_int
    return bool(mallopt(M_MMAP_THRESHOLD, MMAP_THRESHOLD_BYTES)
                and mallopt(M_TRIM_THRESHOLD, TRIM_THRESHOLD_BYTES))
