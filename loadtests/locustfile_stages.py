"""Closed-loop `stages` through Locust's LoadTestShape: the same users and rows as
loadtests/locustfile.py (vllm_slo/loadtests/users.py), with the user count following
`traffic.arrival.stages`.

    locust -f loadtests/locustfile_stages.py --headless --host URL \
        --vllm-slo-run-dir runs/<id> ClosedLoopUser
"""

from __future__ import annotations

from locust import LoadTestShape

from vllm_slo.loadtests.arrivals import users_at
from vllm_slo.loadtests.users import RUN, ClosedLoopUser, OpenLoopUser  # noqa: F401  (users)

STAGE_SPAWN_RATE = 100.0  # users per second when a stage changes the count


class StagesShape(LoadTestShape):
    def tick(self) -> tuple[int, float] | None:
        traffic = RUN.traffic
        if traffic is None:  # the master process: read the stages from the same config
            return None
        elapsed_s = self.get_run_time()
        if elapsed_s >= traffic.total_s:
            return None
        return users_at(traffic.arrival, elapsed_s), STAGE_SPAWN_RATE
