"""One run of a scenario: server up (launched or attached), Locust traffic, rows on disk,
server down, then the report. Teardown happens on success, failure and Ctrl-C."""

from __future__ import annotations

import importlib.metadata as metadata
import json
import os
import secrets
import shutil
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import yaml

from vllm_slo.analysis.outages import table_outages
from vllm_slo.loadtests.locust_launcher import (
    resolve_workers,
    run_locust,
    worker_argv,
)
from vllm_slo.loadtests.lora_split import unserved_names
from vllm_slo.loadtests.openai_stream import PATHS, request_body
from vllm_slo.loadtests.plan import RequestPlan, build_plan, write_plan
from vllm_slo.loadtests.prompts import flatten_for_completions
from vllm_slo.loadtests.remote_rows import TOKEN_ENV
from vllm_slo.loadtests.tokens import TokenCounter, local_token_counter, server_token_counter
from vllm_slo.outcome import Outcome, run_reported
from vllm_slo.preflight import (
    Printer,
    check_before_run,
    planned_request_count,
    platform_of,
)
from vllm_slo.redaction import (
    redact_secrets,
    redact_text,
    redact_values,
    spec_secret_values,
)
from vllm_slo.reports.run_report import RenderedRun, render_run
from vllm_slo.reports.samples import consolidate, read_streams, stream_files
from vllm_slo.run_folder.file_writes import new_run_dir
from vllm_slo.run_folder.locust_config import LocustConfig
from vllm_slo.run_folder.provenance import Provenance
from vllm_slo.run_folder.remote_workers import RemoteWorkers
from vllm_slo.run_folder.run_files import (
    PLAN_FILE,
    SCENARIO_FILE,
    SERVER_FACTS_FILE,
    SERVER_LOG_FILE,
    SERVER_METRICS_FILE,
)
from vllm_slo.run_folder.run_status import RunStatus
from vllm_slo.scenarios.errors import ExitCode, ScenarioError, ServerError
from vllm_slo.scenarios.model import Scenario
from vllm_slo.scenarios.server_spec import ServerSpec
from vllm_slo.scenarios.traffic_spec import TrafficSpec
from vllm_slo.serialise import to_json
from vllm_slo.servers.core_split import NO_SPLIT
from vllm_slo.servers.host import git_commit, host_facts
from vllm_slo.servers.metrics_scrape import MetricsRecorder, scrape
from vllm_slo.servers.readiness import ReadyServer
from vllm_slo.servers.server_facts import describe, facts_from_metrics, server_facts
from vllm_slo.servers.vllm_args import validate_server_args
from vllm_slo.servers.vllm_server import AttachedServer, VllmServer, launch_vllm
from vllm_slo.transport.http_stream import HttpStreamClient

# a source checkout (git) when the suite runs from one; an installed wheel has no commit
SOURCE_CHECKOUT = Path(__file__).resolve().parent.parent


def _version(distribution: str) -> str | None:
    try:
        return metadata.version(distribution)
    except metadata.PackageNotFoundError:
        return None


def _suite_commit() -> str | None:
    if not (SOURCE_CHECKOUT / ".git").exists():
        return None  # installed from a wheel (site-packages may sit inside someone's repo)
    return git_commit(SOURCE_CHECKOUT)


def progress_line(run_dir: Path, elapsed_s: float, planned_s: float) -> str:
    """Live progress from the rows flushed so far (read-only; never feeds statistics)."""
    table = read_streams(stream_files(run_dir))
    done = table.num_rows
    failed = done - sum(table.column("ok").to_pylist()) if done else 0
    ttfts = sorted(v for v in table.column("ttft_s").to_pylist() if v is not None)
    ttft_p50 = f"{ttfts[len(ttfts) // 2] * 1e3:.0f}ms" if ttfts else "n/a"
    tokens = sum(v for v in table.column("output_tokens").to_pylist() if v)
    return (f"[{elapsed_s:5.0f}s / {planned_s:.0f}s] requests {done} (failed {failed}) · "
            f"TTFT p50 {ttft_p50} · {tokens / max(elapsed_s, 1e-9):,.0f} output tok/s")


