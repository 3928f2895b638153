"""`vllm-slo capacity`: the highest load a server config carries within its SLOs.

One server (launched or attached) serves a whole search; each step is a run folder of its own
(warm-up, window, the prefix cache reset before it) at the load the search asks for
(stats/capacity_search.py); `capacity.trials` repeats the search on fresh servers. A scenario
with variants searches each variant in turn, and the folder compares their capacities.

    runs/<UTC>-<name>-capacity/
      scenario.yaml  capacity.json  report.html  summary.md  junit.xml
      trial-1/  server.log  provenance.json  step-01-4req_s/ (a run folder) ...
      variants/<name>/  (a capacity folder per variant, when the scenario has variants)
"""

from __future__ import annotations

import contextlib
import math
import os
import shutil
import time
from collections.abc import Callable, Iterator, Sequence
from datetime import datetime, timezone
from pathlib import Path

import yaml

from vllm_slo.analysis.capacity import (
    CAPACITY_CONFIDENCE,
    CapacityDocument,
    CapacityStep,
    TrialCapacity,
    capacity_exit_code,
    capacity_step,
    combined_capacity,
    overall_status,
    search_range,
    stability,
    step_verdicts,
    trace_shortfall,
    trial_capacity,
)
from vllm_slo.loadtests.profiles.trace import trace_path
from vllm_slo.loadtests.trace_formats import read_trace
from vllm_slo.loadtests.trace_replay import Selection
from vllm_slo.loadtests.trace_replay import select as select_sends
from vllm_slo.outcome import Outcome, reported, verdict_line
from vllm_slo.preflight import check_before_run, platform_of
from vllm_slo.redaction import redact_secrets
from vllm_slo.reports.capacity_report import (
    RenderedCapacity,
    read_capacity,
    render_capacity,
    write_capacity,
)
from vllm_slo.reports.render.markdown import STEP_SUMMARY_ENV
from vllm_slo.reports.run_report import load_run
from vllm_slo.reports.trial_folders import resumable_scenario
from vllm_slo.run_folder.file_writes import new_run_dir, write_atomic
from vllm_slo.run_folder.folder_kind import FolderKind, folder_kind
from vllm_slo.run_folder.run_files import CAPACITY_FILE, TUNE_SCENARIO_FILE, VARIANTS_DIR
from vllm_slo.runner import SharedServer, run_on_server, shared_server
from vllm_slo.scenarios.capacity_spec import RATE_KEY, SPEEDUP_KEY, USERS_KEY, CapacitySpec
from vllm_slo.scenarios.errors import ScenarioError, ServerError
from vllm_slo.scenarios.loader import resolve_variants
from vllm_slo.scenarios.model import Scenario
from vllm_slo.scenarios.profile_specs.trace import TraceSpec
from vllm_slo.scenarios.traffic_spec import TrafficSpec
from vllm_slo.scenarios.units import format_duration_s
from vllm_slo.servers.vllm_args import validate_server_args
from vllm_slo.stats.capacity_search import (
    NextStep,
    SearchEnd,
    SearchStatus,
    bracket,
    plan_next,
    samples_to_pass,
)

Printer = Callable[[str], None]
SCENARIO_FILE = "scenario.yaml"
STEP_OVERHEAD_S = 5.0  # plan, prefix-cache reset, report: per step, before any was timed


def capacity_outcome(folder: Path, rendered: RenderedCapacity) -> Outcome:
    """A capacity search's or race's outcome: its text, the report, the verdict."""
    return reported(folder, rendered.exit_code, rendered.text, rendered.report_path,
                    "capacity report", verdict_line(rendered.exit_code))


def step_scenario(arm: Scenario, spec: CapacitySpec, step: NextStep) -> Scenario:
    """The arm's scenario at the step's load, its window `step.window_factor` times as long."""
    document = arm.base_without_arms()
    traffic = document["traffic"]
    arrival = traffic["arrival"]
    if spec.load == RATE_KEY:
        arrival["rate"] = step.load
    elif spec.load == USERS_KEY:
        arrival["users"] = int(step.load)
    else:
        traffic.setdefault("trace", {})["speedup"] = step.load
    traffic["duration"] = traffic["duration"] * step.window_factor
    document["trials"] = 1
    return Scenario.model_validate(document)


