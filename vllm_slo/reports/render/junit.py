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

from vllm_slo.reports.analysis.summary import RunSummaryDocument
from vllm_slo.reports.redaction import redact_text
from vllm_slo.reports.render.text import (
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


def render_junit(summary: RunSummaryDocument) -> str:
    suite_name = f"vllm-slo.{summary.scenario_name}"
    invalid = list(summary.invalid_reasons)
    counts = {"tests": 0, "failures": 0, "errors": 0, "skipped": 0}
    root = ET.Element("testsuites", {"name": "vllm-slo"})
    suite = ET.SubElement(root, "testsuite", {"name": _clean(suite_name)})
    properties = ET.SubElement(suite, "properties")
    provenance = summary.provenance  # redacted when the document was built
    facts = {"run_id": summary.run_id, "outcome": outcome(summary.exit_code, len(summary.slos)),
             "exit_code": str(summary.exit_code),
             **{key: str(provenance[key]) for key in ("vllm_version", "model_id", "platform",
                                                      "suite_git_commit", "seed")
                if provenance.get(key) is not None}}
    for name, value in facts.items():
        _sub(properties, "property", name=name, value=value)

    validity = _sub(suite, "testcase", classname=suite_name, name="measurement is valid",
                    time="0")
    counts["tests"] += 1
    if invalid:
        _sub(validity, "error", "\n".join(invalid), message="; ".join(invalid),
             type="invalid measurement")
        counts["errors"] += 1
    for slo in summary.slos:
        case = _sub(suite, "testcase", classname=suite_name, name=slo_label(slo), time="0")
        counts["tests"] += 1
        comparison = (f"observed {format_observed(slo)} vs threshold {format_threshold(slo)} "
                      f"({slo.scope.value})")
        _sub(_sub(case, "properties"), "property", name="verdict_scope", value=slo.scope.value)
        details = "\n".join([slo.basis, slo.scope.note, *slo.observed.warnings])
        verdict = slo.verdict.value
        if invalid:
            _sub(case, "error", details,
                 message=f"measurement invalid, verdict {verdict} not trusted: "
                         f"{comparison}", type="invalid measurement")
            counts["errors"] += 1
        elif verdict == "FAIL":
            _sub(case, "failure", details, message=comparison, type="SLO FAIL")
            counts["failures"] += 1
        elif verdict == "INCONCLUSIVE":
            _sub(case, "skipped", details, message=f"INCONCLUSIVE: {comparison}")
            counts["skipped"] += 1
    _sub(suite, "system-out", render_table(summary))
    timestamp = provenance.get("started_utc")
    for element in (root, suite):
        for key, count in counts.items():
            element.set(key, str(count))
        element.set("time", f"{summary.window_s:.3f}")
    if isinstance(timestamp, str):
        suite.set("timestamp", _clean(timestamp))
    ET.indent(root)
    return ET.tostring(root, encoding="unicode", xml_declaration=True) + "\n"
