"""Offline work on saved run folders: `vllm-slo report`, `compare`, `gate` and `plan`.
A single-run folder is one trial; an experiment folder contributes one group per variant."""

from __future__ import annotations

import dataclasses
import json
import math
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from vllm_slo.analysis.comparison import (
    CellComparison,
    Group,
    center_estimate,
    gate,
    instance_scope,
    plan_samples,
    within_instance_warning,
)
from vllm_slo.analysis.experiment_summary import build_comparison_summary
from vllm_slo.analysis.trials import Trial
from vllm_slo.analysis.wording import (
    TEST_TEXT,
    format_estimate,
    format_judged,
    format_level,
    judgement_text,
    trial_values_text,
)
from vllm_slo.outcome import Outcome, verdict_line
from vllm_slo.reports.capacity_report import RenderedCapacity
from vllm_slo.reports.experiment_report import render_experiment, write_experiment
from vllm_slo.reports.render.experiment_text import render_comparison_text
from vllm_slo.reports.render.text import format_trials_needed
from vllm_slo.reports.run_report import RenderedRun, render_run
from vllm_slo.reports.trial_folders import (
    collect_trials,
    read_scenario,
    trial_folders,
)
from vllm_slo.run_folder.file_writes import unique_folder
from vllm_slo.run_folder.folder_kind import TRIAL_KINDS, FolderKind, folder_kind
from vllm_slo.run_folder.run_files import TRIALS_DIR
from vllm_slo.scenarios.errors import ExitCode, ScenarioError
from vllm_slo.scenarios.metrics import parse_cell, split_cell
from vllm_slo.stats.plan_uncertainty import (
    CvEstimate,
    instance_units,
    plan_with_uncertainty,
    pooled_log_cv,
    within_instance_units,
)
from vllm_slo.stats.statistics import Verdict
from vllm_slo.stats.trial_statistics import TrialTest

GATE_IDENTITY = ("model_id", "vllm_version", "host", "workload")


def _check_range(flag: str, value: float, low: float, high: float, *,
                 low_included: bool = False) -> float:
    """A command-line fraction within its range, or exit 2 naming the flag and the range."""
    inside = (low <= value if low_included else low < value) and value < high
    if not inside or math.isnan(value):
        bracket = "[" if low_included else "("
        raise ScenarioError(f"{flag} {value:.4g} ({value:.1%}) is outside {bracket}{low:.0%}, "
                            f"{high:.0%})")
    return value


def check_cells(cells: Sequence[str] | None) -> list[str] | None:
    """`--cells` as given, each a cell the metric vocabulary knows (`ttft.p50`,
    `chat:itl.p99`); a usage error (exit 2) naming the first that is not."""
    if cells is None:
        return None
    for cell in cells:
        try:
            parse_cell(cell)
        except ValueError as error:
            raise ScenarioError(f"--cells {cell!r}: {error}") from None
    return list(cells)


def check_cell_parts(cells: Sequence[str] | None, groups: Sequence[Group]) -> None:
    """A `--cells` cell of one part of a mix (`chat:itl.p99`) names a part some compared run
    has; a usage error (exit 2) naming the parts they have otherwise."""
    known = sorted({part for group in groups for trial in group.trials for part in trial.parts})
    for cell in cells or ():
        part, _ = split_cell(cell)
        if part is not None and part not in known:
            raise ScenarioError(f"--cells {cell!r}: no compared run has a part {part!r} "
                                f"(parts: {', '.join(known) or 'none, not a mix'})")


def _run_folder(run_dir: Path) -> Path:
    if not run_dir.exists():
        raise ScenarioError(f"run folder {run_dir} does not exist")
    if not run_dir.is_dir():
        raise ScenarioError(f"{run_dir} is a file, not a run folder")
    return run_dir