def _step_name(index: int, step: NextStep, spec: CapacitySpec) -> str:
    unit = {RATE_KEY: "req_s", USERS_KEY: "users", SPEEDUP_KEY: "x"}[spec.load]
    again = f"-x{int(step.window_factor)}" if step.attempt else ""
    return f"step-{index:02d}-{step.load:.4g}{unit}{again}"


def _step_line(step: CapacityStep, spec: CapacitySpec, low: float | None,
               high: float | None) -> str:
    unit = f" {spec.unit}" if spec.load == SPEEDUP_KEY else ""  # what was sent of the trace
    achieved = "" if step.achieved is None else f" (achieved {step.achieved:.3g}{unit})"
    slos = " · ".join(f"{s.slo} {s.verdict.value}" for s in step.slos)
    unstable = "" if step.stability.stable else f" · unstable: {step.stability.reason}"
    goodput = step.goodput_per_s.value
    good = "" if goodput is None else f" · goodput {goodput:.3g} req/s"
    bracket = (f" · bracket [{'?' if low is None else f'{low:.4g}'}, "
               f"{'?' if high is None else f'{high:.4g}'}] {spec.unit}")
    return (f"step {step.load:.4g} {spec.unit}{achieved}: {step.outcome.upper()} · {slos}"
            f"{unstable}{good}{bracket}")


@contextlib.contextmanager
def _without_step_summary() -> Iterator[None]:
    """$GITHUB_STEP_SUMMARY unset while a step renders (restored after)."""
    target = os.environ.pop(STEP_SUMMARY_ENV, None)
    try:
        yield
    finally:
        if target is not None:
            os.environ[STEP_SUMMARY_ENV] = target


