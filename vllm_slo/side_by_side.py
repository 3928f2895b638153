"""One round of a side-by-side experiment: every variant's trial at the same time, each on
its own device slot (`side_by_side.devices`), each a complete run folder.

Each trial runs `run_trial` in its own thread; the trials wait for each other once their
servers are ready and their plans made, then agree on one wall-clock instant,
TRAFFIC_START_LEAD_S ahead, at which every trial's Locust starts its traffic (Locust's own
start-up, seconds of imports and plan loading that differ between processes, happens before
it; a trial whose server does not start lets the others go on alone). Ctrl-C or SIGTERM
reaches the main thread only: it raises KeyboardInterrupt once in every trial's thread, where
`run_trial` handles it as it does in a plain run (server and Locust stopped, rows kept,
partial report)."""

from __future__ import annotations

import ctypes
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from vllm_slo.preflight import Printer
from vllm_slo.reports.run_report import RenderedRun
from vllm_slo.runner import run_trial
from vllm_slo.scenarios.errors import ExitCode
from vllm_slo.scenarios.model import Scenario

JOIN_POLL_S = 0.2  # the main thread wakes this often, so a signal reaches it promptly
# from the barrier to the round's common traffic start: covers a Locust process's start-up
# (2.6 s of imports beside a starting vLLM on a 2-core box; a Locust that is later says so
# in its log and starts at once)
TRAFFIC_START_LEAD_S = 8.0


@dataclass(frozen=True)
class PlacedTrial:
    """One trial of the round: its arm with `server.devices` set, and its folder."""

    label: str
    scenario: Scenario
    run_dir: Path


@dataclass
class _Outcome:
    result: tuple[ExitCode, RenderedRun] | None = None
    error: BaseException | None = None
    # waited on instead of Thread.join: a join that KeyboardInterrupt interrupts marks the
    # thread stopped while it still runs (CPython 3.11's `_wait_for_tstate_lock`)
    done: threading.Event = field(default_factory=threading.Event)


def place(arm: Scenario, devices: tuple[int, ...]) -> Scenario:
    """The arm with its server on `devices` (validated again, as a scenario file would be)."""
    document = arm.to_yaml_dict()
    document["server"]["devices"] = list(devices)
    return Scenario.model_validate(document)


def _raise_in_thread(thread: threading.Thread, exception: type[BaseException]) -> None:
    """Raise `exception` in another Python thread at its next bytecode (CPython's
    PyThreadState_SetAsyncExc: the documented way to interrupt a thread from outside)."""
    if thread.ident is not None:
        ctypes.pythonapi.PyThreadState_SetAsyncExc(ctypes.c_ulong(thread.ident),
                                                   ctypes.py_object(exception))


def prefixed(say: Printer, label: str) -> Printer:
    return lambda line: say(f"[{label}] {line}")


def run_round(trials: Sequence[PlacedTrial], say: Printer,
              trial_runner: Callable[..., tuple[ExitCode, RenderedRun]] = run_trial
              ) -> tuple[list[tuple[ExitCode, RenderedRun]], bool]:
    """Run the round's trials at once. Returns their results (in the given order) and
    whether the round was interrupted. A trial's own exception (its server did not start) is
    raised once every trial of the round has ended."""
    start_at_unix_s: list[float] = []  # set once, by the last trial to reach the barrier
    together = threading.Barrier(
        len(trials), action=lambda: start_at_unix_s.append(time.time() + TRAFFIC_START_LEAD_S))
    interrupted = threading.Event()

    outcomes = [_Outcome() for _ in trials]

    def work(trial: PlacedTrial, outcome: _Outcome) -> None:
        passed = threading.Event()  # this trial left the barrier with the others

        def wait_for_the_others() -> float | None:
            """The round's traffic start (Unix s), or None to start at once: another trial
            failed or the round is stopping (the barrier is broken)."""
            try:
                together.wait()
            except threading.BrokenBarrierError:
                if interrupted.is_set():
                    raise KeyboardInterrupt from None
                return None
            passed.set()
            if interrupted.is_set():
                raise KeyboardInterrupt
            return start_at_unix_s[0]

        try:
            outcome.result = trial_runner(trial.scenario, trial.run_dir,
                                          prefixed(say, trial.label),
                                          before_traffic=wait_for_the_others)
        except BaseException as exc:  # reported by the main thread
            outcome.error = exc
        finally:
            if not passed.is_set():  # whoever still waits goes on alone (after the barrier,
                together.abort()     # an abort would break it under a trial still waking)
            outcome.done.set()

    threads = [threading.Thread(target=work, args=(trial, outcome), name=f"trial-{trial.label}")
               for trial, outcome in zip(trials, outcomes, strict=True)]
    for thread in threads:
        thread.start()
    for outcome in outcomes:
        while not outcome.done.is_set():
            try:
                outcome.done.wait(JOIN_POLL_S)
            except KeyboardInterrupt:
                if interrupted.is_set():
                    say("still stopping the round's servers and Locust processes ...")
                    continue
                interrupted.set()
                together.abort()
                for thread, other in zip(threads, outcomes, strict=True):
                    if not other.done.is_set():
                        _raise_in_thread(thread, KeyboardInterrupt)
    for thread in threads:
        thread.join()  # each has set `done`: only its last bytecodes are left
    for outcome in outcomes:
        if outcome.error is not None and not isinstance(outcome.error, KeyboardInterrupt):
            raise outcome.error
    results = [outcome.result for outcome in outcomes if outcome.result is not None]
    stopped = interrupted.is_set() or any(
        isinstance(outcome.error, KeyboardInterrupt) for outcome in outcomes)
    return results, stopped
