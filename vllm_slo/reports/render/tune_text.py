"""The text a tune prints at its end, from its summary (the same numbers as tune.json)."""

from __future__ import annotations

from vllm_slo.analysis.tune_summary import TuneSummary, gain_text
from vllm_slo.redaction import redact_text
from vllm_slo.reports.render.tune_html import headline, rank_rows, search_rows


def render_tune_text(summary: TuneSummary) -> str:
    result = summary.result
    lines = [f"tune {result.run_id}: {headline(summary)}", "",
             f"{'rank':<5}{'candidate':<11}{'objective':<16}{'vs best':<34}{'SLO':<14}standing"]
    for row in rank_rows(summary):
        lines.append(f"{row.rank:<5}{row.name:<11}{row.objective:<16}{row.versus_best:<34}"
                     f"{row.slo:<14}{row.standing}  [{row.changed}]")
    for search in search_rows(summary):
        lines.append(f"search {search.index} {search.arg}: {search.values}; "
                     f"stopped: {search.stop}; boundary {search.boundary}")
    lines.append(f"Pareto front ({result.throughput_cell} vs {result.latency_cell}): "
                 f"{', '.join(summary.front) or 'none'}")
    if summary.best is not None:
        lines += [f"recommended: {summary.best.name} ({summary.note})",
                  f"  {redact_text(summary.command)}"]
        if summary.gain is not None:
            lines.append(f"gain over the scenario's own args: "
                         f"{gain_text(summary.gain)}")
    else:
        lines.append("recommended: none (no candidate started, ran valid trials and met its "
                     "SLOs)")
    lines += [f"warning: {w}" for w in summary.warnings]
    return "\n".join(lines)