def groups_of(run_dir: Path) -> list[Group]:
    trials = collect_trials(_run_folder(run_dir))
    if not trials:
        raise ScenarioError(f"{run_dir} holds no trial folder with a summary.json under "
                            f"{TRIALS_DIR}/ (an experiment that never finished a trial)")
    if folder_kind(run_dir) not in TRIAL_KINDS:
        return [Group(run_dir.name, tuple(trials))]
    variants = list(dict.fromkeys(t.variant for t in trials))

    def label(variant: str) -> str:
        return f"{run_dir.name}:{variant}" if len(variants) > 1 else run_dir.name

    return [Group(label(v), tuple(t for t in trials if t.variant == v)) for v in variants]


def _inside(path: Path, folder: Path) -> bool:
    path, folder = path.resolve(), folder.resolve()
    return path == folder or folder in path.parents


def _measurement_of(trial: Trial) -> str | None:
    """What a trial measured, independent of the folder it lies in: an imported run's source
    record (sha256 of the file and the record's index), a run's start instant and server; None
    when its provenance says neither (then only the folder identifies it)."""
    provenance = trial.provenance
    bench = provenance.get("vllm_bench")
    if provenance.get("source") == "vllm-bench" and isinstance(bench, dict) and bench.get(
            "sha256"):
        return f"the vllm bench record {bench.get('sha256')}#{bench.get('record')}"
    if provenance.get("started_utc"):
        return (f"the run started {provenance.get('started_utc')} (server "
                f"{json.dumps(provenance.get('server_instance'), sort_keys=True)})")
    return None


def _same_trials(groups: Sequence[Group]) -> list[str]:
    """Trials that appear in more than one compared group: a run given twice, a trial folder
    beside the experiment that holds it, a copy of a run folder, or one vllm bench file
    imported twice."""
    seen: dict[str, tuple[int, Path]] = {}
    repeated = []
    for index, group in enumerate(groups):
        for trial in group.trials:
            folder = trial.run_dir.resolve()
            measured = _measurement_of(trial)
            for key in (str(folder), *((measured,) if measured else ())):
                if key in seen and seen[key][0] != index:
                    other = seen[key][1]
                    repeated.append(
                        f"{trial.run_dir} is in both {groups[seen[key][0]].label} and "
                        f"{group.label}" if other == folder else
                        f"{trial.run_dir} ({group.label}) and {other} "
                        f"({groups[seen[key][0]].label}) hold {key}")
                    break
                seen.setdefault(key, (index, folder))
    return repeated