def _token_counter(traffic: TrafficSpec, model_path: str | None, base_url: str,
                   model_id: str, api_key: str | None) -> TokenCounter:
    """The server model's own tokenizer: traffic.tokenizer, else the launched model's folder,
    else the server's /tokenize endpoint."""
    if traffic.tokenizer:
        return local_token_counter(traffic.tokenizer)
    if model_path and (Path(model_path) / "tokenizer.json").is_file():
        return local_token_counter(model_path)
    return server_token_counter(base_url, model_id, api_key)


def prepare_plan(traffic: TrafficSpec, model_path: str | None, base_url: str, model_id: str,
                 max_model_len: int | None, run_dir: Path, api_key: str | None = None,
                 block_size: int | None = None) -> RequestPlan:
    counter = _token_counter(traffic, model_path, base_url, model_id, api_key)
    try:
        plan = build_plan(traffic, counter, max_model_len, planned_request_count(traffic),
                          block_size)
    except ConnectionError as error:  # the server's /tokenize went away: infrastructure
        raise ServerError(f"counting tokens through the server failed: {error}") from error
    except (OSError, ValueError) as error:  # unreadable data set, bad tokenizer, bad settings
        raise ScenarioError(f"traffic.{traffic.profile}: {error}") from error
    write_plan(plan, run_dir / PLAN_FILE)
    return plan


def _server_share(url: str | None, platform: str) -> str:
    """What the server takes of this host's cores (for `traffic.workers: auto`)."""
    if url is None:
        return "gpu" if platform == "gpu" else "cpu"
    host = urlsplit(url).hostname or ""
    return "local" if host in ("localhost", "::1") or host.startswith("127.") else "remote"


def reset_prefix_cache(base_url: str, api_key: str | None) -> str:
    """POST /reset_prefix_cache (vLLM with VLLM_SERVER_DEV_MODE=1). Returns what happened."""
    client = HttpStreamClient(base_url, timeout_s=30.0, api_key=api_key)
    try:
        response = client.request("POST", "/reset_prefix_cache", b"")
    finally:
        client.close()
    if response.status == 200 and b"true" in response.body:
        return "reset"
    if response.status == 404:
        return ("not available (the server was not started with VLLM_SERVER_DEV_MODE=1); "
                "prefix-cache state carries over from earlier traffic")
    return f"failed: HTTP {response.status} {response.body[:200]!r}"


def prefix_cache_facts(base_url: str, spec: ServerSpec) -> dict[str, Any]:
    """What shaping to a hit rate needs of the server: its block size and whether prefix
    caching is on (its /metrics `cache_config_info`; `server.args.block-size` when that is
    not exported)."""
    facts = facts_from_metrics(scrape(base_url) or {})
    if facts.get("block_size") is None and isinstance(spec.args.get("block-size"), int):
        facts["block_size"] = spec.args["block-size"]
    return facts


def prime_prefix_cache(base_url: str, endpoint: str, model_id: str, plan: RequestPlan,
                       api_key: str | None) -> str:
    """`phases: warm`: each primer of the plan (the longest shared part per first-message
    role) sent once, one output token each, before the traffic. Returns what happened."""
    client = HttpStreamClient(base_url, timeout_s=300.0, api_key=api_key)
    try:
        for primer in plan.primers:
            prompt = list(primer) if endpoint == "chat" else flatten_for_completions(primer)
            body = request_body(endpoint, model_id, prompt, 1, True, 0.0)
            response = client.request("POST", PATHS[endpoint], body)
            if response.transport_error or response.status != 200:
                return (f"priming failed: {response.transport_error or response.status} "
                        f"{response.body[:200]!r}")
    finally:
        client.close()
    return f"primed ({len(plan.primers)} shared prefix{'es' if len(plan.primers) != 1 else ''})"


def _launch_log(server: VllmServer | AttachedServer) -> str:
    """The launched server's log ("" when attached)."""
    if not isinstance(server, VllmServer):
        return ""
    try:
        return server.log_path.read_text(errors="replace")
    except OSError:
        return ""


