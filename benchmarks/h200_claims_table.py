"""The H200 claims table (issue 26): each claim's experiment folder decided by its design.

    python benchmarks/h200_claims_table.py [results/h200/claims.sources.json]

A tune folder (tune.json) is a claim too: the recommendation's gain over the scenario's own
args (vLLM's defaults in h200-tune), as the tune states it (`tune_row`); so is a capacity
folder of two variants (`variants/<name>/capacity.json`): the second's capacity over the
first's, as `vllm-slo capacity` states it (`capacity_row`).

The sources file lists the claims: the guide's statement, the experiment folder (its
scenario.yaml and trials/*/summary.json, committed; no raw samples), the model and its
parameter count, the GPU minutes it cost. For each claim this reads every trial's value of each
compared cell from its summary.json (a trial that was invalid counts as missing, as in the
experiment's own looks), builds the scenario's design (`trials`, `compare.cells`, alpha,
effect, test: `experiment_design.sequential_design`) and decides each cell with
`sequential.decide_cells` at the trials run per arm. It writes claims.json and claims.md (the
table results/h200/README.md shows) beside the sources file and prints the table.
"""

from __future__ import annotations

import argparse
import json
import math
from pathlib import Path
from typing import Any

from vllm_slo.analysis.capacity import CapacityDocument
from vllm_slo.analysis.capacity_comparison import capacity_ratio
from vllm_slo.analysis.comparison import reachability_warning
from vllm_slo.analysis.experiment_design import sequential_design
from vllm_slo.analysis.quantised_cells import (
    Quantisation,
    counts_quantisation,
    decision_over_box,
    pair_bias_log,
)
from vllm_slo.analysis.tune_summary import OBJECTIVE_CELLS
from vllm_slo.analysis.wording import format_ratio
from vllm_slo.reports.capacity_report import capacity_documents
from vllm_slo.reports.experiment_report import read_stopping
from vllm_slo.reports.trial_folders import read_scenario, trial_folders
from vllm_slo.run_folder.run_files import SUMMARY_FILE, TUNE_SUMMARY_FILE, VARIANTS_DIR
from vllm_slo.scenarios.metrics import MetricKind, parse_cell
from vllm_slo.scenarios.slo import part_column
from vllm_slo.stats.capacity_search import SearchStatus
from vllm_slo.stats.sequential import decide_cells

REPO = Path(__file__).resolve().parent.parent
DEFAULT_SOURCES = REPO / "results" / "h200" / "claims.sources.json"


def part_entry(document: dict[str, Any], part: str) -> dict[str, Any]:
    """A part's block of a run's summary.json: a mix's profile under `by_profile`, a LoRA
    adapter (`adapter:NAME`) under `by_adapter`."""
    column, name = part_column(part)  # summary.json keeps them as by_profile / by_adapter
    key = f"by_{column}"
    parts = document.get(key) or {}
    if name not in parts:
        raise ValueError(f"part {part!r}: the run's summary.json has no {key}.{name} "
                         f"(it has {sorted(parts) or 'none'})")
    entry: dict[str, Any] = parts[name]
    return entry


def summary_cell_value(document: dict[str, Any], cell: str) -> float:
    """One compared cell's value in a run's summary.json (NaN where the run has none); a
    part's cell (`chat:itl.p99`) from the part's block, which holds its latencies and its
    output throughput (the same values the experiment computed from the part's rows)."""
    parsed = parse_cell(cell)
    metric = parsed.metric
    if parsed.part is None:
        scope, rates = document, document["throughput"]
    else:
        scope = part_entry(document, parsed.part)
        rates = {"output_tokens_per_s": scope["output_tokens_per_s"]}
    if metric.kind is MetricKind.LATENCY:
        block = scope["metrics"][metric.name]
        estimate = (block["mean"] if parsed.statistic == "mean"
                    else block["percentiles"][parsed.statistic])
    elif metric.kind is MetricKind.RATE and metric.summary_field in rates:
        estimate = rates[metric.summary_field]
    elif metric.kind is MetricKind.FRACTION and parsed.part is None:
        estimate = document["error_rate"]
    else:
        raise ValueError(f"{cell}: a part's summary holds its latencies and output "
                         "throughput only; this cell needs the run's samples")
    value = estimate["value"]
    return math.nan if value is None else float(value)


