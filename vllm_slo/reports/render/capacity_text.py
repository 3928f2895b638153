"""A capacity search in words: the terminal text, summary.md and junit.xml (one testcase per
search: bracketed and meeting `require` passes, below `require` fails, undecided is skipped,
invalid is an error)."""

from __future__ import annotations

import xml.etree.ElementTree as ET
from collections.abc import Mapping

from vllm_slo.analysis.capacity import CapacityDocument
from vllm_slo.analysis.capacity_comparison import CapacityRatio
from vllm_slo.analysis.capacity_race import RaceResult
from vllm_slo.redaction import redact_text
from vllm_slo.scenarios.errors import ExitCode


def _load(value: float | None) -> str:
    return "?" if value is None else f"{value:.4g}"


def capacity_line(document: CapacityDocument) -> str:
    """`capacity 9.6 req/s [9.2, 10.1] (95%), limited by ttft p90 < 500ms`."""
    capacity = document.capacity
    interval = f"[{_load(capacity.low)}, {_load(capacity.high)}]"
    value = _load(capacity.value) if capacity.value is not None else "not bracketed"
    limit = f", limited by {document.limiting_slo}" if document.limiting_slo else ""
    return (f"capacity {value} {document.unit} {interval} ({capacity.confidence:.0%})"
            f"{limit}")


def completion_ceiling_line(document: CapacityDocument) -> str | None:
    """The completion ceiling, when it lies below every load read over capacity (it then
    bounded the capacity more tightly than the verdicts did); None otherwise."""
    ceiling = document.capacity.completion_ceiling
    over = [step.load for step in document.steps if step.outcome == "over"]
    if ceiling is None or not over or ceiling >= min(over):
        return None
    return (f"the server completed at most {_load(ceiling)} {document.unit} at a load over "
            "capacity: neither the capacity nor its interval lies above that")


def render_capacity_text(document: CapacityDocument) -> str:
    name = document.scenario_name + (f" / {document.variant}" if document.variant else "")
    lines = [f"{name}: {capacity_line(document)}",
             f"  {document.status.value}: {document.reason}"]
    ceiling_line = completion_ceiling_line(document)
    if ceiling_line:
        lines.append(f"  {ceiling_line}")
    lines.append(f"  {'load':>10} {'outcome':>8}  SLOs")
    for step in document.steps:
        slos = "; ".join(
            f"{s.slo} {s.verdict.value}"
            + ("" if s.value is None else f" ({s.value:.4g})") for s in step.slos)
        again = f" x{2 ** step.attempt}" if step.attempt else ""
        unstable = "" if step.stability.stable else f"; unstable: {step.stability.reason}"
        lines.append(f"  {_load(step.load):>10} {step.outcome:>8}  {slos}{unstable}"
                     f"{again}")
    if document.require is not None:
        lines.append(f"  require >= {document.require:g} {document.unit}")
    lines.append(f"  {len(document.steps)} steps in {document.elapsed_s / 60:.1f} min; "
                 f"exit code {document.exit_code} ({ExitCode(document.exit_code).name})")
    return "\n".join(lines)


def ratio_text(ratio: CapacityRatio) -> str:
    return (f"{_load(ratio.value)}x [{_load(ratio.low)}, {_load(ratio.high)}] "
            f"({ratio.confidence:.0%}): {ratio.change.value}")


def render_comparison_text(baseline: str, ratios: Mapping[str, CapacityRatio],
                           documents: Mapping[str, CapacityDocument]) -> str:
    lines = [f"capacity against {baseline} ({capacity_line(documents[baseline])}):"]
    for name, ratio in ratios.items():
        lines.append(f"  {name}: {ratio_text(ratio)}")
    return "\n".join(lines)


def render_capacity_markdown(documents: Mapping[str, CapacityDocument],
                             ratios: Mapping[str, CapacityRatio]) -> str:
    lines = ["## Capacity", "", "| search | capacity | interval | limiting SLO | status |",
             "|---|---|---|---|---|"]
    for name, doc in documents.items():
        capacity = doc.capacity
        lines.append(f"| {name or doc.scenario_name} | {_load(capacity.value)} {doc.unit} | "
                     f"[{_load(capacity.low)}, {_load(capacity.high)}] "
                     f"({capacity.confidence:.0%}) | {doc.limiting_slo or '—'} | "
                     f"{doc.status.value} |")
    if ratios:
        baseline = next(iter(documents))
        lines += ["", f"Against {baseline}:", ""]
        lines += [f"- {name}: {ratio_text(ratio)}" for name, ratio in ratios.items()]
    return redact_text("\n".join(lines)) + "\n"


def render_capacity_junit(documents: Mapping[str, CapacityDocument]) -> str:
    suite = ET.Element("testsuite", name="vllm-slo capacity", tests=str(len(documents)))
    failures = errors = skipped = 0
    for name, doc in documents.items():
        case = ET.SubElement(suite, "testcase", classname=f"capacity.{doc.scenario_name}",
                             name=name or doc.load)
        message = redact_text(f"{capacity_line(doc)}; {doc.status.value}: {doc.reason}")
        code = ExitCode(doc.exit_code)
        if code is ExitCode.SLO_FAILED:
            failures += 1
            ET.SubElement(case, "failure", message=message, type="capacity below require")
        elif code is ExitCode.INCONCLUSIVE:
            skipped += 1
            ET.SubElement(case, "skipped", message=f"UNDECIDED: {message}")
        elif code is ExitCode.INVALID_MEASUREMENT:
            errors += 1
            ET.SubElement(case, "error", message=message, type="invalid measurement")
        ET.SubElement(case, "system-out").text = redact_text(render_capacity_text(doc))
    suite.set("failures", str(failures))
    suite.set("errors", str(errors))
    suite.set("skipped", str(skipped))
    return ET.tostring(suite, encoding="unicode", xml_declaration=True) + "\n"


def _changed_text(changed: Mapping[str, object]) -> str:
    return " ".join(f"{flag}={value}" for flag, value in changed.items()) or "as given"


def render_race_lines(race: RaceResult) -> list[str]:
    """The race's standings, one line a candidate (the text and the markdown share them)."""
    lines = []
    for entry in race.entries:
        interval = (f"{_load(entry.value)} {race.unit} [{_load(entry.low)}, "
                    f"{_load(entry.high)}]")
        if entry.name == race.best:
            standing = "best"
        elif entry.versus_best is not None:
            standing = f"against {race.best}: {ratio_text(entry.versus_best)}"
        else:
            standing = entry.status.value
        out = f"; out of the race after {entry.trials} trial(s): {entry.out_of_race}" if (
            entry.out_of_race) else ""
        lines.append(f"{entry.name} ({_changed_text(entry.changed)}): {interval}, "
                     f"{standing}{out}")
    if race.gain_over_given is not None:
        lines.append(f"the best against the scenario's own args: "
                     f"{ratio_text(race.gain_over_given)}")
    return lines


def render_race_text(race: RaceResult) -> str:
    head = (f"capacity race: {race.best} carries the most" if race.best
            else "capacity race: no candidate's capacity is known")
    return "\n".join([head, *(f"  {line}" for line in render_race_lines(race))])


def render_race_markdown(race: RaceResult) -> str:
    lines = ["## Capacity race (tune.objective: capacity)", ""]
    lines += [f"- {line}" for line in render_race_lines(race)]
    return redact_text("\n".join(lines)) + "\n"