def run_scenario(scenario: Scenario, runs_root: Path, say: Printer = print) -> Outcome:
    check_before_run(scenario, runs_root)
    validate_server_args([("", scenario.server)], platform_of(scenario.server))
    run_dir = new_run_dir(runs_root, scenario.name)
    try:
        exit_code, rendered = run_trial(scenario, run_dir, say)
    except ScenarioError:  # decided once the server answered (prompts that fit no context)
        shutil.rmtree(run_dir, ignore_errors=True)
        say(f"run folder removed: {run_dir} (a usage error; no traffic was sent)")
        raise
    return run_reported(run_dir, exit_code, rendered.text, rendered.report_path,
                        len(scenario.slo.rules()))


def _scrubbed(text: str, spec: ServerSpec, api_key: str | None) -> str:
    """`text` without the scenario's secrets (its values and any URL's or bearer's)."""
    return redact_values(redact_text(text), spec_secret_values(
        {str(k): v for k, v in spec.args.items()}, spec.env, spec.url, api_key))


def _scrub_server_log(path: Path, spec: ServerSpec, api_key: str | None) -> None:
    """The launched server's log with the scenario's secrets removed: vLLM echoes its
    arguments (`--api-key`) and the suite writes the command line at the top."""
    if not path.is_file():
        return
    text = path.read_text(errors="replace")
    scrubbed = _scrubbed(text, spec, api_key)
    if scrubbed != text:
        path.write_text(scrubbed)


@dataclass(slots=True)
class _Record:
    """What the run folder records of a trial, as its phases learn it: the provenance
    (immutable, replaced field by field) and the status (its warnings appended to as the run
    goes on). Mutable on purpose: whichever phase fails, `run_trial` writes what was learnt."""

    provenance: Provenance
    status: RunStatus

    def note(self, **fields: Any) -> None:
        """Sets provenance fields (`Provenance.updated`)."""
        self.provenance = self.provenance.updated(**fields)


@dataclass(frozen=True, slots=True)
class _Trial:
    """What every phase of a trial reads: the scenario, its run folder, how it prints, and the
    record the phases add to."""

    scenario: Scenario
    run_dir: Path  # absolute: child processes get absolute paths only
    say: Printer
    platform: str
    api_key: str | None
    interactive: bool  # stdout is a terminal: live progress refreshes one line
    record: _Record

    @property
    def spec(self) -> ServerSpec:
        return self.scenario.server

    @property
    def traffic(self) -> TrafficSpec:
        return self.scenario.traffic


@dataclass(frozen=True, slots=True)
class _Served:
    """The server phase's hand-over: a server that answered, and the launched model's folder
    (None when attached)."""

    server: VllmServer | AttachedServer
    ready: ReadyServer
    model_path: str | None


@dataclass(frozen=True, slots=True)
class _LoadGenerator:
    """Where Locust runs: its worker processes, and the cores it is pinned to (None: any)."""

    workers: int
    cores: tuple[int, ...] | None


def _open_trial(scenario: Scenario, run_dir: Path, say: Printer) -> _Trial:
    """The run folder with the scenario in it, and what the suite knows before any server:
    its versions, the host, the platform, the seed, the start time, the command line."""
    run_dir = run_dir.resolve()  # child processes get absolute paths only
    run_dir.mkdir(parents=True, exist_ok=True)
    # secrets belong in the environment, referenced by name (server.api_key_env): values that
    # look like credentials never reach a file
    (run_dir / SCENARIO_FILE).write_text(
        yaml.safe_dump(redact_secrets(scenario.to_yaml_dict()), sort_keys=False))
    say(f"run folder: {run_dir}")
    spec, traffic = scenario.server, scenario.traffic
    platform = platform_of(spec)
    api_key = os.environ.get(spec.api_key_env) if spec.api_key_env else None
    status = RunStatus()
    provenance = Provenance(
        suite_version=_version("vllm-slo"), suite_git_commit=_suite_commit(),
        locust_version=_version("locust"), host=host_facts(), platform=platform,
        seed=traffic.seed, started_utc=datetime.now(timezone.utc).isoformat(),
        command_line=redact_secrets(sys.argv))
    return _Trial(scenario, run_dir, say, platform, api_key, sys.stdout.isatty(),
                  _Record(provenance, status))


