"""junit.xml: one testcase per SLO, so CI systems show SLOs next to unit tests.

Mapping (docs/reports.md):
- PASS -> a passing testcase;
- FAIL -> `<failure message="observed … vs threshold …" type="SLO FAIL">` with the basis;
- INCONCLUSIVE -> `<skipped message="INCONCLUSIVE: …">`: JUnit has no third state, and
  "not decided" is what skipped means; the run's exit code (3) still fails the CI step;
- an invalid measurement (exit code 4) -> an extra testcase `measurement is valid` carrying
  `<error>` with the reasons, and every SLO testcase carries `<error>` too (its verdict is
  shown in the message but cannot be trusted). With a valid measurement that testcase passes.
The terminal table goes into `<system-out>`.
"""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET

from vllm_slo.analysis.summary import RunSummaryDocument, SloEntry
from vllm_slo.redaction import redact_text
from vllm_slo.reports.render.text import (
    basis_warnings,
    format_observed,
    format_threshold,
    outcome,
    render_table,
    slo_label,
)

_XML_ILLEGAL = re.compile("[^\t\n\r\u0020-\ud7ff\ue000-\ufffd\U00010000-\U0010ffff]")


def _clean(text: str) -> str:
    """XML 1.0 cannot carry most control characters (even escaped): replace them."""
    return _XML_ILLEGAL.sub("\ufffd", redact_text(str(text)))


def _sub(parent: ET.Element, tag: str, text: str | None = None, **attributes: str) -> ET.Element:
    element = ET.SubElement(parent, tag, {k: _clean(v) for k, v in attributes.items()})
    if text:
        element.text = _clean(text)
    return element


class JunitSuite:
    """One `<testsuite>` under `<testsuites name="vllm-slo">`, counting its testcases; the
    run's and the experiment's junit.xml share it (the validity case, SLO cases, the totals)."""

    def __init__(self, suite_name: str, properties: dict[str, str]) -> None:
        self.name = suite_name
        self.counts = {"tests": 0, "failures": 0, "errors": 0, "skipped": 0}
        self.root = ET.Element("testsuites", {"name": "vllm-slo"})
        self.suite = ET.SubElement(self.root, "testsuite", {"name": _clean(suite_name)})
        listed = ET.SubElement(self.suite, "properties")
        for name, value in properties.items():
            _sub(listed, "property", name=name, value=value)

    def case(self, name: str) -> ET.Element:
        self.counts["tests"] += 1
        return _sub(self.suite, "testcase", classname=self.name, name=name, time="0")

    def mark(self, case: ET.Element, kind: str, details: str, **attributes: str) -> None:
        """`failure`, `error` or `skipped` on a testcase, counted."""
        _sub(case, kind, details, **attributes)
        self.counts["failures" if kind == "failure" else
                    "errors" if kind == "error" else "skipped"] += 1

    def validity_case(self, invalid: list[str]) -> None:
        case = self.case("measurement is valid")
        if invalid:
            self.mark(case, "error", "\n".join(invalid), message="; ".join(invalid),
                      type="invalid measurement")

    def slo_case(self, name: str, slo: SloEntry, invalid: bool) -> None:
        """PASS passes, FAIL a `<failure>`, INCONCLUSIVE `<skipped>`; `<error>` for every
        verdict of an invalid measurement."""
        case = self.case(name)
        comparison = (f"observed {format_observed(slo)} vs threshold {format_threshold(slo)} "
                      f"({slo.scope.value})")
        _sub(_sub(case, "properties"), "property", name="verdict_scope", value=slo.scope.value)
        details = "\n".join([slo.basis, slo.scope.note, *basis_warnings(slo)])
        verdict = slo.verdict.value
        if invalid:
            self.mark(case, "error", details, message=f"measurement invalid, verdict {verdict} "
                      f"not trusted: {comparison}", type="invalid measurement")
        elif verdict == "FAIL":
            self.mark(case, "failure", details, message=comparison, type="SLO FAIL")
        elif verdict == "INCONCLUSIVE":
            self.mark(case, "skipped", details, message=f"INCONCLUSIVE: {comparison}")

    def document(self, system_out: str, time_s: float | None = None,
                 timestamp: str | None = None) -> str:
        _sub(self.suite, "system-out", system_out)
        for element in (self.root, self.suite):
            for key, count in self.counts.items():
                element.set(key, str(count))
            if time_s is not None:
                element.set("time", f"{time_s:.3f}")
        if timestamp is not None:
            self.suite.set("timestamp", _clean(timestamp))
        ET.indent(self.root)
        return ET.tostring(self.root, encoding="unicode", xml_declaration=True) + "\n"


def render_junit(summary: RunSummaryDocument) -> str:
    provenance = summary.provenance  # redacted when the document was built
    facts = {"run_id": summary.run_id, "outcome": outcome(summary.exit_code, len(summary.slos)),
             "exit_code": str(summary.exit_code),
             **{key: str(provenance[key]) for key in ("vllm_version", "model_id", "platform",
                                                      "suite_git_commit", "seed")
                if provenance.get(key) is not None}}
    junit = JunitSuite(f"vllm-slo.{summary.scenario_name}", facts)
    invalid = list(summary.invalid_reasons)
    junit.validity_case(invalid)
    for slo in summary.slos:
        junit.slo_case(slo_label(slo), slo, bool(invalid))
    timestamp = provenance.get("started_utc")
    return junit.document(render_table(summary), summary.window_s,
                          timestamp if isinstance(timestamp, str) else None)