def completed_requests(document: dict[str, Any]) -> int | None:
    """The requests a run's request throughput counted: its rate over its span."""
    rates = document.get("throughput") or {}
    value = (rates.get("requests_per_s") or {}).get("value")
    span = rates.get("rate_span_s")
    return None if value is None or not span else round(float(value) * float(span))


def quantised_sides(scenario: Any, cell: str, labels: tuple[str, str],
                    counts: tuple[list[int | None], list[int | None]]) -> list[Quantisation]:
    """The quantised sides of a whole-run rate cell (`quantised_cells.counts_quantisation`):
    a closed loop whose valid trials completed identical request counts."""
    arrival = scenario.traffic.arrival
    parsed = parse_cell(cell)
    if (parsed.metric.kind is not MetricKind.RATE or parsed.part is not None
            or arrival.kind != "closed"):
        return []
    found = [counts_quantisation(cell, label, [c for c in side if c is not None],
                                 arrival.users) for label, side in zip(labels, counts,
                                                                      strict=True)]
    return [q for q in found if q is not None]


def valid_count(trial_values: list[float]) -> int:
    """Trials with a value (an invalid or interrupted trial is NaN: missing at its look)."""
    return sum(not math.isnan(value) for value in trial_values)


def versus_claim(claimed: float | None, ratio: dict[str, Any] | None) -> str | None:
    """Where a gain's interval stands against a claimed ratio (None: no claimed ratio)."""
    if claimed is None:
        return None
    if ratio is None:
        return "below (the defaults are the best)"
    if ratio["ci_high"] is not None and ratio["ci_high"] < claimed:
        return "below"
    if ratio["ci_low"] is not None and ratio["ci_low"] >= claimed:
        return "reached"
    return "undecided"


def tune_row(source: dict[str, Any], folder: Path) -> dict[str, Any]:
    """A `vllm-slo tune` folder's claim ("N x over defaults"): the recommendation's gain over
    the scenario's own args as tune.json states it (best / as given on the objective's
    per-trial values with tune.json's `test`, Holm within the ranking when the defaults are
    eligible): `changed` when significant, `undecided` otherwise, `no gain` when the as-given
    args are themselves the best. With the claim's own size (`claimed_ratio` in the source,
    e.g. 2.0 for "2-5x") the row also says where the interval stands against it: `below` when
    its upper end is under the claimed ratio, `reached` when its lower end is at or above it,
    else `undecided`. An interrupted tune says so. The tune's warnings (too few trials,
    machines, the winner's curse) go with it."""
    tune = json.loads((folder / TUNE_SUMMARY_FILE).read_text())
    gain = tune["gain_over_given"]
    if gain is None:
        raise SystemExit(f"{folder}: the tune states no gain over the scenario's own args "
                         "(tune.baseline off, or they ran no valid trial)")
    by_name = {c["name"]: c for c in tune["candidates"]}
    given, best = by_name[gain["given"]], by_name[gain["best"]]
    ratio = gain["ratio"] or {"value": 1.0, "ci_low": None, "ci_high": None,
                              "confidence": 1 - tune["alpha"]}
    verdict = ("no gain (defaults best)" if gain["ratio"] is None else
               "changed" if gain["significant"] else "undecided")
    claimed = source.get("claimed_ratio")
    changed = " ".join(f"{k}={v}" for k, v in best["changed"].items()) or "as given"
    cell = OBJECTIVE_CELLS[tune["objective"]]
    return {
        "claim": source["claim"], "statement": source["statement"], "scenario": "tune",
        "folder": source["folder"], "model": source["model"],
        "model_parameters": source["model_parameters"], "vllm_version": source["vllm_version"],
        "compared": f"{best['name']} ({changed}) vs {given['name']} (as given)",
        "trials_per_arm": tune["trials_per_candidate"],
        "design": {"test": tune.get("test", "mann-whitney") + ", " + (
                       "Holm within the tune's ranking" if gain["holm"]
                       else "one comparison (defaults not eligible)"),
                   "alpha": tune["alpha"], "candidates": len(tune["candidates"]),
                   "interrupted": tune["interrupted"]},
        "gpu_minutes": source["gpu_minutes"],
        "cells": [{"cell": cell, "verdict": verdict, "ratio": ratio["value"],
                   "ratio_ci": [ratio["ci_low"], ratio["ci_high"]],
                   "ratio_confidence": ratio["confidence"],
                   # p against alpha: Holm-adjusted within the ranking when the tune applied
                   # Holm (an adjusted p is compared with alpha itself)
                   "p": gain["p_value"], "level": tune["alpha"],
                   "p_is_holm_adjusted": bool(gain["holm"]),
                   "baseline_trials": given["objective_values"],
                   "candidate_trials": best["objective_values"],
                   "valid_trials": [len(given["objective_values"]),
                                    len(best["objective_values"])],
                   "claimed_ratio": claimed,
                   "versus_claim": versus_claim(claimed, gain["ratio"]),
                   "warnings": tune["warnings"]}],
        "command": source["command"],
    }


