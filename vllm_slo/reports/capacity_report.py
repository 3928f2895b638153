"""A capacity folder's outputs, rebuilt from its capacity.json alone: report.html (the curves
against load and the capacity marked), summary.md, junit.xml and the terminal text. A folder
of variants (variants/<name>/capacity.json each) renders each variant and their comparison.

    vllm-slo report runs/<id>-capacity
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from vllm_slo.analysis.capacity import CapacityDocument
from vllm_slo.analysis.capacity_comparison import CapacityRatio, capacity_gate, capacity_ratio
from vllm_slo.analysis.capacity_race import RaceCandidate, RaceResult, race_result
from vllm_slo.analysis.tuning import GIVEN_ORIGIN
from vllm_slo.reports.render.capacity_text import (
    capacity_line,
    ratio_text,
    render_capacity_junit,
    render_capacity_markdown,
    render_capacity_text,
    render_comparison_text,
    render_race_markdown,
    render_race_text,
)
from vllm_slo.reports.render.markdown import step_summary_warning
from vllm_slo.reports.trial_folders import naming
from vllm_slo.run_folder.file_writes import OutputWriteError, write_atomic
from vllm_slo.run_folder.run_files import (
    CANDIDATES_FILE,
    CAPACITY_FILE,
    JUNIT_FILE,
    RACE_FILE,
    REPORT_FILE,
    SUMMARY_MD_FILE,
    VARIANTS_DIR,
)
from vllm_slo.scenarios.errors import ExitCode, ScenarioError
from vllm_slo.serialise import to_json
from vllm_slo.stats.statistics import Verdict


@dataclass(frozen=True, slots=True)
class RenderedCapacity:
    text: str
    exit_code: ExitCode
    report_path: Path
    documents: dict[str, CapacityDocument]  # by variant ("" : the scenario has none)
    ratios: dict[str, CapacityRatio]  # each variant's against the first (variants only)
    race: RaceResult | None = None  # a capacity race's standings (its candidates.json)


def write_capacity(folder: Path, document: CapacityDocument) -> Path:
    path = folder / CAPACITY_FILE
    # whole or not at all, never through a link (a fixed `.json.tmp` name could be one)
    return write_atomic(path, json.dumps(to_json(document), indent=2) + "\n")


def read_capacity(folder: Path) -> CapacityDocument:
    path = folder / CAPACITY_FILE
    if not path.is_file():
        raise ScenarioError(f"{folder} is not a capacity folder (no {CAPACITY_FILE})")
    with naming(path):
        return CapacityDocument.from_json_dict(json.loads(path.read_text()))


def capacity_documents(folder: Path) -> dict[str, CapacityDocument]:
    """The folder's search ("" ) or its variants' (by name, in the scenario's order)."""
    if (folder / CAPACITY_FILE).is_file():
        return {"": read_capacity(folder)}
    variants = folder / VARIANTS_DIR
    if not variants.is_dir():
        raise ScenarioError(f"{folder} is not a capacity folder (no {CAPACITY_FILE} nor "
                            f"{VARIANTS_DIR}/)")
    found = {sub.name: read_capacity(sub) for sub in variants.iterdir()
             if (sub / CAPACITY_FILE).is_file()}
    order = _variant_order(folder, list(found))
    return {name: found[name] for name in order}


def _variant_order(folder: Path, names: list[str]) -> list[str]:
    """The scenario's variant order (the first is the baseline), else alphabetical."""
    import yaml

    try:
        scenario = yaml.safe_load((folder / "scenario.yaml").read_text())
        declared = list(scenario.get("variants") or {})
    except (OSError, ValueError, AttributeError):
        declared = []
    return [n for n in declared if n in names] + sorted(n for n in names if n not in declared)


def render_capacity(folder: Path) -> RenderedCapacity:
    documents = capacity_documents(folder)
    ratios: dict[str, CapacityRatio] = {}
    if len(documents) > 1:
        names = list(documents)
        baseline = documents[names[0]]
        ratios = {name: capacity_ratio(baseline.capacity, documents[name].capacity)
                  for name in names[1:]}
    text = "\n\n".join(render_capacity_text(doc) for doc in documents.values())
    if ratios:
        text += "\n\n" + render_comparison_text(next(iter(documents)), ratios, documents)
    race = read_race(folder, documents)
    markdown = render_capacity_markdown(documents, ratios)
    if race is not None:
        text += "\n\n" + render_race_text(race)
        markdown += "\n" + render_race_markdown(race)
    report_path = folder / REPORT_FILE
    from vllm_slo.reports.render.capacity_html import render_capacity_html

    exit_code = ExitCode(race.exit_code) if race is not None else max(
        (ExitCode(doc.exit_code) for doc in documents.values()), key=_severity)
    try:
        if race is not None:
            write_atomic(folder / RACE_FILE, json.dumps(to_json(race), indent=2) + "\n")
        write_atomic(report_path, render_capacity_html(documents, ratios, race))
        write_atomic(folder / JUNIT_FILE, render_capacity_junit(documents))
        write_atomic(folder / SUMMARY_MD_FILE, markdown)
    except OutputWriteError as error:
        raise error.with_verdict(text, int(exit_code)) from None
    warning = step_summary_warning(markdown)  # the search's summary, not each step's
    if warning is not None:
        text += f"\nwarning: {warning}"
    return RenderedCapacity(text, ExitCode(exit_code), report_path, documents, ratios, race)


def read_race(folder: Path, documents: Mapping[str, CapacityDocument]) -> RaceResult | None:
    """A capacity race's standings (None: the folder is no race: no candidates.json)."""
    path = folder / CANDIDATES_FILE
    if not path.is_file():
        return None
    with naming(path):
        saved = json.loads(path.read_text())
        candidates = {name: RaceCandidate(name=name, origin=str(entry["origin"]),
                                          changed=dict(entry["changed"]))
                      for name, entry in saved.items()}
    unknown = sorted(set(documents) - set(candidates))
    if unknown:
        raise ScenarioError(f"{path}: no candidate {', '.join(unknown)} (searched in "
                            f"{folder / VARIANTS_DIR})")
    return race_result(documents, candidates, GIVEN_ORIGIN)


def _severity(code: ExitCode) -> int:
    """4 (invalid) over 1 (require missed) over 3 (undecided) over 0."""
    return {ExitCode.PASS: 0, ExitCode.INCONCLUSIVE: 1, ExitCode.SLO_FAILED: 2,
            ExitCode.INVALID_MEASUREMENT: 3}.get(code, 3)


def _single_search(folder: Path, role: str) -> CapacityDocument:
    documents = capacity_documents(folder)
    if list(documents) != [""]:
        raise ScenarioError(f"{role} {folder} searched variants ({', '.join(documents)}): "
                            f"give one variant's folder, {folder}/{VARIANTS_DIR}/<name>")
    return documents[""]


def _comparable(baseline: CapacityDocument, other: CapacityDocument, folder: Path,
                force: bool) -> None:
    """Capacities of one load key, under the same SLOs (unless `force`)."""
    if baseline.load != other.load:
        raise ScenarioError(f"{folder} searched {other.load} ({other.unit}), the baseline "
                            f"{baseline.load} ({baseline.unit}): capacities in different "
                            "units cannot be compared")
    slos = [{s.slo for s in doc.steps[0].slos} if doc.steps else set()
            for doc in (baseline, other)]
    if slos[0] != slos[1] and not force:
        raise ScenarioError(f"{folder} was searched under other SLOs ({', '.join(sorted(slos[1]))}"
                            f" against {', '.join(sorted(slos[0]))}): its capacity answers "
                            "another question (--force compares anyway)")


def compare_capacity_folders(folders: list[Path], effect: float = 0.10,
                             force: bool = False) -> tuple[str, ExitCode]:
    """`vllm-slo compare` of capacity folders: each one's capacity ratio to the first."""
    documents = {str(folder): _single_search(folder, "capacity folder") for folder in folders}
    baseline_name = str(folders[0])
    baseline = documents[baseline_name]
    for folder in folders[1:]:
        _comparable(baseline, documents[str(folder)], folder, force)
    ratios = {name: capacity_ratio(baseline.capacity, doc.capacity, effect)
              for name, doc in documents.items() if name != baseline_name}
    return render_comparison_text(baseline_name, ratios, documents), ExitCode.PASS


def gate_capacity_folders(candidate: Path, baseline: Path, margin: float,
                          force: bool = False) -> tuple[str, ExitCode]:
    """`vllm-slo gate` on capacity: PASS when the candidate's capacity is at least the
    baseline's × (1 − margin) on the ratio's interval, FAIL when it is clearly below."""
    base = _single_search(baseline, "baseline")
    cand = _single_search(candidate, "candidate")
    _comparable(base, cand, candidate, force)
    ratio = capacity_ratio(base.capacity, cand.capacity)
    verdict = capacity_gate(ratio, margin)
    text = (f"capacity gate: candidate / baseline {ratio_text(ratio)}; floor "
            f"{1 - margin:.3g} (margin {margin:.0%}): {verdict.value}\n"
            f"  baseline  {capacity_line(base)}\n  candidate {capacity_line(cand)}")
    code = {Verdict.PASS: ExitCode.PASS, Verdict.FAIL: ExitCode.SLO_FAILED,
            Verdict.INCONCLUSIVE: ExitCode.INCONCLUSIVE}[verdict]
    return text, code