def compare_saved_runs(run_dirs: Sequence[Path], cells: Sequence[str] | None, alpha: float,
                       out_dir: Path | None = None, runs_root: Path = Path("runs"),
                       force: bool = False, test: TrialTest | None = None,
                       within_instance: bool = False) -> Outcome:
    """Compare saved runs (the first is the baseline) with `test` (default: the baseline
    scenario's `compare.test`): summary.json and report.html through
    the experiment summary builder and page, into `out_dir` (default: a new `compare-<UTC>`
    folder under `runs_root`, never inside a compared run's folder). Runs of different
    workloads or seed sets are refused unless `force` (the check `gate` makes, one function);
    model, vLLM version and host differences are named (they may be what is compared).
    A pair with < 2 server instances on a side reports its estimate and decides nothing
    unless `within_instance` (--within-instance) asks for a within-instance test by name."""
    if len(run_dirs) < 2:
        raise ScenarioError("compare needs at least two run folders (the first is the baseline)")
    _check_range("--alpha", alpha, 0.0, 1.0)
    cells = check_cells(cells)
    from vllm_slo.reports.capacity_report import compare_capacity_folders

    if all(folder_kind(run_dir) is FolderKind.CAPACITY for run_dir in run_dirs):
        text, code = compare_capacity_folders(list(run_dirs), force=force)
        return Outcome(None, code, text)
    groups = [group for run_dir in run_dirs for group in groups_of(run_dir)]
    check_cell_parts(cells, groups)
    repeated = _same_trials(groups)
    if repeated:
        raise ScenarioError("refusing to compare a run with itself (every change would be 0 "
                            "by construction): " + "; ".join(repeated[:3]))
    baseline = groups[0]
    refused: list[str] = []
    noted: list[str] = []
    for candidate in groups[1:]:
        for mismatch in comparability(candidate, baseline):
            where = f"{candidate.label} vs {baseline.label}: {mismatch.text}"
            (refused if mismatch.refuses_compare else noted).append(where)
    if refused and not force:
        raise ScenarioError("refusing to compare runs of different workloads (use --force to "
                            "compare anyway):\n  " + "\n  ".join(refused))
    run_id = f"compare-{datetime.now(timezone.utc).strftime('%Y%m%dT%H%M%SZ')}"
    inside = [p for p in run_dirs if _inside(out_dir or runs_root / run_id, p)]
    if inside:
        raise ScenarioError(f"the comparison's folder {out_dir or runs_root / run_id} would "
                            f"be inside the compared run {inside[0]}; pass --runs-dir "
                            "elsewhere")
    try:
        if out_dir is None:  # two compares in one second: compare-<UTC>, compare-<UTC>-2
            out_dir = unique_folder(runs_root, run_id)
            run_id = out_dir.name
        else:
            out_dir.mkdir(parents=True, exist_ok=True)
    except OSError as error:
        raise ScenarioError(f"cannot create the comparison's folder "
                            f"{out_dir or runs_root / run_id} (--runs-dir): "
                            f"{error.strerror or error}") from None
    summary = build_comparison_summary(groups, [str(p) for p in run_dirs], cells, alpha, run_id,
                                       test, within_instance)
    notes = [f"{'--force: ' if w in refused else ''}{w}" for w in (*refused, *noted)]
    if notes:
        summary = dataclasses.replace(summary, warnings=(*notes, *summary.warnings))
    written = write_experiment(out_dir, summary, groups)
    text = render_comparison_text(summary)
    if written.step_summary_warning is not None:
        text += f"\nwarning: {written.step_summary_warning}"
    return Outcome(out_dir, ExitCode.PASS, f"{text}\n\nreport: {written.report_path}",
                   written.report_path)


BENCH_WORKLOAD_KEYS = ("backend", "num_prompts", "request_rate", "burstiness",
                       "max_concurrency")


def _identity(trial: Trial) -> dict[str, Any]:
    """What must match between a gate's two sides. The workload is the traffic settings the
    run asked for (imported `vllm bench serve` results: the bench settings; their measured
    duration varies run to run)."""
    provenance = trial.provenance
    host = provenance.get("host") or {}
    traffic = trial.scenario.traffic
    bench = provenance.get("vllm_bench")
    workload = ({key: bench.get(key) for key in BENCH_WORKLOAD_KEYS}
                if provenance.get("source") == "vllm-bench" and isinstance(bench, dict) else
                {"profile": traffic.profile, "duration": traffic.duration_s,
                 "arrival": traffic.arrival.model_dump(mode="json", by_alias=True)})
    return {"model_id": provenance.get("model_id"), "vllm_version": provenance.get("vllm_version"),
            "host": {"cpu_model": host.get("cpu_model"), "gpus": host.get("gpus")},
            "workload": workload}


@dataclass(frozen=True, slots=True)
class Mismatch:
    """One way two sides differ. `refuses_compare`: the sides measured different things
    (workload, prompts), which `compare` refuses too; the others (model, vLLM version, host)
    may be the point of a comparison, and only `gate` refuses them."""

    key: str
    text: str
    refuses_compare: bool


def comparability(candidate: Group, baseline: Group) -> list[Mismatch]:
    """Why two sides are not comparable (empty: they are), the one check `gate` and `compare`
    make. Model, vLLM version, host and workload must be one value over every trial of both
    sides. Seeds may differ from trial to trial, but both sides must have used the same set of
    seeds (the same prompt sequences). Different scenario names are noted, never refused."""
    mismatches = []
    identities = [_identity(t) for t in (*candidate.trials, *baseline.trials)]
    for key in GATE_IDENTITY:
        values = {json.dumps(identity[key], sort_keys=True) for identity in identities}
        if len(values) > 1:
            mismatches.append(Mismatch(key, f"{key} differs: {' vs '.join(sorted(values))}",
                                       key == "workload"))
    seeds = [sorted({t.scenario.traffic.seed for t in side.trials})
             for side in (candidate, baseline)]
    if seeds[0] != seeds[1]:
        mismatches.append(Mismatch(
            "seeds", f"seeds differ: candidate used {seeds[0]}, baseline {seeds[1]} (each side "
            f"may use several seeds, but the same set)", True))
    names = [sorted({t.scenario.name for t in side.trials}) for side in (candidate, baseline)]
    if names[0] != names[1]:
        mismatches.append(Mismatch(
            "scenario", f"different scenarios: candidate {', '.join(names[0])}, baseline "
            f"{', '.join(names[1])}", False))
    return mismatches


