"""Trials as values: one trial is one full run on a fresh server instance, the unit of
comparison. Its outcome (exit code, validity, SLO verdicts), its series, and its per-trial
statistics ("cells" such as ttft.p50 or output_throughput.mean). Pure; reading trial folders
is `reports.trial_folders`."""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from vllm_slo.analysis.run_metrics import RunSeries
from vllm_slo.analysis.summary import SloEntry
from vllm_slo.scenarios.metrics import MetricKind, parse_cell, split_cell
from vllm_slo.scenarios.model import Scenario


@dataclass(frozen=True, slots=True)
class TrialOutcome:
    """What an experiment takes from a trial's own summary.json (written when the trial was
    rendered): its exit code, why it is invalid (if it is) and its SLO verdicts."""

    exit_code: int
    invalid_reasons: tuple[str, ...]
    slos: tuple[SloEntry, ...]

    @classmethod
    def from_json_dict(cls, data: Mapping[str, Any]) -> TrialOutcome:
        return cls(int(data["exit_code"]), tuple(data["invalid_reasons"]),
                   tuple(SloEntry.from_json_dict(s) for s in data["slos"]))


@dataclass(frozen=True, slots=True)
class Trial:
    variant: str  # "" for a scenario without variants
    position: int  # execution order within its experiment (1 for a single run)
    run_dir: Path
    scenario: Scenario
    provenance: dict[str, Any]  # redacted
    outcome: TrialOutcome
    series: RunSeries
    parts: Mapping[str, RunSeries] = field(default_factory=dict)  # a mix's parts, by profile

    @property
    def valid(self) -> bool:
        return not self.outcome.invalid_reasons

    @property
    def label(self) -> str:
        return self.variant or "run"


def instance_key(trial: Trial) -> str | None:
    """Which server instance served the trial, from provenance.json `server_instance`: a
    launched server is its pid and start time (a fresh process per trial); an attached one is
    its `server.instance` label, else its URL without userinfo (the same URL is the same
    server, unless the user labels restarts); an imported run is its instance label. None when
    the folder does not say (older folders): such a trial counts as an instance of its own."""
    recorded = trial.provenance.get("server_instance")
    if not isinstance(recorded, Mapping):
        return None
    label = recorded.get("label")
    kind = recorded.get("kind")
    if kind == "launched" and recorded.get("pid") is not None:
        return f"pid {recorded.get('pid')} started {recorded.get('started_unix_s')}"
    if label:
        return f"label {label}"
    url = recorded.get("url")
    if kind == "attached" and isinstance(url, str) and url:
        return "url " + re.sub(r"(?<=://)[^/@]*@", "", url)
    return None


def gpu_set(provenance: Mapping[str, Any]) -> str:
    """The GPUs a trial ran on, as "uuid,uuid" from provenance.json `host.gpu_uuids`; "" where
    the folder does not say (CPU runs, older folders)."""
    host = provenance.get("host")
    uuids = host.get("gpu_uuids") if isinstance(host, Mapping) else None
    return ",".join(str(u) for u in uuids) if isinstance(uuids, list) else ""


def machines_text(ran_on: Sequence[tuple[str, str]]) -> str | None:
    """Which ran where, when `ran_on` ((what, gpu_set) pairs, "" = unknown) spans more than one
    set of GPUs: "2 different sets of GPUs (GPU-aaaaaaaa: c1 c2; GPU-bbbbbbbb: c3)"; None on
    one machine or where nothing says."""
    sets = sorted({gpus for _, gpus in ran_on if gpus})
    if len(sets) < 2:
        return None
    where = "; ".join(
        f"{', '.join(u[:12] for u in gpus.split(','))}: "
        f"{' '.join(dict.fromkeys(what for what, on in ran_on if on == gpus))}" for gpus in sets)
    return f"{len(sets)} different sets of GPUs ({where})"


def trial_cell_value(trial: Trial, cell: str) -> float | None:
    """A trial's statistic for a whole-run cell or a part's (None when the trial has no such
    part or no data for it)."""
    part, base = split_cell(cell)
    series = trial.series if part is None else trial.parts.get(part)
    return None if series is None else cell_value(series, base)


def cell_value(series: RunSeries, cell: str) -> float | None:
    """One trial's statistic: the point value (the trial-to-trial spread carries the
    uncertainty), None when the trial has no data for it."""
    parsed = parse_cell(cell)
    metric = parsed.metric
    if metric.kind is MetricKind.FRACTION:  # error_rate: the failed share of the requests
        return series.failed / series.requests if series.requests else None
    if metric.kind is MetricKind.RATE:  # its count over the span measured, not a bin mean
        return series.rate_per_s(metric.name)
    values = series.samples(metric.name)
    if values.size == 0:
        return None
    percentile = parsed.percentile
    if percentile is None:
        return float(np.mean(values))
    return float(np.quantile(values, percentile / 100.0))
