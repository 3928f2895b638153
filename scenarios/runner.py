"""One run of a scenario: server up (launched or attached), Locust traffic, rows on disk,
server down, then the report. Teardown happens on success, failure and Ctrl-C."""

from __future__ import annotations

import importlib.metadata as metadata
import json
import os
import sys
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path

import yaml

from reports.run_report import RenderedRun, render_run
from reports.samples import consolidate, read_streams, stream_files
from scenarios.errors import ExitCode
from scenarios.locust_process import run_locust
from scenarios.model import Scenario
from scenarios.run_files import (
    LOCUST_CONFIG_FILE,
    PROVENANCE_FILE,
    SCENARIO_FILE,
    SERVER_LOG_FILE,
    SERVER_METRICS_FILE,
    STATUS_FILE,
)
from servers.host import detect_platform, git_commit, host_facts
from servers.metrics import MetricsRecorder, prefix_cache_hit_rate
from servers.vllm_server import REPO_ROOT, AttachedServer, launch_vllm

Printer = Callable[[str], None]


@dataclass(frozen=True, slots=True)
class RunOutcome:
    run_dir: Path
    exit_code: ExitCode
    rendered: RenderedRun | None


def new_run_dir(runs_root: Path, scenario_name: str) -> Path:
    stamp = datetime.now(timezone.utc).strftime("%Y%m%dT%H%M%SZ")
    run_dir = runs_root / f"{stamp}-{scenario_name}"
    suffix = 1
    while run_dir.exists():
        suffix += 1
        run_dir = runs_root / f"{stamp}-{scenario_name}-{suffix}"
    run_dir.mkdir(parents=True)
    return run_dir


def _version(distribution: str) -> str | None:
    try:
        return metadata.version(distribution)
    except metadata.PackageNotFoundError:
        return None


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


def run_scenario(scenario: Scenario, runs_root: Path, say: Printer = print) -> RunOutcome:
    run_dir = new_run_dir(runs_root, scenario.name)
    (run_dir / SCENARIO_FILE).write_text(yaml.safe_dump(scenario.to_yaml_dict(), sort_keys=False))
    say(f"run folder: {run_dir}")
    spec = scenario.server
    platform = detect_platform() if spec.platform == "auto" else spec.platform
    api_key = os.environ.get(spec.api_key_env) if spec.api_key_env else None
    status: dict[str, object] = {"server_failure": None, "load_generator_failure": None,
                                 "interrupted": False, "warnings": []}
    provenance: dict[str, object] = {
        "suite_version": _version("vllm-slo"), "suite_git_commit": git_commit(REPO_ROOT),
        "locust_version": _version("locust"), "host": host_facts(), "platform": platform,
        "seed": scenario.traffic.seed, "started_utc": datetime.now(timezone.utc).isoformat(),
        "command_line": sys.argv,
    }
    if spec.url is not None:
        server = AttachedServer(spec.url, spec.served_model_name, spec.ready_timeout_s, api_key)
        say(f"attaching to {spec.url} ...")
    else:
        server = launch_vllm(spec, platform, run_dir / SERVER_LOG_FILE)
        provenance["launch"] = server.plan.to_dict()
        say(f"starting vLLM ({platform}): {' '.join(server.plan.argv)}")
    interactive = sys.stdout.isatty()
    try:
        with server:
            ready = server.ready
            assert ready is not None
            say(f"server ready after {ready.ready_after_s:.1f}s: model {ready.model_id}, "
                f"vLLM {ready.version}")
            provenance.update({"vllm_version": ready.version, "model_id": ready.model_id,
                               "max_model_len": ready.max_model_len,
                               "server_url": server.base_url,
                               "server_pid": getattr(server, "pid", None)})
            (run_dir / PROVENANCE_FILE).write_text(json.dumps(provenance, indent=2))
            (run_dir / LOCUST_CONFIG_FILE).write_text(json.dumps({
                "traffic": scenario.traffic.model_dump(mode="json", by_alias=True),
                "model_id": ready.model_id, "api_key_env": spec.api_key_env,
                "process_count": scenario.traffic.processes}))
            recorder = MetricsRecorder(server.base_url, run_dir / SERVER_METRICS_FILE).start()

            def show(elapsed_s: float, planned_s: float) -> None:
                line = progress_line(run_dir, elapsed_s, planned_s)
                say(f"\r{line}" if interactive else line)

            say(f"traffic: {scenario.traffic.profile}, {scenario.traffic.arrival.kind} "
                f"{scenario.traffic.arrival.users} users, warm-up {scenario.traffic.warmup_s:g}s "
                f"+ {scenario.traffic.duration_s:g}s measured")
            locust = run_locust(run_dir, server.base_url, scenario.traffic, server.failure,
                                show)
            before, after = recorder.stop()
            status["server_failure"] = server.failure()
            status["load_generator_failure"] = locust.failure
            provenance["prefix_cache_hit_rate"] = prefix_cache_hit_rate(before, after)
    except KeyboardInterrupt:
        status["interrupted"] = True
        say("interrupted: server stopped; rendering what was recorded")
    finally:
        (run_dir / PROVENANCE_FILE).write_text(json.dumps(provenance, indent=2))
        (run_dir / STATUS_FILE).write_text(json.dumps(status, indent=2))
    consolidate(run_dir)
    rendered = render_run(run_dir)
    return RunOutcome(run_dir, ExitCode(rendered.summary["exit_code"]), rendered)