@contextmanager
def _server_phase(trial: _Trial) -> Iterator[_Served]:
    """Server: launch `vllm serve` (or attach to server.url), wait until it answers, check that
    it serves the names traffic.lora sends, record what answered (provenance.json). The server
    stops when the caller's `with` block ends, however it ends."""
    spec, traffic, say, record = trial.spec, trial.traffic, trial.say, trial.record
    model_path: str | None = None
    server: AttachedServer | VllmServer
    if spec.url is not None:
        server = AttachedServer(spec.url, spec.served_model_name, spec.ready_timeout_s,
                                trial.api_key)
        say(redact_text(f"attaching to {spec.url} ..."))
    else:
        dev_mode = {"VLLM_SERVER_DEV_MODE": "1"} if traffic.prefix_cache.resets else {}
        # may build the tiny model or its LoRA adapters first (seconds)
        server = launch_vllm(spec, trial.platform, trial.run_dir / SERVER_LOG_FILE, dev_mode)
        model_path = server.plan.argv[server.plan.argv.index("serve") + 1]
        record.note(launch=redact_secrets(server.plan.to_dict()))
        say(f"starting vLLM ({trial.platform}): {' '.join(redact_secrets(server.plan.argv))}")
    log_hint = f" (its log: {server.log_path})" if isinstance(server, VllmServer) else ""
    server.on_waiting = lambda text: say(redact_text(text) + log_hint)
    with server:
        ready = server.ready
        assert ready is not None
        say(f"server ready after {ready.ready_after_s:.1f}s: model {ready.model_id}, "
            f"vLLM {ready.version}")
        for warning in ready.warnings:  # what it said of itself in a shape it could not use
            say(f"warning: {warning}")
            record.status.warnings.append(warning)
        unserved = unserved_names(traffic.lora, ready.served_models)
        if unserved:
            raise ScenarioError(
                f"traffic.lora: the server does not serve {', '.join(unserved)} (its "
                f"/v1/models lists {', '.join(ready.served_models)}); nothing was sent")
        if isinstance(server, VllmServer) and server.ports_taken:  # again on a fresh port
            say(f"port(s) {', '.join(map(str, server.ports_taken))} were taken by another "
                f"process before vLLM bound them; it runs on port {server.plan.port}")
            record.note(launch={**redact_secrets(server.plan.to_dict()),
                                "ports_taken": list(server.ports_taken)})
        record.note(
            vllm_version=ready.version, model_id=ready.model_id,
            max_model_len=ready.max_model_len, server_url=server.base_url,
            server_pid=getattr(server, "pid", None),
            server_instance={**server.instance(), "label": spec.instance})
        if spec.url is None:  # a launch's start-up: what the next experiment plans with
            record.note(server_ready_after_s=ready.ready_after_s)
        record.provenance.write(trial.run_dir, redact_secrets)
        yield _Served(server, ready, model_path)


def _plan_phase(trial: _Trial, served: _Served) -> None:
    """Plan: the run's requests, counted in the server model's tokens, written to the run
    folder (requests.parquet, what the Locust users send), and the prefix cache brought to
    the state the traffic asks for (reset, primed)."""
    spec, traffic, say, record = trial.spec, trial.traffic, trial.say, trial.record
    server, ready, warnings = served.server, served.ready, record.status.warnings
    block_size = None
    if traffic.prefix_cache.target_hit_rate is not None:
        cache = prefix_cache_facts(server.base_url, spec)
        block_size = cache.get("block_size")
        if cache.get("enable_prefix_caching") is False:
            warnings.append("prefix cache: target_hit_rate is set but the server runs "
                            "with prefix caching off (--no-enable-prefix-caching)")
    plan = prepare_plan(traffic, served.model_path, server.base_url, ready.model_id,
                        ready.max_model_len, trial.run_dir, trial.api_key, block_size)
    record.note(plan={
        "requests": len(plan.requests), "sha256": plan.sha256,
        "tokenizer": plan.tokenizer, "trimmed": plan.trimmed,
        "rejected": plan.rejected, "filtered": plan.filtered,
        **({} if plan.prefix_cache is None else {"prefix_cache": plan.prefix_cache}),
        **(plan.facts or {})})
    warnings.extend(w for w in plan.warnings if w.startswith(("prefix cache", "trace:")))
    say(f"plan: {len(plan.requests)} {traffic.profile} requests "
        f"(sha256 {plan.sha256[:12]}, trimmed {plan.trimmed}, rejected {plan.rejected})")
    if traffic.prefix_cache.resets:
        record.note(prefix_cache_reset=reset_prefix_cache(server.base_url, trial.api_key))
        if record.provenance.prefix_cache_reset != "reset":
            warnings.append(f"prefix cache {record.provenance.prefix_cache_reset}")
    if traffic.prefix_cache.primes:
        primed = prime_prefix_cache(server.base_url, traffic.endpoint, ready.model_id,
                                    plan, trial.api_key)
        record.note(prefix_cache_primed=primed)
        say(f"prefix cache: {primed}")
        if not primed.startswith("primed"):
            warnings.append(f"prefix cache {primed}")