class CapacitySearch:
    """The search of one scenario (one variant) in `folder`, resumable from its
    capacity.json."""

    def __init__(self, scenario: Scenario, arm: Scenario, folder: Path, say: Printer,
                 variant: str | None, previous: CapacityDocument | None = None,
                 floor: float | None = None) -> None:
        assert scenario.capacity is not None
        self.scenario, self.arm, self.folder, self.say = scenario, arm, folder, say
        self.floor = floor  # a capacity race's (capacity_race.py): stop below it
        self.spec: CapacitySpec = scenario.capacity
        self.variant = variant
        self.steps: list[CapacityStep] = list(previous.steps) if previous else []
        self.trials: list[TrialCapacity] = [t for t in (previous.trials if previous else ())
                                            if t.status is not SearchStatus.RUNNING]
        self.started_utc = (previous.started_utc if previous
                            else datetime.now(timezone.utc).isoformat())
        self.elapsed_before_s = previous.elapsed_s if previous else 0.0
        self.clock_start = time.monotonic()
        self.step_seconds: list[float] = []

    @property
    def elapsed_s(self) -> float:
        return self.elapsed_before_s + time.monotonic() - self.clock_start

    def run(self, last_trial: int | None = None) -> CapacityDocument:
        """The trials not yet done, up to `last_trial` (default: capacity.trials)."""
        write_atomic(self.folder / SCENARIO_FILE, yaml.safe_dump(
            redact_secrets(self.scenario.to_yaml_dict()), sort_keys=False))
        for trial in range(1, (last_trial or self.spec.trials) + 1):
            if any(t.trial == trial for t in self.trials):
                continue  # finished before a resume
            outcome = self._trial(trial)
            self.trials.append(outcome)
            self._write(running=False)
            if outcome.status in (SearchStatus.INVALID, SearchStatus.BUDGET_SPENT,
                                  SearchStatus.RACED_OUT):
                break
        return self._write(running=False)

    def _trial(self, trial: int) -> TrialCapacity:
        trial_dir = self.folder / f"trial-{trial}"
        trial_dir.mkdir(parents=True, exist_ok=True)
        floor = ("" if self.floor is None
                 else f", stopping below {self.floor:.4g} (the race's floor)")
        self.say(f"capacity trial {trial} of {self.spec.trials}: {self.spec.load} from "
                 f"{self.spec.low:g} to {self.spec.high:g} {self.spec.unit}, tolerance "
                 f"{self.spec.tolerance:.0%}{floor}")
        confidence = CAPACITY_CONFIDENCE
        try:
            with shared_server(self.arm, trial_dir, self.say) as server:
                end = self._steps(trial, trial_dir, server)
        except ServerError as error:
            end = SearchEnd(SearchStatus.INVALID, f"the server failed: {error}")
        return trial_capacity(trial, self.steps, self.spec, confidence, end.status, end.reason)

    def _steps(self, trial: int, trial_dir: Path, server: SharedServer) -> SearchEnd:
        range_ = search_range(self.spec, self.floor)
        while True:
            readings = [s.reading() for s in self.steps if s.trial == trial]
            decision = plan_next(readings, range_)
            if isinstance(decision, SearchEnd):
                return decision
            seconds = self._step_estimate_s(decision)
            budget = self.spec.budget_s
            if budget is not None and self.elapsed_s + seconds > budget:
                return SearchEnd(SearchStatus.BUDGET_SPENT,
                                 f"the next step ({decision.load:.4g} {self.spec.unit}, about "
                                 f"{format_duration_s(seconds)}) would end past the budget "
                                 f"({format_duration_s(budget)})")
            self._run_step(trial, trial_dir, server, decision)

    def _step_estimate_s(self, step: NextStep) -> float:
        traffic = self.arm.traffic
        planned = traffic.total_s + traffic.duration_s * (step.window_factor - 1.0)
        if not self.step_seconds:
            return planned + STEP_OVERHEAD_S
        overhead = max(0.0, max(self.step_seconds) - traffic.total_s)
        return planned + overhead

    def _run_step(self, trial: int, trial_dir: Path, server: SharedServer,
                  step: NextStep) -> None:
        index = sum(1 for s in self.steps if s.trial == trial) + 1
        run_dir = trial_dir / _step_name(index, step, self.spec)
        if run_dir.exists():  # a step interrupted before it was recorded: its rows stay apart
            run_dir.rename(run_dir.with_name(f"{run_dir.name}-interrupted-{time.time():.0f}"))
        self.say(f"step {index}: {step.load:.4g} {self.spec.unit}"
                 + (f" (again, window x{step.window_factor:g})" if step.attempt else ""))
        began = time.monotonic()
        with _without_step_summary():  # the search appends its own summary at the end
            run_on_server(step_scenario(self.arm, self.spec, step), run_dir, server,
                          lambda text: None)
        self.step_seconds.append(time.monotonic() - began)
        loaded = load_run(run_dir)
        record = capacity_step(
            loaded.document, stability(loaded.series, loaded.server_records),
            loaded.server_records, trial=trial, load=step.load, attempt=step.attempt,
            load_key=self.spec.load, run_dir=str(run_dir.relative_to(self.folder)),
            verdicts=step_verdicts(loaded.document, loaded.series, self.spec.step_confidence))
        self.steps.append(record)
        self._write(running=True)
        low, high = bracket([s.reading() for s in self.steps if s.trial == trial])
        self.say(_step_line(record, self.spec, low, high))

    def _write(self, running: bool) -> CapacityDocument:
        trials = list(self.trials)
        if running:
            current = max((s.trial for s in self.steps), default=1)
            if not any(t.trial == current for t in trials):
                trials.append(trial_capacity(current, self.steps, self.spec, CAPACITY_CONFIDENCE,
                                             SearchStatus.RUNNING, "the search is running"))
        estimate = combined_capacity(trials, CAPACITY_CONFIDENCE) if trials else None
        status = overall_status(trials) if trials else SearchStatus.RUNNING
        reason = "; ".join(f"trial {t.trial}: {t.reason}" if len(trials) > 1 else t.reason
                           for t in trials)
        assert estimate is not None
        document = CapacityDocument(
            scenario=redact_secrets(self.scenario.to_yaml_dict()), variant=self.variant,
            load=self.spec.load, unit=self.spec.unit, capacity=estimate,
            limiting_slo=estimate.limiting_slo, status=status, reason=reason,
            exit_code=int(capacity_exit_code(status, estimate, self.spec.required)),
            require=self.spec.required, tolerance=self.spec.tolerance,
            started_utc=self.started_utc, elapsed_s=round(self.elapsed_s, 3),
            trials=tuple(trials), steps=tuple(self.steps))
        write_capacity(self.folder, document)
        return document