def gate_mismatches(candidate: Group, baseline: Group) -> list[str]:
    """What `gate` refuses without --force: every difference but a scenario's name."""
    return [m.text for m in comparability(candidate, baseline) if m.key != "scenario"]


def _single_group(run_dir: Path, role: str) -> Group:
    groups = groups_of(run_dir)
    if len(groups) != 1:
        raise ScenarioError(f"{role} {run_dir} holds {len(groups)} variants; gate one variant "
                            f"against one (run the variants as separate scenarios)")
    return groups[0]


def gate_saved_runs(candidate_dir: Path, baseline_dir: Path, margin: float,
                    cells: Sequence[str] | None, force: bool, alpha: float = 0.05,
                    test: TrialTest | None = None, within_instance: bool = False
                    ) -> Outcome:
    """The release gate, decided from the judgement `compare` makes of the same folders
    (comparison.compare_pair: the test — `test`, default the baseline's compare.test —, Holm
    over the cells, instance means; < 2 instances on a side: INCONCLUSIVE, never FAIL, unless
    `within_instance`)."""
    _check_range("--margin", margin, 0.0, 1.0, low_included=True)
    _check_range("--alpha", alpha, 0.0, 1.0)
    from vllm_slo.reports.capacity_report import gate_capacity_folders

    if folder_kind(candidate_dir) is folder_kind(baseline_dir) is FolderKind.CAPACITY:
        text, code = gate_capacity_folders(candidate_dir, baseline_dir, margin, force)
        return Outcome(None, code, text)
    cells = check_cells(cells)
    candidate = _single_group(candidate_dir, "candidate")
    baseline = _single_group(baseline_dir, "baseline")
    check_cell_parts(cells, [candidate, baseline])
    repeated = _same_trials([candidate, baseline])
    if repeated:
        raise ScenarioError("refusing to gate a run against itself: " + "; ".join(repeated[:3]))
    mismatches = comparability(candidate, baseline)
    refused = [m.text for m in mismatches if m.key != "scenario"]
    if refused and not force:
        raise ScenarioError("refusing to gate runs that are not comparable (use --force to "
                            "gate anyway):\n  " + "\n  ".join(refused))
    cells = list(cells or baseline.trials[0].scenario.compare.cells)
    test = test or baseline.trials[0].scenario.compare.test
    basis, results = gate(candidate, baseline, cells, margin, alpha, test, within_instance)
    level = format_level(1.0 - alpha)
    judged = [CellComparison(r.cell, baseline.label, candidate.label, r.comparison,
                             r.decides) for r in results if r.comparison is not None]
    lines = [f"gate: {candidate.label} vs baseline {baseline.label}, margin {margin:.1%} "
             f"(PASS when the {level} CI of the ratio stays on the good side of 1 ± margin; "
             f"FAIL when its Holm-consistent CI, the one compare shows, lies wholly beyond)",
             f"judgement (as compare): {judgement_text(basis, judged, cells)}",
             f"instances: {instance_scope(baseline, candidate).text()}"]
    for item in results:
        ratio = item.result.ratio
        shown = ("n/a" if ratio.value is None else
                 f"{ratio.value:.3f} [{ratio.ci_low:.3f}, {ratio.ci_high:.3f}] "
                 f"({format_level(ratio.confidence)} CI)"
                 if ratio.ci_low is not None else f"{ratio.value:.3f}")
        notes = list(item.result.warnings)
        if item.not_after_holm:
            notes.append(f"beyond the margin at {level}, but not after Holm over "
                         f"{item.family_size} cells")
        elif item.holm_factor > 1:
            notes.append(f"beyond the margin after Holm over {item.family_size} cells")
        if item.comparison is not None:
            notes.append("compare: " + format_judged(CellComparison(
                item.cell, baseline.label, candidate.label, item.comparison, item.decides)))
        lines.append(f"{item.result.verdict.value:<12} {item.cell:<24} ratio {shown}"
                     f"{'  (' + '; '.join(notes) + ')' if notes else ''}")
    lines += [f"warning (--force): {m}" for m in refused]
    lines += [f"note: {m.text}" for m in mismatches if m.key == "scenario"]
    warning = within_instance_warning(baseline, candidate)
    if warning:
        lines.append(f"warning: {warning}")
    verdicts = {item.result.verdict for item in results}
    code = (ExitCode.SLO_FAILED if Verdict.FAIL in verdicts else
            ExitCode.INCONCLUSIVE if Verdict.INCONCLUSIVE in verdicts else ExitCode.PASS)
    lines.append(verdict_line(code))
    return Outcome(None, code, "\n".join(lines))


