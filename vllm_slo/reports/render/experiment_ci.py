"""An experiment's (or a comparison's) junit.xml and summary.md, so a CI gate on an A/B reads
the way it does on a single run (render/junit.py, render/markdown.py).

junit.xml, one testsuite:
- `measurement is valid`: `<error>` with the experiment's invalid reasons (none: passes);
- one testcase per variant and SLO across trials (`[variant] ttft p95 < 2s`): PASS passes,
  FAIL is a `<failure type="SLO FAIL">`, INCONCLUSIVE `<skipped>` (as for a run); every SLO
  testcase carries `<error>` when the measurement is invalid;
- one testcase per compared cell and pair (`b vs a: ttft.p50`): an experiment's cell is
  judged by its design's decision (`changed` in the cell's bad direction — slower latency,
  lower throughput, more errors — is a `<failure type="significant regression">`; `undecided`
  is `<skipped>`; `equivalent` or an improvement passes), with the decision's text as the
  message; a comparison of saved runs (no decision) by the benchstat cell's Holm verdict the same
  way, `not testable` `<skipped>` (`+45.2% [+20.1%, +80.3%] (98.3% CI, p=0.024 n=5+5)`); the
  details name the instances each side ran on, the test and the Holm family. A pair with
  fewer than 2 server instances on a side is `undecided: within-instance` (`<skipped>`, never
  a failure) unless `--within-instance` asked for a within-instance test by name.
The experiment's text goes into `<system-out>`.
"""

from __future__ import annotations

from vllm_slo.analysis.comparison import UNDECIDED_WITHIN_INSTANCE
from vllm_slo.analysis.experiment_summary import (
    CellComparisonEntry,
    ComparisonEntry,
    ExperimentSummary,
)
from vllm_slo.analysis.summary import SloEntry
from vllm_slo.redaction import redact_text
from vllm_slo.reports.render.junit import JunitSuite, _sub
from vllm_slo.reports.render.markdown import cell as md_cell
from vllm_slo.reports.render.markdown import escape
from vllm_slo.reports.render.text import (
    format_observed,
    format_threshold,
    outcome,
    slo_label,
    slo_name,
    verdict_counts,
)
from vllm_slo.scenarios.metrics import lower_is_better

REGRESSION = "significant regression"


def _slos(summary: ExperimentSummary) -> list[tuple[str, SloEntry]]:
    return [(variant.label, slo) for variant in summary.variants for slo in variant.slos]


def _outcome(summary: ExperimentSummary) -> str:
    if summary.kind == "comparison":
        return "COMPARED"
    return outcome(summary.exit_code, len(_slos(summary)))


#: cell states that JUnit shows as skipped: nothing decided (yet) about the cell
SKIPPED_STATES = ("not testable", "undecided", UNDECIDED_WITHIN_INSTANCE, "n/a")


def cell_state(entry: CellComparisonEntry) -> str:
    """regression | improvement | equivalent | no change | undecided | not testable | n/a.

    An experiment's cell with a decision (analysis.sequential, the design's own test and its
    error control over the looks) is judged by it: changed in the cell's bad direction is a
    regression, equivalent within ±compare.effect, undecided. Otherwise (a comparison of
    saved runs, an older folder) by the benchstat cell's Holm verdict and the direction of the
    change (ratio candidate/baseline; the shift where no ratio exists). A pair with < 2
    server instances on a side decides nothing about configs (`undecided: within-instance`,
    comparison.PairBasis) unless --within-instance asked for it."""
    if not entry.decides:
        return UNDECIDED_WITHIN_INSTANCE
    if entry.decision is not None:
        if entry.decision.decision != "changed":
            return entry.decision.decision
        ratio = entry.decision.ratio.value
        return _direction(entry.cell, 0.0 if ratio is None else ratio - 1.0)
    if entry.p_adjusted is None:
        return "n/a"
    if not entry.testable:
        return "not testable"
    if not entry.significant:
        return "no change"
    change = (entry.ratio.value - 1.0 if entry.ratio.value is not None
              else entry.shift.value if entry.shift.value is not None else 0.0)
    return _direction(entry.cell, change)