def _trace_selection(traffic: TrafficSpec, speedup: float, total_s: float) -> Selection:
    """The replay at `speedup` over `total_s` run seconds (reads only that much trace)."""
    trace = traffic.settings(TraceSpec)
    try:
        return select_sends(
            read_trace(trace_path(trace), trace.format), start_s=trace.start_s,
            end_s=trace.end_s, speedup=speedup, rate_scale=trace.rate_scale,
            max_requests=trace.max_requests, total_s=total_s)
    except ValueError as error:  # check_before_run names a bad trace first
        raise ScenarioError(f"traffic.trace: {error}") from None


def check_trace_span(scenario: Scenario, where: str = "") -> None:
    """A speedup search's highest step must find trace enough: at k× the run to the
    measured window's end replays k × (warm-up + window) seconds of trace, and a trace window
    (file, `traffic.trace.end`, `max_requests`) that ends sooner leaves the window's last
    seconds empty: a lower load than k×, which the search would read as k× carried. Checked
    here, before any server starts, because the span is cheap to know (the trace read as far
    as the highest step needs, as the step itself will) and a search whose top step cannot be
    measured should not spend its steps reaching it. A step lengthened past it (an
    INCONCLUSIVE step's window doubled) is judged from its own plan instead: the step is
    INVALID, named `trace_too_short` (analysis/capacity.py `trace_shortfall`)."""
    spec = scenario.capacity
    if spec is None or spec.load != SPEEDUP_KEY:
        return
    traffic = scenario.traffic
    window_end_s = traffic.warmup_s + traffic.duration_s
    selection = _trace_selection(traffic, 1.0, spec.high * window_end_s)
    times = [r.timestamp_s for r in selection.window_records]
    span_s = times[-1] - times[0] if times else 0.0
    short = trace_shortfall(span_s, selection.stopped, spec.high, window_end_s,
                            traffic.duration_s)
    if short is not None:
        raise ScenarioError(f"{where}capacity.high = {spec.high:g}{spec.unit}: {short}")


def _expected_requests(scenario: Scenario, spec: CapacitySpec, window_s: float) -> float:
    """The requests the lowest step's longest window holds: low × window (rate), or the
    trace's sends in that window at the low speedup (read from the trace)."""
    if spec.load == RATE_KEY:
        return spec.low * window_s
    traffic = scenario.traffic
    end_s = traffic.warmup_s + window_s
    selection = _trace_selection(traffic, spec.low, end_s)
    return sum(1 for send in selection.sends if traffic.warmup_s <= send.offset_s < end_s)


def check_lowest_step(scenario: Scenario) -> None:
    """The lowest load's window must hold enough requests for every upper-bound percentile
    SLO to be able to PASS at the step confidence (else the search stops at its first step,
    undecided, whatever the server does). Open loop (rate × window) and a trace's speedup
    (the trace's sends in the window at the low speedup: the replay is a schedule, so its
    count is known by reading the trace as far as the step would); not a closed loop, whose
    rate is not known before it runs."""
    spec = scenario.capacity
    if spec is None or spec.load == USERS_KEY:
        return
    window_s = scenario.traffic.duration_s * 2 ** spec.lengthen  # its longest run
    expected = _expected_requests(scenario, spec, window_s)
    for rule in scenario.slo.rules():
        if rule.percentile is None or rule.comparator not in ("<", "<=") or rule.part:
            continue
        needed = samples_to_pass(rule.percentile, spec.step_confidence)
        if expected < needed:
            raise ScenarioError(
                f"capacity.low = {spec.low:g} {spec.unit}: its window holds about "
                f"{expected:.0f} requests (traffic.duration {scenario.traffic.duration_s:g} s x "
                f"{2 ** spec.lengthen} with lengthening), and {rule.label} can PASS at "
                f"capacity.step_confidence {spec.step_confidence:g} only from {needed} or more: "
                + ("raise capacity.low or traffic.duration (low x duration >= "
                   f"{math.ceil(needed / 2 ** spec.lengthen)} requests)" if spec.load == RATE_KEY
                   else "raise capacity.low or traffic.duration, or replay a busier part of "
                   "the trace"))