def report_saved_run(run_dir: Path) -> Outcome:
    """Rebuild every output of a folder from the folder alone, by its kind: a tune's and an
    experiment's trials are re-rendered first, then the folder's own outputs."""
    _run_folder(run_dir)
    kind = folder_kind(run_dir)
    if kind is FolderKind.CAPACITY:
        from vllm_slo.reports.capacity_report import render_capacity

        capacity = render_capacity(run_dir)
        return Outcome(run_dir, capacity.exit_code,
                       f"{capacity.text}\n\ncapacity report: {capacity.report_path}",
                       capacity.report_path)
    if kind is FolderKind.EXPERIMENT:
        read_scenario(run_dir)
    for trial_dir, _, _ in trial_folders(run_dir) if kind in TRIAL_KINDS else []:
        render_run(trial_dir)  # reads a damaged trial as far as its data allow
    if kind is FolderKind.TUNE:
        from vllm_slo.tuner import report_tune

        rendered: RenderedRun | RenderedCapacity = report_tune(run_dir, say=lambda text: None)
        label = "tune report"
    else:
        rendered = render_experiment(run_dir) if kind is FolderKind.EXPERIMENT \
            else render_run(run_dir)
        label = "report"
    return Outcome(run_dir, rendered.exit_code,
                   f"{rendered.text}\n\n{label}: {rendered.report_path}", rendered.report_path)


def plan_saved_run(run_dir: Path, effect: float, alpha: float,
                   margin: float = 0.05) -> Outcome:
    """`vllm-slo plan`: exit 0 with a plan, 3 (INCONCLUSIVE) when the folder cannot estimate
    the restart-to-restart variation (no variant with >= 2 server instances)."""
    return _plan(run_dir, effect, alpha, margin)


def plan_from_saved_run(run_dir: Path, effect: float, alpha: float,
                        margin: float = 0.05) -> str:
    return _plan(run_dir, effect, alpha, margin).text


def _cv_text(estimate: CvEstimate) -> str:
    """`CV 24.0% [10.7%, > 1000%] (95% chi-square interval; 2 instance means, df 1)`."""
    def pct(value: float | None) -> str:
        if value is None:
            return "n/a"
        return f"{value:.1%}" if value < 1 else f"{value:.0%}" if value < 10 else "> 1000%"

    if estimate.cv is None:
        return f"CV n/a ({estimate.n_units} {estimate.units}, df 0)"
    return (f"CV {pct(estimate.cv)} [{pct(estimate.ci_low)}, {pct(estimate.ci_high)}] "
            f"({format_level(estimate.confidence)} chi-square interval; {estimate.n_units} "
            f"{estimate.units}, df {estimate.df})")


