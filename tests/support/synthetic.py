"""Synthetic run folders: realistic rows (autocorrelated load, log-normal TTFT/ITL, a few
multi-token chunks, failures, warm-up, send lag), server metrics and provenance, written the
way a real run writes them. For the report benchmark (benchmarks/report_render.py) and the
report tests; never used by a real run."""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.ipc as ipc
import yaml

from vllm_slo.reports.samples import consolidate
from vllm_slo.run_folder.run_files import (
    PROVENANCE_FILE,
    SCENARIO_FILE,
    SERVER_METRICS_FILE,
    STATUS_FILE,
    TRIALS_DIR,
)
from vllm_slo.run_folder.samples_format import SAMPLE_SCHEMA, SAMPLES_DIR, SampleWriter
from vllm_slo.scenarios.model import Scenario

T0_UNIX_S = 1_800_000_000.0
MODEL_LABELS = 'engine="0",model_name="tiny"'
DEFAULT_ERRORS = ("SSE error event: {'message': 'server is overloaded', 'code': 503}",
                  "HTTP 503: Service Unavailable",
                  "no content tokens: 200 response without content")


def synthetic_table(n_requests: int, *, chunks: int = 64, warmup_s: float = 30.0,
                    duration_s: float = 600.0, failure_fraction: float = 0.005,
                    error_texts: Sequence[str] = DEFAULT_ERRORS, seed: int = 0) -> pa.Table:
    """N request rows in SAMPLE_SCHEMA over warm-up + measured window (open loop).

    Latency follows a slowly varying load level (AR(1) over consecutive requests, lag-1
    autocorrelation 0.9), so tails cluster as on a real server; TTFT ~ 80 ms and ITL ~ 15 ms
    at median, log-normal; 5% of chunks carry two tokens (token counts exceed chunk counts).
    """
    rng = np.random.default_rng(seed)
    total_s = warmup_s + duration_s
    intended = T0_UNIX_S + np.sort(rng.uniform(0.0, total_s, n_requests))
    intended[0] = T0_UNIX_S
    load = np.empty(n_requests)
    noise = rng.standard_normal(n_requests)
    rho = 0.9
    load[0] = noise[0]
    for i in range(1, n_requests):  # AR(1); cheap next to the render
        load[i] = rho * load[i - 1] + np.sqrt(1 - rho * rho) * noise[i]
    lag = rng.exponential(0.0004, n_requests) + (rng.random(n_requests) < 0.01) * 0.02
    ttft = 0.08 * np.exp(0.45 * load + 0.25 * rng.standard_normal(n_requests))
    itl_level = 0.015 * np.exp(0.25 * load)
    gaps = itl_level[:, None] * rng.lognormal(0.0, 0.35, (n_requests, max(chunks - 1, 0)))
    offsets = np.concatenate([ttft[:, None], ttft[:, None] + np.cumsum(gaps, axis=1)], axis=1)
    tokens = chunks + rng.binomial(chunks, 0.05, n_requests)
    e2e = offsets[:, -1] + 0.001
    ok = rng.random(n_requests) >= failure_fraction
    ok[0] = True
    failed_index = np.flatnonzero(~ok)
    errors = np.full(n_requests, None, dtype=object)
    errors[failed_index] = [error_texts[k % len(error_texts)]
                            for k in range(failed_index.size)] if error_texts else "error"
    status = np.where(ok, 200, 200)
    status[failed_index[1::3]] = 503
    lengths = np.where(ok, chunks, 0).astype(np.int32)
    list_offsets = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int32)
    flat = offsets[ok].ravel()
    phase = np.where(intended - T0_UNIX_S < warmup_s, "warmup", "measure")
    columns: dict[str, Any] = {
        "request_id": pa.array([f"r{i}" for i in range(n_requests)]),
        "process_id": pa.array(np.ones(n_requests, dtype=np.int32)),
        "user_id": pa.array(np.arange(n_requests, dtype=np.int32) % 64),
        "conversation_id": pa.array(np.arange(n_requests, dtype=np.int64) // 3),
        "turn": pa.array((np.arange(n_requests) % 3).astype(np.int32)),
        "phase": pa.array(phase.tolist()),
        "endpoint": pa.array(["chat"] * n_requests),
        "intended_send_unix_s": pa.array(intended),
        "send_unix_s": pa.array(intended + lag),
        "send_lag_s": pa.array(lag),
        "ttft_s": pa.array(np.where(ok, ttft, np.nan), mask=~ok),
        "e2e_s": pa.array(np.where(ok, e2e, 0.05)),
        "chunk_offsets_s": pa.ListArray.from_arrays(pa.array(list_offsets), pa.array(flat)),
        "output_tokens": pa.array(tokens.astype(np.int32), mask=~ok),
        "prompt_tokens": pa.array(np.full(n_requests, 256, dtype=np.int32)),
        "max_tokens": pa.array(np.full(n_requests, chunks, dtype=np.int32)),
        "status_code": pa.array(status.astype(np.int32)),
        "ok": pa.array(ok),
        "error": pa.array(errors.tolist(), type=pa.string()),
        "finish_reason": pa.array(np.where(ok, "length", None).tolist(), type=pa.string()),
    }
    return complete_columns(columns, n_requests)


def complete_columns(columns: dict[str, Any], n_rows: int) -> pa.Table:
    """A SAMPLE_SCHEMA table from the given columns; nullable columns not given are null (so
    the synthesis keeps working when the schema gains optional columns)."""
    for schema_field in SAMPLE_SCHEMA:
        if schema_field.name not in columns:
            if not schema_field.nullable:
                raise KeyError(f"synthetic samples lack the required column {schema_field.name}")
            columns[schema_field.name] = pa.nulls(n_rows, schema_field.type)
    return pa.Table.from_pydict(columns, schema=SAMPLE_SCHEMA)


def synthetic_server_records(total_s: float, *, interval_s: float = 2.0, seed: int = 0
                             ) -> list[dict[str, Any]]:
    """server_metrics.jsonl lines as the recorder writes them (gauges and counters)."""
    rng = np.random.default_rng(seed)
    records = []
    queries = hits = preemptions = 0.0
    for step, t in enumerate(np.arange(-2.0, total_s + interval_s, interval_s)):
        running = float(rng.integers(20, 60)) if t >= 0 else 0.0
        waiting = float(max(0, rng.integers(-10, 8))) if t >= 0 else 0.0
        new_queries = float(rng.integers(5_000, 9_000)) if t >= 0 else 0.0
        queries += new_queries
        hits += new_queries * (0.2 + 0.6 * min(1.0, max(t, 0) / 60.0))
        preemptions += float(rng.poisson(0.3)) if t >= 0 else 0.0
        records.append({"unix_s": T0_UNIX_S + float(t), "values": {
            f"vllm:num_requests_running{{{MODEL_LABELS}}}": running,
            f"vllm:num_requests_waiting{{{MODEL_LABELS}}}": waiting,
            f"vllm:kv_cache_usage_perc{{{MODEL_LABELS}}}": min(1.0, running / 70.0),
            f"vllm:num_preemptions_total{{{MODEL_LABELS}}}": preemptions,
            f"vllm:prefix_cache_queries_total{{{MODEL_LABELS}}}": queries,
            f"vllm:prefix_cache_hits_total{{{MODEL_LABELS}}}": round(hits),
            f"vllm:generation_tokens_total{{{MODEL_LABELS}}}": 64.0 * step,
        }})
    return records


def synthetic_provenance(seed: int = 7) -> dict[str, Any]:
    return {
        "suite_version": "0.1.0", "suite_git_commit": "0123456789abcdef0123456789abcdef01234567",
        "locust_version": "2.47.0",
        "host": {"hostname": "bench", "os": "Linux", "python": "3.11.7",
                 "cpu_model": "Synthetic CPU", "cpu_count": 2, "gpus": []},
        "platform": "cpu", "seed": seed, "started_utc": "2027-01-15T12:00:00+00:00",
        "command_line": ["vllm-slo", "run", "scenario=synthetic"],
        "launch": {"argv": ["python", "-m", "servers.vllm_cli", "serve", "tiny",
                            "--max-num-batched-tokens", "2048"],
                   "env_overrides": {"VLLM_NO_USAGE_STATS": "1"},
                   "engine_args": {"max-num-batched-tokens": 2048},
                   "platform_defaults": {}, "model": "tiny"},
        "vllm_version": "0.32.0", "model_id": "tiny", "max_model_len": 2048,
        "server_url": "http://127.0.0.1:8000",
    }


def scenario_document(name: str, *, duration_s: float, warmup_s: float,
                      slo: dict[str, Any] | None = None, description: str = "") -> dict[str, Any]:
    """A resolved scenario as scenario.yaml holds it (validated by the real model)."""
    raw = {"name": name, "description": description,
           "traffic": {"duration": duration_s, "warmup": warmup_s, "seed": 7},
           "slo": slo if slo is not None else {
               "ttft": ["p95 < 500ms", "p50 < 50ms"], "itl": ["p99 < 200ms"],
               "error_rate": "< 1%", "output_throughput": "> 100 tok/s"}}
    return Scenario.model_validate(raw).to_yaml_dict()


def write_samples(run_dir: Path, table: pa.Table, *, via_writer: bool) -> None:
    """Rows onto disk as a run writes them (one Arrow IPC stream per process), consolidated.
    `via_writer` appends row by row through SampleWriter (slow; small tables); otherwise the
    stream is written in batches directly (same format)."""
    path = run_dir / SAMPLES_DIR / "samples-synthetic-1.arrows"
    if via_writer:
        writer = SampleWriter(path)
        for batch in table.to_batches(max_chunksize=500):
            for row in batch.to_pylist():
                writer.append(row)
            writer.flush()
        writer.close()
    else:
        path.parent.mkdir(parents=True, exist_ok=True)
        with pa.OSFile(str(path), "wb") as sink, ipc.new_stream(sink, SAMPLE_SCHEMA) as stream:
            for batch in table.to_batches(max_chunksize=10_000):
                stream.write_batch(batch)
    consolidate(run_dir)


def write_run_folder(run_dir: Path, table: pa.Table, scenario: dict[str, Any], *,
                     provenance: dict[str, Any] | None = None,
                     server_records: list[dict[str, Any]] | None = None,
                     status: dict[str, Any] | None = None, via_writer: bool = True) -> Path:
    """A complete run folder (what `vllm-slo report` needs), without any server or Locust."""
    run_dir.mkdir(parents=True, exist_ok=True)
    (run_dir / SCENARIO_FILE).write_text(yaml.safe_dump(scenario, sort_keys=False))
    (run_dir / PROVENANCE_FILE).write_text(
        json.dumps(provenance if provenance is not None else synthetic_provenance(), indent=2))
    (run_dir / STATUS_FILE).write_text(json.dumps(status or {
        "server_failure": None, "load_generator_failure": None, "interrupted": False,
        "warnings": []}))
    if server_records:
        (run_dir / SERVER_METRICS_FILE).write_text(
            "".join(json.dumps(record) + "\n" for record in server_records))
    write_samples(run_dir, table, via_writer=via_writer)
    return run_dir


def build_big_run(run_dir: Path, n_requests: int, chunks: int, seed: int = 0) -> Path:
    warmup_s = 30.0
    duration_s = max(60.0, n_requests / 160.0)  # ~160 req/s, as a busy GPU server
    table = synthetic_table(n_requests, chunks=chunks, warmup_s=warmup_s,
                            duration_s=duration_s, seed=seed)
    scenario = scenario_document("synthetic", duration_s=duration_s, warmup_s=warmup_s)
    return write_run_folder(run_dir, table, scenario,
                            server_records=synthetic_server_records(warmup_s + duration_s),
                            via_writer=False)


EXPERIMENT_OVERRIDES = ["traffic.duration=20s", "traffic.warmup=0s",
             "slo={ttft: [\"p50 < 80ms\"], error_rate: \"< 50%\"}"]


def write_synthetic_trial(folder: Path, scenario_doc: dict, ttft_s: float, trial_factor: float,
                          seed: int, provenance_seed: int = 7, requests: int = 200,
                          provenance: dict[str, Any] | None = None,
                          server_failure: str | None = None) -> None:
    """One trial folder: `requests` rows whose TTFT is ttft_s × trial_factor × noise, rendered.
    `provenance` entries replace the default ones; a `server_failure` makes the trial invalid."""
    from vllm_slo.reports.run_report import render_run
    folder.mkdir(parents=True)
    (folder / SCENARIO_FILE).write_text(yaml.safe_dump(scenario_doc))
    (folder / PROVENANCE_FILE).write_text(json.dumps({
        "model_id": "tiny", "vllm_version": "0.32.0", "platform": "cpu",
        "seed": provenance_seed, "host": {"cpu_model": "test", "gpus": []},
        **(provenance or {})}))
    if server_failure is not None:
        (folder / STATUS_FILE).write_text(json.dumps({
            "server_failure": server_failure, "load_generator_failure": None,
            "interrupted": False, "warnings": []}))
    rng = np.random.default_rng(seed)
    writer = SampleWriter(folder / "samples" / "samples-test-1.arrows")
    for i in range(requests):
        ttft = ttft_s * trial_factor * float(rng.lognormal(0, 0.1))
        gaps = 0.01 * rng.lognormal(0, 0.2, 7)  # same distribution in every arm
        offsets = list(ttft + np.concatenate([[0.0], np.cumsum(gaps)]))
        writer.append({
            "request_id": f"r{i}", "process_id": 1, "user_id": 0, "plan_index": i,
            "conversation_id": i, "turn": 0, "phase": "measure", "endpoint": "chat",
            "intended_send_unix_s": T0_UNIX_S + i * 0.1, "send_unix_s": T0_UNIX_S + i * 0.1,
            "send_lag_s": 0.0, "queued_for_slot": False, "ttft_s": ttft,
            "e2e_s": offsets[-1], "chunk_offsets_s": offsets, "output_tokens": 8,
            "prompt_tokens": 50, "prompt_tokens_planned": 45, "max_tokens": 8,
            "status_code": 200, "ok": True, "error": None, "finish_reason": "length"})
    writer.close()
    consolidate(folder)
    render_run(folder)


def write_synthetic_experiment(root: Path, variants: dict[str, float], trials: int,
                               noise: float, seed: int = 0, traffic_seed: int = 7, *,
                               overrides: Sequence[str] = (),
                               scenario_patch: dict[str, Any] | None = None,
                               variant_patches: dict[str, dict[str, Any]] | None = None,
                               provenance: dict[str, dict[str, Any]] | None = None,
                               server_failures: dict[int, str] | None = None) -> Path:
    """An experiment folder: variant name -> its TTFT; each trial scaled by a log-normal
    trial effect with sd `noise` (restart-to-restart variation), interleaved as a run does.
    `overrides` are extra dotted overrides of the shipped chat scenario; `scenario_patch` is
    merged into it (e.g. a description) and `variant_patches` become the variants' patches
    (e.g. server args); `provenance` maps a variant to provenance entries of its trials;
    `server_failures` maps a trial position to a server failure (an invalid trial)."""
    from vllm_slo.analysis.experiment_design import trial_order
    from vllm_slo.run_folder.run_files import trial_folder_name
    from vllm_slo.scenarios.loader import deep_merge, load_scenario, resolve_variants
    scenario, _ = load_scenario("chat", [*EXPERIMENT_OVERRIDES, f"trials={trials}",
                                         f"traffic.seed={traffic_seed}", *overrides])
    document = deep_merge(scenario.to_yaml_dict(), scenario_patch or {})
    document["variants"] = {name: (variant_patches or {}).get(name, {}) for name in variants}
    scenario = Scenario.model_validate(document)
    root.mkdir(parents=True)
    (root / SCENARIO_FILE).write_text(yaml.safe_dump(scenario.to_yaml_dict()))
    arms = resolve_variants(scenario)
    rng = np.random.default_rng(seed)
    for position, (name, k) in enumerate(trial_order(list(variants), trials), start=1):
        factor = float(rng.lognormal(0, noise))
        write_synthetic_trial(root / TRIALS_DIR / trial_folder_name(position, name, k),
                              arms[name].to_yaml_dict(), variants[name], factor,
                              seed=position + 100 * seed, provenance_seed=traffic_seed,
                              provenance=(provenance or {}).get(name),
                              server_failure=(server_failures or {}).get(position))
    return root


def write_experiment_from_rows(
        root: Path, scenario: Scenario,
        rows_of_trial: Callable[[str, np.random.Generator], list[dict[str, Any]]],
        seed: int = 5) -> Path:
    """An experiment folder of `scenario` (its variants, `trials.max` per variant, interleaved
    as a run does) whose trials hold the rows `rows_of_trial(variant, rng)` gives, each trial
    rendered; one generator seeded `seed` draws for every trial in run order."""
    from vllm_slo.analysis.experiment_design import trial_order
    from vllm_slo.reports.run_report import render_run
    from vllm_slo.run_folder.run_files import trial_folder_name
    from vllm_slo.scenarios.loader import resolve_variants
    root.mkdir(parents=True)
    (root / SCENARIO_FILE).write_text(yaml.safe_dump(scenario.to_yaml_dict()))
    arms = resolve_variants(scenario)
    rng = np.random.default_rng(seed)
    for position, (name, k) in enumerate(trial_order(list(arms), scenario.trials.max), start=1):
        folder = root / TRIALS_DIR / trial_folder_name(position, name, k)
        folder.mkdir(parents=True)
        (folder / SCENARIO_FILE).write_text(yaml.safe_dump(arms[name].to_yaml_dict()))
        writer = SampleWriter(folder / SAMPLES_DIR / "samples-host-1.arrows")
        for row in rows_of_trial(name, rng):
            writer.append(row)
        writer.close()
        (folder / STATUS_FILE).write_text("{}")  # the run ended (as the runner writes)
        render_run(folder)
    return root


def write_hostile_experiment(root: Path, payload: str, variants: Sequence[str] = ("a", "b"),
                             seed: int = 0, trials: int = 2) -> Path:
    """An experiment whose user-controlled text carries `payload` (markup, quotes) wherever the
    scenario model lets text in: the description, the base's and each variant's server args
    (variant and scenario names are restricted to [A-Za-z0-9_.-], so not there), the vLLM
    version in provenance (it differs between variants, so the page lists it) and an invalid
    trial's server failure. `root`'s own name is free text too (the run id)."""
    return write_synthetic_experiment(
        root, {name: 0.05 + 0.01 * index for index, name in enumerate(variants)}, trials=trials,
        noise=0.05, seed=seed,
        scenario_patch={"description": f"described as {payload}",
                        "server": {"args": {"chat-template": f"base {payload}"}}},
        variant_patches={name: {"server": {"args": {"served-model-name": f"{name} {payload}"}}}
                         for name in variants},
        provenance={name: {"vllm_version": f"0.32.{index} {payload}"}
                    for index, name in enumerate(variants)},
        server_failures={len(variants) * trials: f"engine died: {payload}"})
