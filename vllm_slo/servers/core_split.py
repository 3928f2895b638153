"""Which CPU cores a launched vLLM CPU server and the load generator use.

On a host with few cores vLLM's CPU build takes every core it can (its OpenMP worker, API
server and engine core), and Locust's event loop then wakes late: measured on the 2-core CI
box, loop-lag p99 185–741 ms and users busy 60–97% of the time, so the health checks rightly
judged trials client-limited. Giving the two disjoint cores keeps the measurement honest at
the cost of server speed: the server's whole process group is confined to its cores (its
OpenMP threads bound to them too), and the Locust processes to the rest.

Pure planning here; the launchers apply it with `os.sched_setaffinity`.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

# At most this many usable cores: split by default (server first half, load generator the
# rest). Above it the OS scheduler has room for both and nothing is pinned.
SPLIT_MAX_CORES = 4


@dataclass(frozen=True, slots=True)
class CoreSplit:
    """Where the server's process group and the Locust processes may run (None: anywhere)."""

    server_cores: tuple[int, ...] | None
    client_cores: tuple[int, ...] | None
    reason: str

    def to_dict(self) -> dict[str, object]:
        return {"server_cores": None if self.server_cores is None else list(self.server_cores),
                "client_cores": None if self.client_cores is None else list(self.client_cores),
                "reason": self.reason}


NO_SPLIT = CoreSplit(None, None, "not pinned")


def plan_core_split(host_cores: tuple[int, ...], platform: str, launched: bool,
                    devices: tuple[int, ...] | None, mode: str = "auto",
                    ranks: int = 1) -> CoreSplit:
    """Pure: the split for one launched server on this host.

    - attach mode or a GPU server: nothing pinned (the server is not this host's CPU load);
    - `server.devices` given on the CPU platform: the server's group on those cores, the load
      generator unpinned (side-by-side arms share the rest of the host with their Locusts);
    - otherwise, with at most SPLIT_MAX_CORES usable cores and `mode` auto: the server on the
      first half (at least one core), Locust on the rest — for a one-rank server (tensor or
      pipeline parallel ranks on CPU need cores of their own: give server.devices)."""
    if not launched or platform != "cpu":
        return CoreSplit(None, None, "not pinned: " + (
            "attached server" if not launched else "GPU server"))
    if devices is not None:
        return CoreSplit(tuple(devices), None,
                         "server.devices: the server on its devices, the load generator "
                         "unpinned")
    if mode == "off":
        return CoreSplit(None, None, "not pinned: server.core_split is off")
    if ranks > 1:
        return CoreSplit(None, None, f"not pinned: {ranks} parallel ranks (give "
                                     f"server.devices to place them)")
    if len(host_cores) < 2:
        return CoreSplit(None, None, "not pinned: one usable core")
    if len(host_cores) > SPLIT_MAX_CORES:
        return CoreSplit(None, None, f"not pinned: {len(host_cores)} usable cores (split "
                                     f"only at {SPLIT_MAX_CORES} or fewer)")
    cores = tuple(sorted(host_cores))
    half = max(1, len(cores) // 2)
    return CoreSplit(cores[:half], cores[half:],
                     f"default on a {len(cores)}-core host: vLLM's CPU build and Locust on "
                     f"disjoint cores (server.core_split: off to disable)")


def usable_cores() -> tuple[int, ...]:
    """The cores this process may run on (its affinity mask, not the machine's count)."""
    try:
        return tuple(sorted(os.sched_getaffinity(0)))
    except (AttributeError, OSError):  # not Linux
        return tuple(range(os.cpu_count() or 1))