def _plan(run_dir: Path, effect: float, alpha: float, margin: float) -> Outcome:
    """The CV of each compared cell across server instances (pooled log variance over the
    variants, `stats.plan_uncertainty`) with its chi-square interval, and the trials per
    variant at the estimate and at the upper bound, each cell at Holm's first-step level
    over the family `compare` tests (the scenario's compare.cells)."""
    _check_range("--effect", effect, -1.0, 100.0)
    if effect == 0:
        raise ScenarioError("--effect 0% asks for a change of nothing: give the smallest change "
                            "worth detecting, e.g. 10%")
    _check_range("--alpha", alpha, 0.0, 1.0)
    _check_range("--margin", margin, 0.0, 1.0)
    groups = groups_of(run_dir)
    cells = list(groups[0].trials[0].scenario.compare.cells)
    test = groups[0].trials[0].scenario.compare.test
    family = len(cells)
    plans = []
    lower_bounds = []
    for cell in cells:
        samples = [plan_samples(group, cell) for group in groups]
        units, unit_name = instance_units(samples)
        estimate = pooled_log_cv(units, unit_name)
        if estimate.cv is not None:
            plans.append((cell, plan_with_uncertainty(estimate, effect, alpha, family, test,
                                                      margin)))
        else:
            within = pooled_log_cv(within_instance_units(samples), "trials on one instance")
            if within.cv is not None:
                lower_bounds.append(f"  {cell:<24} {_cv_text(within)}")
    if not plans:
        code = ExitCode.INCONCLUSIVE
        counts = ", ".join(f"{g.label}: {g.valid_trials} valid trial(s) on {g.instances} "
                           f"instance(s)" for g in groups)
        lines = [f"{run_dir} cannot estimate the restart-to-restart variation: it needs >= 2 "
                 f"valid trials on distinct server instances in a variant ({counts}); run a "
                 f"pilot with trials >= 2 (e.g. trials=5), each on a fresh server"]
        if lower_bounds:
            lines += ["trial-to-trial variation within one server instance (a lower bound on "
                      "the restart-to-restart variation, not a basis for a plan):",
                      *lower_bounds]
        lines.append(verdict_line(code))
        return Outcome(run_dir, code, "\n".join(lines))
    level = alpha / family
    lines = [f"trials per variant to detect a {effect:.0%} change at alpha {alpha:g} with 80% "
             f"power ({TEST_TEXT[test]}, the scenario's compare.test)",
             f"  Holm family: each cell at alpha {alpha:g}/{family} = {level:.3g}, the level "
             f"a changed cell must reach when the other cells are unchanged (compare tests "
             f"the scenario's {family} compare.cells per pair; fewer with compare --cells)",
             f"  CV: across distinct server instances (their trials' geometric mean where an "
             f"instance ran several), pooled on the log scale over {len(groups)} variant(s), "
             f"with its chi-square interval; plan for the upper bound to be safe"]
    for cell, plan in plans:
        assert plan.at_estimate is not None and plan.at_upper is not None
        lines.append(f"  {cell:<24} {_cv_text(plan.cv)} -> "
                     f"{format_trials_needed(plan.at_estimate.trials_per_variant)} trials per "
                     f"variant at the estimate, "
                     f"{format_trials_needed(plan.at_upper.trials_per_variant)} at the upper "
                     f"bound")
        lines.append(f"    a gate at margin {margin:.0%} passes an unchanged candidate 80% of "
                     f"the time with {format_trials_needed(plan.gate_at_estimate)} trials per "
                     f"side ({format_trials_needed(plan.gate_at_upper)} at the upper bound)")
        notes = dict.fromkeys((*plan.cv.warnings, *plan.at_estimate.warnings,
                               *plan.at_upper.warnings))
        lines += [f"    note: {w}" for w in notes]
        for group in groups:  # what the variation was measured from
            center = center_estimate(group, cell)
            shown = format_estimate(cell, center.value, center.ci_low, center.ci_high)
            values = [float(v) for v in group.values(cell)]
            lines.append(f"    {group.label}: {shown} {trial_values_text(cell, values)}"
                         f" ({group.instances} instance(s))")
    return Outcome(run_dir, ExitCode.PASS, "\n".join(lines))