def _load_generator(trial: _Trial, served: _Served) -> _LoadGenerator:
    """Locust's share of the host (its worker processes, its cores beside a launched server's)
    and its configuration, written to the run folder."""
    spec, traffic, say, record = trial.spec, trial.traffic, trial.say, trial.record
    server = served.server
    split = server.plan.core_split if isinstance(server, VllmServer) else NO_SPLIT
    record.note(core_split=split.to_dict())
    if split.client_cores is not None:
        say(f"cores: vLLM on {','.join(map(str, split.server_cores or ()))}, Locust on "
            f"{','.join(map(str, split.client_cores))} ({split.reason})")
    workers = traffic.remote_workers or resolve_workers(
        traffic, os.cpu_count() or 1, _server_share(spec.url, trial.platform))
    record.note(locust_workers=workers)
    if traffic.remote_workers:
        record.note(locust_master=f"{traffic.master_bind}:{traffic.master_port}")
    LocustConfig(traffic=traffic, model_id=served.ready.model_id,
                 api_key_env=spec.api_key_env, process_count=workers).write(trial.run_dir)
    return _LoadGenerator(workers, split.client_cores)


def _traffic_phase(trial: _Trial, served: _Served,
                   before_traffic: Callable[[], float | None]) -> None:
    """Traffic: Locust sends the plan while the server's /metrics are recorded, until the
    window ends or abort_on stops it; what failed on either side goes to the status."""
    scenario, traffic, say, status = trial.scenario, trial.traffic, trial.say, trial.record.status
    run_dir, server, interactive = trial.run_dir, served.server, trial.interactive
    load = _load_generator(trial, served)
    workers = load.workers
    recorder = MetricsRecorder(server.base_url, run_dir / SERVER_METRICS_FILE).start()
    if recorder.start_warning() is not None:
        say(f"warning: {recorder.start_warning()}")
    facts = server_facts(_launch_log(server), recorder.first_values)
    (run_dir / SERVER_FACTS_FILE).write_text(json.dumps(to_json(facts), indent=2))
    if describe(facts):
        say(describe(facts))

    def show(elapsed_s: float, planned_s: float) -> None:
        line = progress_line(run_dir, elapsed_s, planned_s)
        say(f"\r{line}" if interactive else line)

    arrival = traffic.arrival
    rate = ("at the trace's times" if arrival.kind == "trace"  # closed loop: no rate
            else f"{arrival.peak_rate() or 0:g} req/s")
    shape = (f"{arrival.kind} {rate} (max {arrival.max_in_flight} "
             f"in flight)" if arrival.open_loop else f"{arrival.kind} loop, "
             f"{arrival.users} users")
    say(f"traffic: {traffic.profile}, {shape}, warm-up {traffic.warmup_s:g}s + "
        f"{traffic.duration_s:g}s measured + {traffic.cooldown_s:g}s cool-down, "
        f"{workers} Locust worker process{'es' if workers > 1 else ''}")
    run_token = None
    if traffic.remote_workers:  # issued per run (or the operator's, from the environment:
        # workers started ahead, e.g. a Kubernetes Secret), printed, never written to the folder
        given = os.environ.get(TOKEN_ENV, "")
        run_token = given or secrets.token_hex(16)  # never begins with `-`
        host = traffic.master_bind if traffic.master_bind not in ("0.0.0.0", "::", "*") \
            else "<this host>"
        say(f"waiting for {traffic.remote_workers} remote Locust worker(s) (up to "
            f"{traffic.remote_workers_wait_s:g}s); on each worker host (the suite installed, "
            f"nothing else), run:\n  " + " ".join(worker_argv(
                traffic, host, f'"${TOKEN_ENV}"' if given else run_token)))

    def abort() -> str | None:  # the scenario's abort_on, on the rows flushed so far
        if scenario.abort_on.error_rate is None:
            return None
        ok = read_streams(stream_files(run_dir)).column("ok").to_pylist()
        return scenario.abort_on.reason(len(ok), ok.count(False))

    start_at_unix_s = before_traffic()
    # live progress: a refreshing line on a terminal, a line every 30 s in CI logs
    locust = run_locust(run_dir, server.base_url, traffic, workers, server.failure, show,
                        progress_interval_s=5.0 if interactive else 30.0, abort=abort,
                        start_at_unix_s=start_at_unix_s, cores=load.cores,
                        run_token=run_token)
    if locust.aborted:
        status.aborted = locust.aborted
        say(f"aborted: {locust.aborted}")
    recorder.stop()
    status.warnings.extend(recorder.warnings)
    status.server_failure = server.failure()
    status.load_generator_failure = locust.failure
    if traffic.remote_workers:
        _remote_workers_outcome(trial)


