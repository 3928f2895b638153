"""An experiment's (or a comparison's) junit.xml and summary.md, so a CI gate on an A/B reads
the way it does on a single run (render/junit.py, render/markdown.py).

junit.xml, one testsuite:
- `measurement is valid`: `<error>` with the experiment's invalid reasons (none: passes);
- one testcase per variant and SLO across trials (`[variant] ttft p95 < 2s`): PASS passes,
  FAIL is a `<failure type="SLO FAIL">`, INCONCLUSIVE `<skipped>` (as for a run); every SLO
  testcase carries `<error>` when the measurement is invalid;
- one testcase per compared cell and pair (`b vs a: ttft.p50`): a significant change in the
  cell's bad direction (slower latency, lower throughput, more errors) is a
  `<failure type="significant regression">`; a cell these trial counts can never decide
  (`not testable`) is `<skipped>`; no significant change, or an improvement, passes. The
  message is the benchstat cell (`+45.2% [+20.1%, +80.3%] (98.3% CI, p=0.024 n=5+5)`), with the
  instances each side ran on and the Holm family.
The experiment's text goes into `<system-out>`.
"""

from __future__ import annotations

import xml.etree.ElementTree as ET

from vllm_slo.reports.analysis.experiment_summary import (
    CellComparisonEntry,
    ComparisonEntry,
    ExperimentSummary,
)
from vllm_slo.reports.analysis.summary import SloEntry
from vllm_slo.reports.redaction import redact_text
from vllm_slo.reports.render.junit import _clean, _sub
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


def cell_state(entry: CellComparisonEntry) -> str:
    """regression | improvement | no change | not testable | n/a, from the Holm verdict and
    the direction of the change (ratio candidate/baseline; the shift where no ratio exists)."""
    if entry.p_adjusted is None:
        return "n/a"
    if not entry.testable:
        return "not testable"
    if not entry.significant:
        return "no change"
    change = (entry.ratio.value - 1.0 if entry.ratio.value is not None
              else entry.shift.value if entry.shift.value is not None else 0.0)
    worse = change > 0 if lower_is_better(entry.cell) else change < 0
    return "regression" if worse else "improvement"


def _pair_note(comparison: ComparisonEntry) -> str:
    instances = comparison.instances.text() if comparison.instances is not None else ""
    family = ", ".join(c.cell for c in comparison.cells)
    return "; ".join(part for part in (instances, f"Holm over {len(comparison.cells)} "
                                       f"cell(s): {family}") if part)


def render_experiment_junit(summary: ExperimentSummary, text: str) -> str:
    suite_name = f"vllm-slo.{summary.run_id}"
    invalid = list(summary.invalid_reasons)
    counts = {"tests": 0, "failures": 0, "errors": 0, "skipped": 0}
    root = ET.Element("testsuites", {"name": "vllm-slo"})
    suite = ET.SubElement(root, "testsuite", {"name": _clean(suite_name)})
    properties = ET.SubElement(suite, "properties")
    for name, value in (("run_id", summary.run_id), ("kind", summary.kind),
                        ("outcome", _outcome(summary)), ("exit_code", str(summary.exit_code)),
                        ("variants", ", ".join(v.label for v in summary.variants))):
        _sub(properties, "property", name=name, value=value)
    validity = _sub(suite, "testcase", classname=suite_name, name="measurement is valid",
                    time="0")
    counts["tests"] += 1
    if invalid:
        _sub(validity, "error", "\n".join(invalid), message="; ".join(invalid),
             type="invalid measurement")
        counts["errors"] += 1
    for label, slo in _slos(summary):
        case = _sub(suite, "testcase", classname=suite_name, name=f"[{label}] {slo_label(slo)}",
                    time="0")
        counts["tests"] += 1
        comparison = (f"observed {format_observed(slo)} vs threshold {format_threshold(slo)} "
                      f"({slo.scope.value})")
        details = "\n".join([slo.basis, slo.scope.note, *slo.observed.warnings])
        verdict = slo.verdict.value
        if invalid:
            _sub(case, "error", details, message=f"measurement invalid, verdict {verdict} not "
                 f"trusted: {comparison}", type="invalid measurement")
            counts["errors"] += 1
        elif verdict == "FAIL":
            _sub(case, "failure", details, message=comparison, type="SLO FAIL")
            counts["failures"] += 1
        elif verdict == "INCONCLUSIVE":
            _sub(case, "skipped", details, message=f"INCONCLUSIVE: {comparison}")
            counts["skipped"] += 1
    for pair in summary.comparisons:
        note = _pair_note(pair)
        for entry in pair.cells:
            case = _sub(suite, "testcase", classname=suite_name,
                        name=f"{entry.candidate} vs {entry.baseline}: {entry.cell}", time="0")
            counts["tests"] += 1
            state = cell_state(entry)
            message = f"{state}: {entry.display}"
            details = "\n".join([note, *entry.warnings])
            _sub(_sub(case, "properties"), "property", name="change", value=state)
            if state == "regression":
                _sub(case, "failure", details, message=message, type=REGRESSION)
                counts["failures"] += 1
            elif state in ("not testable", "n/a"):
                _sub(case, "skipped", details, message=message)
                counts["skipped"] += 1
    _sub(suite, "system-out", text)
    for element in (root, suite):
        for key, count in counts.items():
            element.set(key, str(count))
    ET.indent(root)
    return ET.tostring(root, encoding="unicode", xml_declaration=True) + "\n"


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
                                   md_cell(entry.cell), md_cell(entry.display),
                                   f"**{state}**" if state == "regression" else state]))
        lines.append("")
        lines += [f"- {escape(f'{p.candidate} vs {p.baseline}: {_pair_note(p)}')}"
                  for p in summary.comparisons]
        lines.append("")
    lines += [f"- warning: {escape(redact_text(w))}" for w in summary.warnings]
    return "\n".join(lines).rstrip("\n") + "\n"
