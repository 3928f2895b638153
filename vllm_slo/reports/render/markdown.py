"""summary.md: a short Markdown digest of a run's summary document (verdicts, then the latency
summary), written into the run folder and appended to `$GITHUB_STEP_SUMMARY` when that is set.

Markdown renderers (GitHub's included) accept inline HTML, so every piece of text that did not
come from our own number formatting is escaped: HTML metacharacters become entities and
Markdown metacharacters are backslash-escaped.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

from vllm_slo.analysis.summary import RunSummaryDocument
from vllm_slo.redaction import redact_text
from vllm_slo.reports.render.applicable import shown_metrics
from vllm_slo.reports.render.text import (
    OPEN_FOOTNOTE,
    client_line,
    format_latency,
    format_latency_marked,
    format_observed,
    format_threshold,
    is_open,
    outcome,
    requests_line,
    scope_note,
    slo_name,
    unobserved_basis,
    verdict_counts,
)

STEP_SUMMARY_ENV = "GITHUB_STEP_SUMMARY"
_MARKDOWN_SPECIAL = re.compile(r"([\\`*_{}\[\]()#+!|~])")


def escape(text: str) -> str:
    """Plain text for a Markdown table cell or line: no HTML, no Markdown syntax, one line."""
    text = " ".join(str(text).split())
    text = text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
    return _MARKDOWN_SPECIAL.sub(r"\\\1", text)


def cell(text: str) -> str:
    """Our own formatted text (numbers, units, metric names) in a table cell: only `|`."""
    return text.replace("|", "\\|")


def _row(cells: list[str]) -> str:
    return "| " + " | ".join(cells) + " |"


def render_markdown(summary: RunSummaryDocument) -> str:
    verdict = outcome(summary.exit_code, len(summary.slos))
    lines = [f"### vllm-slo · {escape(summary.scenario_name)}: **{verdict}**", "",
             f"Run {escape(summary.run_id)} · {verdict_counts(summary.slos)} · "
             f"exit code {summary.exit_code}", ""]
    if summary.invalid_reasons:
        for reason in summary.invalid_reasons:
            lines.append(f"- **measurement invalid:** {escape(redact_text(reason))}")
        lines.append("")
    if summary.slos:
        lines.append(_row(["verdict", "SLO", "threshold", "observed [95% CI]"]))
        lines.append(_row(["---"] * 4))
        for slo in summary.slos:
            name = slo.verdict.value
            shown = f"**{name}**" if name != "PASS" else name
            basis = unobserved_basis(slo)  # the sentence saying why nothing was observed
            observed = cell(format_observed(slo)) if basis is None else escape(basis)
            lines.append(_row([shown, cell(slo_name(slo)), cell(format_threshold(slo)),
                               observed]))
        lines += ["", cell(scope_note(summary.slos)), ""]
    lines.append(_row(["metric", "count", "mean", "p50", "p95", "p99"]))
    lines.append(_row(["---", "---:", "---:", "---:", "---:", "---:"]))
    any_open = False
    for name, metric in shown_metrics(summary).items():
        estimates = [metric.percentiles[k] for k in ("p50", "p95", "p99")]
        any_open = any_open or any(is_open(e) for e in estimates)
        lines.append(_row([name, str(metric.count), format_latency(metric.mean),
                           *(format_latency_marked(e) for e in estimates)]))
    if any_open:
        lines += ["", cell(OPEN_FOOTNOTE)]
    lines.append("")
    lines.append(cell(requests_line(summary)))
    client = client_line(summary)
    if client is not None:
        lines += ["", cell(client)]
    if summary.warnings:
        lines.append("")
        lines.extend(f"- warning: {escape(redact_text(w))}" for w in summary.warnings)
    return "\n".join(lines) + "\n"


def append_step_summary(markdown: str, environ: dict[str, str] | None = None) -> Path | None:
    """Append to the file named by $GITHUB_STEP_SUMMARY (GitHub Actions), if set."""
    target = (os.environ if environ is None else environ).get(STEP_SUMMARY_ENV)
    if not target:
        return None
    path = Path(target)
    with path.open("a", encoding="utf-8") as sink:
        sink.write(markdown + "\n")
    return path


def step_summary_warning(markdown: str, environ: dict[str, str] | None = None) -> str | None:
    """`append_step_summary`, a failure of which is a warning (None: appended or not set): the
    verdict stands when the CI's summary file cannot be written."""
    try:
        append_step_summary(markdown, environ)
    except OSError as error:
        target = (os.environ if environ is None else environ).get(STEP_SUMMARY_ENV)
        return (f"${STEP_SUMMARY_ENV} {target}: not appended ({error.strerror or error}); "
                "the verdict stands")
    return None