def _check(scenario: Scenario, runs_root: Path) -> dict[str, Scenario]:
    if scenario.capacity is None:
        raise ScenarioError(f"scenario {scenario.name!r} has no capacity: section (the load "
                            "to search, its range and tolerance; docs/capacity.md)")
    if scenario.trials.max > 1:
        raise ScenarioError("capacity: repeat the whole search with capacity.trials (each on "
                            "a fresh server), not trials:")
    check_before_run(scenario, runs_root)  # a trace that does not read is named here first
    check_lowest_step(scenario)
    arms = resolve_variants(scenario)
    for name, arm in arms.items():
        check_trace_span(arm.model_copy(update={"capacity": scenario.capacity}),
                         f"variants.{name}: " if name else "")
    validate_server_args([(f"variants.{name}: " if name else "", arm.server)
                          for name, arm in arms.items()], platform_of(scenario.server))
    return arms


def _search_all(scenario: Scenario, arms: dict[str, Scenario], folder: Path, say: Printer,
                previous: dict[str, CapacityDocument]) -> Outcome:
    if list(arms) == [""]:
        CapacitySearch(scenario, arms[""], folder, say, None, previous.get("")).run()
    else:
        write_atomic(folder / SCENARIO_FILE, yaml.safe_dump(
            redact_secrets(scenario.to_yaml_dict()), sort_keys=False))
        for name, arm in arms.items():
            say(f"variant {name}")
            variant_dir = folder / VARIANTS_DIR / name
            variant_dir.mkdir(parents=True, exist_ok=True)
            CapacitySearch(scenario, arm, variant_dir, say, name, previous.get(name)).run()
    return capacity_outcome(folder, render_capacity(folder))


def run_capacity(scenario: Scenario, runs_root: Path, say: Printer = print) -> Outcome:
    """Search the scenario's capacity (each variant's, when it has variants) in a new folder."""
    arms = _check(scenario, runs_root)
    folder = new_run_dir(runs_root, f"{scenario.name}-capacity")
    say(f"capacity folder: {folder}")
    try:
        return _search_all(scenario, arms, folder, say, {})
    except ScenarioError:  # decided once a server answered (a model name it does not list)
        if folder_kind(folder) is not FolderKind.CAPACITY:  # no step recorded
            shutil.rmtree(folder, ignore_errors=True)
        raise
    except KeyboardInterrupt:
        say("interrupted: the steps so far are in capacity.json; `vllm-slo capacity --resume "
            f"{folder}` goes on")
        if folder_kind(folder) is FolderKind.CAPACITY:  # at least one step was recorded
            render_capacity(folder)
        raise


def resume_capacity(folder: Path, say: Printer = print, overrides: Sequence[str] = ()
                    ) -> Outcome:
    """Go on with an interrupted search: finished trials kept, the running one continued
    from its steps on a fresh server."""
    if (folder / TUNE_SCENARIO_FILE).is_file():
        raise ScenarioError(f"{folder} is a capacity race (tune.objective: capacity): "
                            f"vllm-slo tune --resume {folder}")
    scenario = resumable_scenario(folder / SCENARIO_FILE, overrides, "vllm-slo capacity "
                                  f"--resume {folder}")
    if scenario.capacity is None:
        raise ScenarioError(f"{folder}: its scenario.yaml has no capacity: section")
    arms = resolve_variants(scenario)
    previous: dict[str, CapacityDocument] = {}
    for name in arms:
        sub = folder / VARIANTS_DIR / name if name else folder
        if (sub / CAPACITY_FILE).is_file():
            previous[name] = read_capacity(sub)
    say(f"resuming {folder}: " + ", ".join(
        f"{name or scenario.name} {len(doc.steps)} step(s)" for name, doc in previous.items()))
    return _search_all(scenario, arms, folder, say, previous)