def _remote_workers_outcome(trial: _Trial) -> None:
    """What the master saw of its remote workers (remote_workers.json): per worker its rows
    in the provenance (summary.json), the strays it turned away named, and any worker that
    never joined or was lost makes the run invalid (the load asked was not the load sent)."""
    traffic, say, status, record = trial.traffic, trial.say, trial.record.status, trial.record
    seen = RemoteWorkers.read(trial.run_dir) or RemoteWorkers(expected=traffic.remote_workers)
    record.note(remote_workers=[
        {"worker_id": w.worker_id, "host": w.host, "stripe": w.stripe, "rows": w.rows,
         "duplicate_rows": w.duplicate_rows, "finished": w.finished,
         **({"lost_unix_s": w.lost_unix_s, "lost_reason": w.lost_reason}
            if w.lost_unix_s is not None else {})} for w in seen.workers])
    say(f"remote workers: {seen.joined} of {seen.expected} joined; rows " + (", ".join(
        f"{w.worker_id} {w.rows}" for w in seen.workers) or "none"))
    for stray in seen.strays:
        say(f"remote workers: {stray.worker_id} {stray.reason}")
    problems = seen.problems()
    if seen.joined < seen.expected:
        problems[0] += f" within {traffic.remote_workers_wait_s:g}s"
    for problem in problems:
        say(f"invalid: {problem}")
    if problems:
        status.load_generator_failure = "; ".join(
            [*problems, *([status.load_generator_failure] if status.load_generator_failure
                          else [])])


def _collect_phase(trial: _Trial) -> None:
    """Collect: the workers' row files consolidated into the run's samples; the server's
    outages found in them go to the status."""
    run_dir, status = trial.run_dir, trial.record.status
    table = consolidate(run_dir)
    outages = table_outages(table)
    if outages:  # the server went away: when, for how long, what it cost (also in the report)
        start = min(table.column("send_unix_s").to_pylist())
        status.server_unreachable = [to_json(outage.record(start)) for outage in outages]
        status.write(run_dir)


def _report_phase(trial: _Trial) -> tuple[ExitCode, RenderedRun]:
    """Report: summary, verdicts and reports rendered from the run folder; the exit code."""
    rendered = render_run(trial.run_dir)
    return rendered.exit_code, rendered


def _measure(trial: _Trial, served: _Served,
             before_traffic: Callable[[], float | None] = lambda: None) -> None:
    """Plan and traffic on a server that answered; a Ctrl-C is an interrupted run. Whatever
    happens, provenance.json and run_status.json are written and the log scrubbed."""
    spec, record = trial.spec, trial.record
    try:
        _plan_phase(trial, served)
        _traffic_phase(trial, served, before_traffic)
    except KeyboardInterrupt:
        record.status.interrupted = True
        raise
    finally:
        record.provenance.write(trial.run_dir, redact_secrets)
        record.status.write(trial.run_dir)
        _scrub_server_log(trial.run_dir / SERVER_LOG_FILE, spec, trial.api_key)