def capacity_side(document: CapacityDocument) -> dict[str, Any]:
    """One variant's search as the row keeps it: its capacity, interval, status, limiting SLO
    and each step's load asked and outcome."""
    estimate = document.capacity
    return {"variant": document.variant, "unit": document.unit, "value": estimate.value,
            "interval": [estimate.low, estimate.high], "confidence": estimate.confidence,
            "status": document.status.value, "limiting_slo": document.limiting_slo,
            "steps": [[step.load, step.outcome] for step in document.steps]}


def capacity_row(source: dict[str, Any], folder: Path,
                 documents: dict[str, CapacityDocument]) -> dict[str, Any]:
    """A capacity folder's two variants' searches (`documents`, in the scenario's order): the
    second's capacity over the first's with the interval `capacity_comparison.capacity_ratio`
    gives (each search's interval at its confidence, joined by a union bound) and its decision
    (higher / lower / equivalent within 10% / undecided). With `claimed_ratio` in the source
    the row says where the ratio's interval stands against the claim (`versus_claim`)."""
    if len(documents) != 2:
        raise SystemExit(f"{folder}: a capacity claim compares two variants "
                         f"(the folder has {len(documents)})")
    (base_name, base), (cand_name, cand) = documents.items()
    pair = (base, cand)
    ratio = capacity_ratio(base.capacity, cand.capacity)
    claimed = source.get("claimed_ratio")
    searches = [len(doc.trials) for doc in pair]
    return {
        "claim": source["claim"], "statement": source["statement"],
        "scenario": base.scenario_name, "folder": source["folder"], "model": source["model"],
        "model_parameters": source["model_parameters"], "vllm_version": source["vllm_version"],
        "compared": f"{cand_name} vs {base_name}", "trials_per_arm": min(searches),
        "design": {"test": "capacity search per variant (a bracket of step verdicts); ratio "
                           "interval [candidate low / baseline high, candidate high / baseline "
                           "low] by a union bound",
                   "tolerance": base.tolerance,
                   "step_confidence": base.scenario["capacity"].get("step_confidence"),
                   "interrupted": any(doc.status is SearchStatus.RUNNING for doc in pair)},
        "gpu_minutes": source["gpu_minutes"],
        "cells": [{"cell": f"capacity ({base.unit})", "verdict": ratio.change.value,
                   "ratio": ratio.value, "ratio_ci": [ratio.low, ratio.high],
                   "ratio_confidence": ratio.confidence,
                   "searches": [capacity_side(doc) for doc in pair],
                   "valid_trials": searches, "claimed_ratio": claimed,
                   "versus_claim": versus_claim(claimed, None if ratio.value is None else {
                       "ci_low": ratio.low, "ci_high": ratio.high}),
                   "warnings": [f"{doc.variant}: {doc.reason}" for doc in pair
                                if doc.status is not SearchStatus.BRACKETED]}],
        "command": source["command"],
    }


#: what the suite's experiments compared with before `compare.test` existed (until 2026-12-03)
RANK_TEST = "mann-whitney"
#: an experiment warning about one test's reach (`comparison.reachability_warning`)
_REACH = "can never reach p<"