def _direction(cell: str, change: float) -> str:
    worse = change > 0 if lower_is_better(cell) else change < 0
    return "regression" if worse else "improvement"


def cell_text(entry: CellComparisonEntry) -> str:
    """The decision's text where the design decided the cell, else the benchstat cell."""
    if entry.decision is not None and entry.decides:
        return entry.decision.text
    return entry.display


def _pair_note(comparison: ComparisonEntry) -> str:
    """The pair's instances and its judgement (test, Holm family, unit): the words `gate`
    prints for the same folders."""
    instances = comparison.instances.text() if comparison.instances is not None else ""
    family = ", ".join(c.cell for c in comparison.cells)
    judgement = comparison.judgement or f"Holm over {len(comparison.cells)} cell(s): {family}"
    return "; ".join(part for part in (instances, judgement) if part)


def render_experiment_junit(summary: ExperimentSummary, text: str) -> str:
    junit = JunitSuite(f"vllm-slo.{summary.run_id}", {
        "run_id": summary.run_id, "kind": summary.kind, "outcome": _outcome(summary),
        "exit_code": str(summary.exit_code),
        "variants": ", ".join(v.label for v in summary.variants)})
    invalid = list(summary.invalid_reasons)
    junit.validity_case(invalid)
    for label, slo in _slos(summary):
        junit.slo_case(f"[{label}] {slo_label(slo)}", slo, bool(invalid))
    for pair in summary.comparisons:
        note = _pair_note(pair)
        for entry in pair.cells:
            case = junit.case(f"{entry.candidate} vs {entry.baseline}: {entry.cell}")
            state = cell_state(entry)
            text = cell_text(entry)  # a within-instance cell's text already leads with it
            message = text if text.startswith(state) else f"{state}: {text}"
            details = "\n".join([note, *entry.warnings])
            _sub(_sub(case, "properties"), "property", name="change", value=state)
            if state == "regression":
                junit.mark(case, "failure", details, message=message, type=REGRESSION)
            elif state in SKIPPED_STATES:
                junit.mark(case, "skipped", details, message=message)
    return junit.document(text)


def _row(cells: list[str]) -> str:
    return "| " + " | ".join(cells) + " |"


def render_experiment_markdown(summary: ExperimentSummary) -> str:
    """A short digest: the outcome, each variant's SLO verdicts, the compared cells with
    their change and state, the instances and Holm family, invalid reasons and warnings."""
    verdict = _outcome(summary)
    slos = _slos(summary)
    what = "comparison" if summary.kind == "comparison" else "experiment"
    lines = [f"### vllm-slo · {what} {escape(summary.run_id)}: **{verdict}**", "",
             f"{len(summary.variants)} variant(s) · {verdict_counts([s for _, s in slos])} · "
             f"exit code {summary.exit_code}", ""]
    for reason in summary.invalid_reasons:
        lines.append(f"- **measurement invalid:** {escape(redact_text(reason))}")
    if summary.invalid_reasons:
        lines.append("")
    if slos:
        lines.append(_row(["variant", "verdict", "SLO", "threshold", "observed [95% CI]"]))
        lines.append(_row(["---"] * 5))
        for label, slo in slos:
            name = slo.verdict.value
            lines.append(_row([escape(label), f"**{name}**" if name != "PASS" else name,
                               md_cell(slo_name(slo)), md_cell(format_threshold(slo)),
                               md_cell(format_observed(slo))]))
        lines.append("")
    if summary.comparisons:
        lines.append(_row(["pair", "cell", "change", "state"]))
        lines.append(_row(["---"] * 4))
        for pair in summary.comparisons:
            for entry in pair.cells:
                state = cell_state(entry)
                lines.append(_row([escape(f"{entry.candidate} vs {entry.baseline}"),
                                   md_cell(entry.cell), md_cell(cell_text(entry)),
                                   f"**{state}**" if state == "regression" else state]))
        lines.append("")
        lines += [f"- {escape(f'{p.candidate} vs {p.baseline}: {_pair_note(p)}')}"
                  for p in summary.comparisons]
        lines.append("")
    lines += [f"- warning: {escape(redact_text(w))}" for w in summary.warnings]
    return "\n".join(lines).rstrip("\n") + "\n"
