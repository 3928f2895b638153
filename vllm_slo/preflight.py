"""What every command checks before it makes a folder or starts a server, and the few types
its drivers share. A usage error found here leaves no folder and starts no server: the runs
folder can hold run folders, each arm's traffic inputs read (tokenizer, ShareGPT file, the
part of a trace a run replays), and an open-loop schedule is of a plannable size.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from vllm_slo.loadtests.arrivals import arrival_offsets_s
from vllm_slo.loadtests.profiles import PROFILES
from vllm_slo.loadtests.profiles.sharegpt import sharegpt_path
from vllm_slo.loadtests.profiles.trace import check_trace
from vllm_slo.loadtests.prompts import load_sharegpt
from vllm_slo.loadtests.tokens import local_token_counter
from vllm_slo.run_folder.file_writes import check_runs_root
from vllm_slo.scenarios.errors import ScenarioError
from vllm_slo.scenarios.loader import resolve_variants
from vllm_slo.scenarios.model import Scenario
from vllm_slo.scenarios.profile_specs import ShareGptSpec
from vllm_slo.scenarios.server_spec import ServerSpec
from vllm_slo.scenarios.traffic_spec import TrafficSpec
from vllm_slo.servers.host import detect_platform

Printer = Callable[[str], None]  # where a driver's progress lines go (the CLI: stdout)


MAX_CLOSED_LOOP_PLAN = 20_000


MAX_OPEN_LOOP_PLAN = 10_000_000  # requests a schedule may hold (rate × planned seconds)


def check_traffic_inputs(traffic: TrafficSpec, where: str = "") -> None:
    """What the traffic reads from disk, read before a run folder or a server exists (a usage
    error must leave no folder and start no server): traffic.tokenizer loads, a ShareGPT file
    holds at least one well-formed conversation, the part of a trace the run replays reads
    cleanly, an open-loop schedule is of a plannable size. `where` names a variant
    (`variants.b: `)."""
    if traffic.tokenizer:
        try:
            local_token_counter(traffic.tokenizer)
        except ValueError as error:
            raise ScenarioError(f"{where}traffic.tokenizer = {traffic.tokenizer!r}: "
                                f"{error}") from None
    if traffic.profile == "sharegpt":
        path = sharegpt_path(traffic.settings(ShareGptSpec))
        try:
            entries = load_sharegpt(path)
        except ValueError as error:
            raise ScenarioError(f"{where}traffic.sharegpt: {error}") from None
        reasons = [entry for entry in entries if isinstance(entry, str)]
        if len(reasons) == len(entries):
            raise ScenarioError(
                f"{where}traffic.sharegpt: {path}: no entry is a usable conversation "
                f"({len(entries)} malformed; the first: {reasons[0]})")
    if traffic.profile == "trace":
        try:
            check_trace(traffic, planned_request_count(traffic))
        except ValueError as error:
            raise ScenarioError(f"{where}traffic.trace: {error}") from None
    rate = traffic.arrival.peak_rate()
    if traffic.arrival.open_loop and rate is not None \
            and rate * traffic.total_s > MAX_OPEN_LOOP_PLAN:
        raise ScenarioError(
            f"{where}traffic.arrival: {rate:g} req/s over {traffic.total_s:g} s plans about "
            f"{rate * traffic.total_s:,.0f} requests; at most {MAX_OPEN_LOOP_PLAN:,} a run "
            "(lower the rate or traffic.duration, or split the run)")


def check_before_run(scenario: Scenario, runs_root: Path) -> None:
    """Every usage error a run could meet before its server is up, raised before any folder
    is made: the runs folder, and each arm's traffic inputs."""
    check_runs_root(runs_root)
    for name, arm in resolve_variants(scenario).items():
        check_traffic_inputs(arm.traffic, f"variants.{name}: " if name else "")


def planned_request_count(traffic: TrafficSpec) -> int:
    """How many requests the plan needs: the schedule's length (open loop), or a generous
    bound for closed loop (users × the requests a user has in flight at once, an agent's
    sub-agents, × time / max(think time, 50 ms)); closed loops cycle the plan if they outrun
    it, and the report counts reused prompts."""
    if traffic.arrival.kind == "trace":  # the trace's records in the run's time decide
        return MAX_OPEN_LOOP_PLAN
    if traffic.arrival.open_loop:
        return max(1, arrival_offsets_s(traffic.arrival, traffic.total_s, traffic.seed).size)
    users = traffic.arrival.users if traffic.arrival.kind != "stages" else max(
        stage.users or 0 for stage in traffic.arrival.stages)
    profile = PROFILES[traffic.profile]
    per_user = (profile.streams_per_user(traffic) * traffic.total_s
                / max(traffic.arrival.think_time_s, profile.fastest_request_s))
    return int(min(MAX_CLOSED_LOOP_PLAN, max(64, users * per_user)))


def platform_of(spec: ServerSpec) -> str:
    return detect_platform() if spec.platform == "auto" else spec.platform