def experiment_summary(folder: Path) -> dict[str, Any]:
    path = folder / SUMMARY_FILE
    return json.loads(path.read_text()) if path.is_file() else {}


def run_test(summary: dict[str, Any]) -> str:
    """The test the experiment itself decided with, from its summary.json: its cells' `test`,
    else its scenario's `compare.test`, else the rank test (folders written before
    `compare.test` existed compared with it)."""
    for comparison in summary.get("comparisons") or []:
        for cell in comparison.get("cells") or []:
            if isinstance(cell.get("test"), str):
                return str(cell["test"])
    test = ((summary.get("scenario") or {}).get("compare") or {}).get("test")
    return str(test) if isinstance(test, str) else RANK_TEST


def experiment_warnings(summary: dict[str, Any], decided_with: str, cells: int, alpha: float,
                        per_arm: int) -> list[str]:
    """What the experiment's own summary.json warned of (invalid trials excluded, trials on
    two machines, ...), its warnings about a test's reach replaced by the one for the test
    this table decides with (Welch on logs reaches any p with >= 2 trials a side)."""
    kept = [w for w in summary.get("warnings", []) if _REACH not in w]
    if decided_with == RANK_TEST:
        reach = reachability_warning(per_arm, per_arm, cells, alpha)
        kept += [reach] if reach else []
    return kept


def claim_row(source: dict[str, Any], root: Path) -> dict[str, Any]:
    folder = root / source["folder"]
    if (folder / TUNE_SUMMARY_FILE).is_file():
        return tune_row(source, folder)
    if (folder / VARIANTS_DIR).is_dir():
        documents = capacity_documents(folder)  # none: an experiment's variants, not searches
        if documents:
            return capacity_row(source, folder, documents)
    scenario = read_scenario(folder)
    stopping = read_stopping(folder)
    design = sequential_design(scenario)
    if design is None:
        raise SystemExit(f"{folder}: no variants to compare")
    baseline, candidate = list(scenario.variants)[:2]
    cells = list(scenario.compare.cells)
    values: dict[str, tuple[list[float], list[float]]] = {c: ([], []) for c in cells}
    counts: tuple[list[int | None], list[int | None]] = ([], [])
    for trial, variant, _ in trial_folders(folder):
        document = json.loads((trial / SUMMARY_FILE).read_text())
        valid = not document.get("invalid_reasons")
        side = 0 if variant == baseline else 1 if variant == candidate else None
        if side is None:
            continue
        counts[side].append(completed_requests(document) if valid else None)
        for cell in cells:
            values[cell][side].append(summary_cell_value(document, cell) if valid else math.nan)
    per_arm = min(min(len(a), len(b)) for a, b in values.values())
    decisions = decide_cells(design, per_arm, {c: (a[:per_arm], b[:per_arm])
                                               for c, (a, b) in values.items()})
    summary = experiment_summary(folder)
    ran_with = run_test(summary)
    counts = (counts[0][:per_arm], counts[1][:per_arm])
    row: dict[str, Any] = {
        "claim": source["claim"], "statement": source["statement"],
        "scenario": scenario.name, "folder": source["folder"], "model": source["model"],
        "model_parameters": source["model_parameters"], "vllm_version": source["vllm_version"],
        "compared": f"{candidate} vs {baseline}", "trials_per_arm": per_arm,
        "design": {"min_trials": design.min_trials, "max_trials": design.max_trials,
                   "alpha": design.alpha, "effect": design.effect, "test": design.test,
                   "cells": design.cells,
                   "interrupted": stopping is not None and stopping.reason == "interrupted"},
        "test_run_with": ran_with,
        "test_changed_after_data": ran_with != design.test,
        "warnings": experiment_warnings(summary, design.test, design.cells, design.alpha,
                                        per_arm),
        "gpu_minutes": source["gpu_minutes"],
        "cells": [{"cell": d.cell, "verdict": d.decision, "ratio": d.ratio.value,
                   "ratio_ci": [d.ratio.ci_low, d.ratio.ci_high],
                   "ratio_confidence": d.ratio.confidence,
                   # the deciding look's own p against the boundary it was held to (its
                   # Holm step's): p < level exactly when that look decided the cell
                   "p": d.p_shown, "level": d.level_shown, "p_is_holm_adjusted": False,
                   "p_at_trials": d.shown_trials,
                   "p_change_holm": d.p_change, "p_equivalence_holm": d.p_equivalence,
                   "baseline_trials": values[d.cell][0][:per_arm],
                   "candidate_trials": values[d.cell][1][:per_arm],
                   "valid_trials": [valid_count(values[d.cell][0][:per_arm]),
                                    valid_count(values[d.cell][1][:per_arm])],
                   "warnings": list(d.warnings)} for d in decisions],
        "command": source["command"],
    }
    for cell, decision in zip(row["cells"], decisions, strict=True):
        sides = quantised_sides(scenario, cell["cell"], (baseline, candidate), counts)
        boxed = decision_over_box(decision, values[decision.cell][0][:per_arm],
                                  values[decision.cell][1][:per_arm], pair_bias_log(sides),
                                  design.test, design.effect)
        if boxed is None:
            continue
        cell.update({"quantised": [q.text() for q in sides],
                     "ratio_ci_phase_box": [boxed.box.ci_low, boxed.box.ci_high],
                     "verdict": boxed.decision.decision,
                     "warnings": list(boxed.decision.warnings)})
        if boxed.without_box:
            cell["verdict_without_box"] = boxed.without_box
    return row