@dataclass(frozen=True, slots=True)
class SharedServer:
    """One server serving several runs (a capacity search's steps): what answered, and what
    its provenance says of it (copied into each run's provenance.json)."""

    served: _Served
    server_facts: dict[str, Any]


# provenance fields that describe the server, not the run
_SERVER_FIELDS = ("launch", "vllm_version", "model_id", "max_model_len", "server_url",
                  "server_pid", "server_instance", "server_ready_after_s")


@contextmanager
def shared_server(scenario: Scenario, folder: Path, say: Printer = print
                  ) -> Iterator[SharedServer]:
    """Launch (or attach to) the scenario's server once, its log and provenance in `folder`;
    runs made with `run_on_server` use it until the `with` block ends (the server stops then,
    however it ends)."""
    trial = _open_trial(scenario, folder, say)
    try:
        with _server_phase(trial) as served:
            facts = trial.record.provenance.to_json_dict()
            yield SharedServer(served, {key: facts[key] for key in _SERVER_FIELDS
                                        if facts.get(key) is not None})
    except ServerError as error:
        error.args = (_scrubbed(str(error), trial.spec, trial.api_key),)
        raise
    finally:
        trial.record.provenance.write(trial.run_dir, redact_secrets)
        _scrub_server_log(trial.run_dir / SERVER_LOG_FILE, trial.spec, trial.api_key)


def run_on_server(scenario: Scenario, run_dir: Path, shared: SharedServer,
                  say: Printer = print) -> tuple[ExitCode, RenderedRun]:
    """One run on a server that `shared_server` keeps up: plan (the prefix cache reset or
    primed as the traffic asks), traffic, rows, report. The scenario's server section is the
    shared server's. A Ctrl-C renders what was recorded, then goes on up (the caller stops
    the server)."""
    trial = _open_trial(scenario, run_dir, say)
    trial.record.note(**shared.server_facts)
    if shared.served.server.failure() is not None:
        raise ServerError(f"the server died before this run: "
                          f"{(shared.served.server.failure() or '').splitlines()[0]}")
    try:
        _measure(trial, shared.served)
    except KeyboardInterrupt:
        say("interrupted: rendering what was recorded")
        _collect_phase(trial)
        _report_phase(trial)
        raise
    _collect_phase(trial)
    return _report_phase(trial)


def run_trial(scenario: Scenario, run_dir: Path, say: Printer = print,
              before_traffic: Callable[[], float | None] = lambda: None
              ) -> tuple[ExitCode, RenderedRun]:
    """One full run in `run_dir`, phase by phase: server up, plan (and the prefix cache
    reset or primed), Locust's traffic, server down, rows collected, report.
    `before_traffic` is called once the server is ready and the plan made, right before
    Locust starts; it may return a wall-clock instant (Unix s) at which Locust is to start
    its traffic (side-by-side trials wait there for each other and agree on one). Whatever
    phase fails, the server is stopped and provenance.json and run_status.json are written."""
    trial = _open_trial(scenario, run_dir, say)
    spec, record = scenario.server, trial.record
    try:  # from here a Ctrl-C / SIGTERM (a tune's or experiment's watchdog) is an interrupted run
        with _server_phase(trial) as served:
            _measure(trial, served, before_traffic)
    except ServerError as error:  # its text may quote the server's log (vLLM echoes its args)
        error.args = (_scrubbed(str(error), spec, trial.api_key),)
        raise
    except KeyboardInterrupt:
        record.status.interrupted = True  # also when the server phase was interrupted
        record.status.write(trial.run_dir)
        say("interrupted: server stopped; rendering what was recorded")
    finally:
        record.provenance.write(trial.run_dir, redact_secrets)
        record.status.write(trial.run_dir)
        _scrub_server_log(trial.run_dir / SERVER_LOG_FILE, spec, trial.api_key)
    _collect_phase(trial)
    return _report_phase(trial)
