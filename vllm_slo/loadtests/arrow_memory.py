"""Arrow's allocator in the Locust processes: the system allocator, and freed pages handed back.

pyarrow's wheels allocate through mimalloc by default, which reserves a 1 GiB arena per
process. In a Locust process writing rows (a small record batch a second) that arena's
resident memory stepped up by 7-9 MiB about 11 minutes into every long soak and stayed there,
all of the process's growth; `release_unused()` after each flush did not stop it. With the
system allocator (glibc malloc) the same 16-minute soak stayed within 0.2 MiB and the process
started 30 MiB smaller (docs/reliability.md). Arrow's C++ side reads its default pool from
`ARROW_DEFAULT_MEMORY_POOL` once, at its first allocation (pyarrow's import makes some), so
the launcher sets it in the Locust process's environment (`locust_environment`);
`use_system_allocator` is the fallback for a process started without it (a remote worker
started by hand), where it moves pyarrow's own allocations only. A value the user set wins.
"""

from __future__ import annotations

import os
from collections.abc import Mapping

import pyarrow as pa

ENV = "ARROW_DEFAULT_MEMORY_POOL"


def locust_environment(environ: Mapping[str, str]) -> dict[str, str]:
    """The environment for a Locust process: `environ` with Arrow's system allocator, unless
    it names a pool already."""
    return {ENV: "system", **environ}


def use_system_allocator(environ: Mapping[str, str] = os.environ) -> str:
    """Make the system allocator Arrow's default pool unless the environment names one;
    returns the backend now in use."""
    if ENV not in environ:
        pa.set_memory_pool(pa.system_memory_pool())
    backend: str = pa.default_memory_pool().backend_name
    return backend


def release_unused() -> None:
    """Hand the pool's freed memory back to the system (glibc: malloc_trim); ~2 us a call."""
    pa.default_memory_pool().release_unused()
