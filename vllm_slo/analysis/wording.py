"""The wording of comparisons (pure): a cell's value, a change with its interval, a judged
cell, a pair's judgement in one sentence, Holm's family, the note on corrections across pairs,
the benchstat-style table as data (`TextTable`: its cells and notes;
reports/render/tables.py lays it out), its decision rows' legend, and the caveats of an
experiment's comparison (trials on several machines, variants run side by side). The
statistics they word are `analysis/comparison.py`; this module imports it, never the
reverse."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from vllm_slo.analysis.comparison import (
    UNDECIDED_WITHIN_INSTANCE,
    CellComparison,
    Group,
    PairBasis,
    center_estimate,
    family_basis,
    instance_scope,
    per_pair_alpha,
)
from vllm_slo.analysis.trials import Trial, gpu_set, machines_text
from vllm_slo.scenarios.metrics import parse_cell
from vllm_slo.scenarios.model import Scenario
from vllm_slo.stats.sequential import SequentialDesign
from vllm_slo.stats.statistics import Estimate
from vllm_slo.stats.trial_statistics import Comparison

#: A change is shown in percent when its value and both bounds lie within these ratios
#: (-50% .. +100%), otherwise as ratios (x45.7): "+4400%" reads worse than "x45.0".
PERCENT_RATIO_RANGE = (0.5, 2.0)
MAX_LISTED_TRIALS = 12


def format_cell_value(cell: str, value: float | None) -> str:
    if value is None or not math.isfinite(value):
        return "n/a"
    metric = parse_cell(cell).metric
    return metric.format_value(value) + metric.suffix


def format_level(confidence: float) -> str:
    """0.95 -> "95%", 0.991667 -> "99.2%"."""
    return f"{confidence * 100:.3g}%"


def format_estimate(cell: str, value: float | None, low: float | None, high: float | None
                    ) -> str:
    """`2.31s [1.90s, 2.80s]`; the value alone without an interval; `n/a` without a value."""
    text = format_cell_value(cell, value)
    if value is not None and low is not None and high is not None:
        text += f" [{format_cell_value(cell, low)}, {format_cell_value(cell, high)}]"
    return text


def trial_values_text(cell: str, values: Sequence[float]) -> str:
    """`from trials 2.10s 2.50s` (each trial's value, in trial order); beyond
    MAX_LISTED_TRIALS: `from 30 trials: 2.10s .. 2.90s, median 2.40s`."""
    if not values:
        return "from no trial"
    if len(values) <= MAX_LISTED_TRIALS:
        shown = " ".join(format_cell_value(cell, v) for v in values)
        return f"from trial{'s' if len(values) != 1 else ''} {shown}"
    return (f"from {len(values)} trials: {format_cell_value(cell, min(values))} .. "
            f"{format_cell_value(cell, max(values))}, median "
            f"{format_cell_value(cell, float(np.median(values)))}")


def _times(ratio: float) -> str:
    if ratio >= 100:
        return f"×{ratio:.0f}"
    if ratio >= 10:
        return f"×{ratio:.1f}"
    if ratio >= 0.1:
        return f"×{ratio:.2f}"
    return f"×{ratio:.2g}"


def _percent(ratio: float) -> str:
    change = (ratio - 1.0) * 100
    return f"{0.0 if abs(change) < 0.05 else change:+.1f}%"  # never "-0.0%"


def format_ratio(value: float, low: float | None, high: float | None) -> str:
    """`+4.1% [-9.0%, +18.7%]` when every number lies in PERCENT_RATIO_RANGE, else
    `×45.7 [×34.9, ×60.0]` (one style per change, never mixed)."""
    numbers = [v for v in (value, low, high) if v is not None]
    lowest, highest = PERCENT_RATIO_RANGE
    show = _percent if all(lowest <= v <= highest for v in numbers) else _times
    text = show(value)
    if low is not None and high is not None:
        text += f" [{show(low)}, {show(high)}]"
    return text


def _signed(cell: str, value: float) -> str:
    if cell.startswith("error_rate"):
        return f"{value * 100:+.2f}pp"
    return ("-" if value < 0 else "+") + format_cell_value(cell, abs(value))


def format_shift(cell: str, value: float, low: float | None, high: float | None) -> str:
    """A difference in the cell's unit (used where a ratio does not exist: values <= 0)."""
    text = _signed(cell, value)
    if low is not None and high is not None:
        text += f" [{_signed(cell, low)}, {_signed(cell, high)}]"
    return text


def format_change_interval(cell: str, result: Comparison) -> str:
    """The change and the interval `format_change` shows, without verdict marks: `+4.1%
    [-9.0%, +18.7%]`, `×45.7 [×34.9, ×60.0]`; the value alone where no interval exists."""
    estimate, interval = _shown(result)
    if estimate.value is None:
        return "n/a"
    low = interval.ci_low if interval is not None else None
    high = interval.ci_high if interval is not None else None
    if result.ratio.value is not None:
        return format_ratio(estimate.value, low, high)
    return format_shift(cell, estimate.value, low, high)


def _shown(result: Comparison) -> tuple[Estimate, Estimate | None]:
    """The estimate shown (ratio; the shift where values <= 0 allow no ratio) and the interval
    shown with it: at the test's level when testable, else the widest the trials allow."""
    use_ratio = result.ratio.value is not None
    estimate = result.ratio if use_ratio else result.shift
    widest = result.ratio_range if use_ratio else result.shift_range
    return estimate, (estimate if result.testable else widest)


def format_change(cell: str, result: Comparison) -> str:
    """One compared cell, benchstat style, always with the estimate and its interval:

    * significant: `+45.2% [+20.1%, +80.3%] (98.3% CI, p=0.024 n=5+5)`;
    * not significant: `~ +4.1% [-9.0%, +18.7%] (99.2% CI, p=1 n=5+5)`;
    * not testable (these trial counts can never be significant in this family):
      `×45.7 [×34.9, ×60.0], not testable with 5+2 trials (90.5% CI, p=0.57)`, the widest
      interval the trials allow (all pairwise ratios) at its own, lower, level.

    The interval of a testable cell is at the Holm-consistent level it names, so it excludes
    0% (×1) exactly when the cell is significant. Ratio candidate/baseline (welch-log: of
    geometric means; mann-whitney: Hodges-Lehmann on logs); the shift in the cell's unit where
    values <= 0 allow no ratio (error rates of 0, tested by the rank test)."""
    counts = f"n={result.n_a}+{result.n_b}"
    if result.p_adjusted is None:
        return f"? ({counts})"
    body = format_change_interval(cell, result)
    _, interval = _shown(result)
    level = ""
    if interval is not None and interval.ci_low is not None:
        level = f"{format_level(interval.confidence)} CI, "
    p = f"p={result.p_adjusted:.2g}"
    if not result.testable:
        return (f"{body}, not testable with {result.n_a}+{result.n_b} trials "
                f"({level}{p})")
    return f"{'' if result.significant else '~ '}{body} ({level}{p} {counts})"


def format_judged(item: CellComparison) -> str:
    """`format_change`, led by `undecided: within-instance` where the pair decides nothing (no
    `~`: nothing is claimed either way)."""
    text = format_change(item.cell, item.comparison)
    if item.decides:
        return text
    return f"{UNDECIDED_WITHIN_INSTANCE} {text.removeprefix('~ ')}"


def center_text(group: Group, cell: str) -> str:
    estimate = center_estimate(group, cell)
    if estimate.value is None:
        return "n/a"
    text = format_cell_value(cell, estimate.value)
    if estimate.ci_high is not None and estimate.ci_low is not None and estimate.value:
        half = (estimate.ci_high - estimate.ci_low) / 2 / abs(estimate.value) * 100
        text += f" ±{half:.0f}%"
    return text


TABLE_LEGEND = (
    "change = candidate/baseline [interval] at the level shown, Holm-consistent:",
    "it excludes 0% exactly when the change is significant; ~ not significant; not testable: "
    "too few trials ever to be significant (the widest interval they allow, at its own level)")


TEST_TEXT: dict[str, str] = {
    "welch-log": "Welch t on log per-trial values (ratio of geometric means)",
    "mann-whitney": "Mann-Whitney U on per-trial values (Hodges-Lehmann ratio)",
}


def table_test_text(families: Sequence[tuple[CellComparison, ...]], cells: Sequence[str]
                    ) -> str:
    """The footer line naming the test behind the table and Holm's family: `Welch t on log
    per-trial values (ratio of geometric means); Holm over the 2 compared cell(s) of each pair:
    ...`; cells whose test differs (values <= 0 fall back to the rank test) are named."""
    tests: list[str] = [item.comparison.test for family in families for item in family]
    main = max(TEST_TEXT, key=tests.count) if tests else "mann-whitney"
    text = TEST_TEXT[main]
    differing = {item.cell: item.comparison.test for family in families for item in family
                 if item.comparison.test != main}
    for cell, test in differing.items():
        text += f"; {cell}: {TEST_TEXT[test]}"
    return f"{text}; {holm_family_text(cells)}"


def judgement_text(basis: PairBasis, family: Sequence[CellComparison],
                   cells: Sequence[str]) -> str:
    """The one judgement of a pair in words, the same in `compare`, experiments and `gate`:
    the test, Holm's family and the unit (`PairBasis.text`)."""
    tests: list[str] = [item.comparison.test for item in family]
    main = max(TEST_TEXT, key=tests.count) if tests else "welch-log"
    differing = sorted({f"{item.cell}: {TEST_TEXT[item.comparison.test]}" for item in family
                        if item.comparison.test != main})
    test = TEST_TEXT[main]
    if basis.between_instances:  # the test's values are instance means, not trials
        test = test.replace("per-trial values", "instance means")
    return "; ".join([test, *differing, holm_family_text(cells), basis.text()])


def holm_family_text(cells: Sequence[str]) -> str:
    """Which family Holm runs over, said the same way by `compare`, the experiment and `gate`."""
    return (f"Holm over the {len(cells)} compared cell(s) of each pair: {', '.join(cells)}"
            if len(cells) > 1 else f"one compared cell ({', '.join(cells)}): no Holm correction")


def pairs_text(alpha: float, arms: int) -> str | None:
    """The note an output gives when it corrects across pairs (None with one pair)."""
    if arms <= 2:
        return None
    return (f"{arms - 1} pairs against the baseline: each tested at alpha {alpha:g}/{arms - 1} "
            f"= {per_pair_alpha(alpha, arms):.3g} (Bonferroni over the pairs, Holm over each "
            "pair's cells)")


@dataclass(frozen=True, slots=True, kw_only=True)
class TextTable:
    """A table as data: the header's cells, each row's cells (one per header cell) and the
    lines under it (legend, footnotes). reports/render/tables.py lays it out."""

    header: tuple[str, ...]
    rows: tuple[tuple[str, ...], ...]
    notes: tuple[str, ...] = ()


def benchstat_table(groups: Sequence[Group], families: Sequence[tuple[CellComparison, ...]],
                    cells: Sequence[str]) -> TextTable:
    """benchstat's table: center ±CI% per group; the change with its interval for every
    cell (`~` when not significant after Holm, `not testable` when it never can be);
    (p=… n=…); a legend and footnoted warnings."""
    baseline = groups[0]
    header = ["cell", baseline.label]
    for candidate in groups[1:]:
        header += [candidate.label, f"vs {baseline.label}"]
    rows: list[tuple[str, ...]] = []
    notes: list[str] = []
    for index, cell in enumerate(cells):
        row = [cell, center_text(baseline, cell)]
        for family, candidate in zip(families, groups[1:], strict=True):
            comparison = family[index].comparison
            marks = ""
            for warning in comparison.warnings:
                if warning not in notes:
                    notes.append(warning)
                marks += f"[{notes.index(warning) + 1}]"
            row += [center_text(candidate, cell), format_judged(family[index]) + marks]
        rows.append(tuple(row))
    return TextTable(
        header=tuple(header), rows=tuple(rows),
        notes=(*TABLE_LEGEND, table_test_text(families, cells),
               *(f"{candidate.label} vs {baseline.label}: "
                 f"{instance_scope(baseline, candidate).text()}; "
                 f"{family_basis(baseline, candidate, family).text()}"
                 for candidate, family in zip(groups[1:], families, strict=True)),
               *(f"[{i}] {note}" for i, note in enumerate(notes, start=1))))


def decision_legend(design: SequentialDesign) -> str:
    """The note under the benchstat table's decision rows: the design and what each word
    means."""
    kind = ("sequential design, O'Brien-Fleming-type alpha spending over the looks"
            if design.sequential else "fixed design, one look")
    return (f"decision: {kind}; changed = significant after Holm, equivalent = within "
            f"±{design.effect:.0%} by two one-sided tests, each at alpha "
            f"{design.alpha:g} (docs/statistics.md)")


def machines_warning(trials: Sequence[Trial]) -> str | None:
    """When an experiment's trials ran on more than one set of GPUs (resumed on another
    machine), which trials ran where: their comparison includes the machine."""
    where = machines_text([(t.run_dir.name, gpu_set(t.provenance))
                           for t in sorted(trials, key=lambda t: t.position)])
    if where is None:
        return None
    return (f"the trials ran on {where}: a comparison of trials from different machines "
            "includes the machine; an arm whose trials all ran on one machine and another's "
            "on the other confounds the two")


def side_by_side_warnings(scenario: Scenario, rounds: int | None = None) -> list[str]:
    """What running the variants at once means for the comparison (the confound), with the
    rotation of device slots each variant saw."""
    spec = scenario.side_by_side
    if spec is None:
        return []
    names = list(scenario.variants)
    rounds = scenario.max_trials if rounds is None else rounds
    seen = {name: [spec.slot_of(k, r) for r in range(rounds)] for k, name in enumerate(names)}
    placement = "; ".join(
        f"{name} on " + ", ".join("[" + ",".join(map(str, slot)) + "]" for slot in slots)
        for name, slots in seen.items())
    warnings = [
        f"side by side: each round's variants ran at the same time, on device slots rotated "
        f"every round ({placement}). They shared this host's CPUs, memory bandwidth and "
        f"interconnect, so a difference can come from running together or from a device as "
        f"well as from the config; run without side_by_side to confirm a finding."]
    if rounds % len(spec.devices):
        warnings.append(
            f"side by side: {rounds} round(s) do not rotate evenly over {len(spec.devices)} "
            f"device slots — a device's own speed is not balanced across variants (use a "
            f"multiple of {len(spec.devices)} trials)")
    return warnings