def markdown(rows: list[dict[str, Any]]) -> str:
    lines = ["| claim | model | compared | cell | verdict | ratio [interval] | rounds per arm "
             "| GPU min | command |", "|---|---|---|---|---|---|---|---|---|"]
    for row in rows:
        for cell in row["cells"]:
            low, high = cell["ratio_ci"]
            ratio = ("n/a" if cell["ratio"] is None
                     else format_ratio(cell["ratio"], low, high)
                     + ("" if low is None else f" ({cell['ratio_confidence']:.1%})"))
            trials = str(row["trials_per_arm"])
            if min(cell["valid_trials"]) < row["trials_per_arm"]:
                trials += " ({}+{} valid)".format(*cell["valid_trials"])
            verdict = f"**{cell['verdict']}**"
            if row.get("test_changed_after_data"):
                verdict += (f" (the run decided with {row['test_run_with']}; decided here with "
                            f"{row['design']['test']})")
            box = cell.get("ratio_ci_phase_box")
            if box:
                verdict += ("; quantised (closed-loop waves): "
                            f"{format_ratio(cell['ratio'], box[0], box[1])} over the phase bias")
                if cell.get("verdict_without_box"):
                    verdict += f", {cell['verdict_without_box']} without it"
            if cell.get("versus_claim") is not None:
                verdict += f"; claimed ×{cell['claimed_ratio']:g}: {cell['versus_claim']}"
            if row["design"].get("interrupted") and row["scenario"] == "tune":
                verdict += " (tune unfinished)"
            elif row["design"].get("interrupted") and cell["verdict"] == "undecided":
                verdict += " (run interrupted before its next look)"
            if any(w.startswith("no test at") for w in cell["warnings"]):
                verdict += " (no test: {}+{} valid trials, a look needs {} an arm)".format(
                    *cell["valid_trials"], row["design"]["min_trials"])
            lines.append(
                f"| {row['claim']} | {row['model']} ({row['model_parameters'] / 1e9:.1f} B) "
                f"| {row['compared']} | {cell['cell']} | {verdict} | {ratio} "
                f"| {trials} | {row['gpu_minutes']} | `{row['command']}` |")
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("sources", type=Path, nargs="?", default=DEFAULT_SOURCES)
    options = parser.parse_args()
    sources = json.loads(options.sources.read_text())
    rows = [claim_row(source, REPO) for source in sources["claims"]]
    out = options.sources.parent
    (out / "claims.json").write_text(json.dumps({"claims": rows}, indent=1) + "\n")
    table = markdown(rows)
    (out / "claims.md").write_text(table)
    print(table, end="")


if __name__ == "__main__":
    main()
