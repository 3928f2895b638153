"""SLO thresholds sized from the run's own warm-up (pure; no file access).

A latency rule written `p95 < 3x warmup` is judged against 3 × the same statistic (p95) of
the same metric over the warm-up's successful requests: the rows the run sent before its
measured window, on the same server and host, under the same traffic. The shipped `chat`
scenario states its SLOs this way so that the main job means the same on any host that can run
it (a host 4× slower has a 4× larger threshold): it asks "did the server hold, through the
measured window, the latency it showed in the warm-up?", and a server that degrades under
sustained load (queues growing, preemption, a stall) still fails. It is not an absolute
latency promise: SLOs of a deployment are absolute thresholds (`p95 < 50ms`).

The sized value is said with every verdict (`WarmupSizing.notes`, shown with the run's
warnings). A rule whose warm-up holds no sample of its metric cannot be sized: it stays
unsized (NaN threshold) and its verdict is INCONCLUSIVE (`unsized_result`), never a PASS;
its verdict's basis is the one sentence that says why (no note repeats it).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, replace

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from vllm_slo.analysis.run_metrics import RunSeries, run_series
from vllm_slo.analysis.verdicts import SloResult
from vllm_slo.scenarios.metrics import metric_named
from vllm_slo.scenarios.slo import SloRule, part_column
from vllm_slo.stats.statistics import Estimate, Verdict

FEW_WARMUP_SAMPLES = 20  # a baseline from fewer samples is said to be rough


@dataclass(frozen=True, slots=True)
class WarmupSizing:
    """Every rule, the warm-up ones with their sized threshold (NaN where no warm-up sample of
    the metric exists), and one note per sized warm-up rule saying how it was sized (an
    unsized rule's verdict says why: `unsized_basis`)."""

    rules: tuple[SloRule, ...]
    notes: tuple[str, ...]


def warmup_rows_as_measured(table: pa.Table, part: str | None = None) -> pa.Table:
    """The warm-up rows (of one part, when `part` is given: a mix's part, or `adapter:NAME`
    a LoRA mix's), relabelled as the measured phase so that the run's own series functions
    read them."""
    mask = pc.equal(table.column("phase"), "warmup").fill_null(False)
    if part is not None:
        column, value = part_column(part)
        values = (table.column(column) if column in table.column_names
                  else pa.nulls(table.num_rows, pa.string()))
        mask = pc.and_(mask, pc.equal(values, value).fill_null(False))
    warm = table.filter(mask)
    index = warm.schema.get_field_index("phase")
    return warm.set_column(index, warm.schema.field(index),
                           pa.array(["measure"] * warm.num_rows, warm.schema.field(index).type))


def baseline(values: np.ndarray, statistic: str) -> float | None:
    """The statistic (`p95`, `mean`) of a warm-up's samples; None without samples."""
    if values.size == 0:
        return None
    if statistic == "mean":
        return float(np.mean(values))
    return float(np.quantile(values, float(statistic[1:]) / 100.0))


def size_rules(rules: Sequence[SloRule], table: pa.Table, warmup_s: float) -> WarmupSizing:
    """`rules` with each warm-up rule's threshold set to factor × the warm-up's statistic."""
    sized: list[SloRule] = []
    notes: list[str] = []
    series: dict[str | None, RunSeries] = {}
    for rule in rules:
        if rule.warmup_factor is None:
            sized.append(rule)
            continue
        if rule.part not in series:
            series[rule.part] = run_series(warmup_rows_as_measured(table, rule.part),
                                           max(warmup_s, 1e-9))
        values = series[rule.part].latency(rule.metric)
        value = baseline(values, rule.statistic)
        metric = metric_named(rule.metric)
        unit = f"{metric.sampled_per}s"
        label = f"{rule.part + ': ' if rule.part else ''}{rule.metric} {rule.text}"
        if value is None:  # its verdict's basis says why (unsized_basis)
            sized.append(rule)
            continue
        threshold = rule.warmup_factor * value
        sized.append(replace(rule, threshold=threshold))
        rough = (f"; rough: fewer than {FEW_WARMUP_SAMPLES} samples"
                 if values.size < FEW_WARMUP_SAMPLES else "")
        notes.append(
            f"{label}: threshold {metric.format_value(threshold)}{metric.suffix} = "
            f"{rule.warmup_factor:g} × the warm-up's {rule.statistic} "
            f"{metric.format_value(value)}{metric.suffix} ({values.size:,} {unit} in "
            f"{warmup_s:g} s of warm-up on this host){rough}")
    return WarmupSizing(tuple(sized), tuple(notes))


def unsized_basis(rule: SloRule, warmup_s: float) -> str:
    """Why a warm-up rule could not be sized, as one sentence: `no warm-up sample of ttft to
    size 'p50 < 3x warmup' (traffic.warmup is 0 s)`."""
    metric = rule.metric + (f" in part {rule.part!r}" if rule.part else "")
    why = ("traffic.warmup is 0 s" if warmup_s <= 0 else
           f"no successful {rule.metric} sample in the {warmup_s:g} s warm-up")
    return f"no warm-up sample of {metric} to size '{rule.text}' ({why})"


def unsized_estimate(why: str, confidence: float = 0.95) -> Estimate:
    """The observation of a rule without a threshold: no value, `why` its warning."""
    return Estimate(None, None, None, confidence, 0, 0.0, "none", (why,))


def unsized_result(rule: SloRule, warmup_s: float, confidence: float = 0.95) -> SloResult:
    """The verdict of a warm-up rule that could not be sized from the run's `warmup_s` of
    warm-up: INCONCLUSIVE, its basis (and its observation's warning) saying why in one
    sentence (`unsized_basis`)."""
    why = unsized_basis(rule, warmup_s)
    return SloResult(rule, unsized_estimate(why, confidence), Verdict.INCONCLUSIVE, why)


def is_unsized(rule: SloRule) -> bool:
    return rule.warmup_factor is not None and math.isnan(rule.threshold)
