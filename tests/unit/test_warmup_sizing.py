"""SLO thresholds sized from the run's own warm-up (`p95 < 3x warmup`, issue 25 item 8): the
main job's demo SLOs mean the same on a fast and a 4× slower host, the sized value is said in
the output, a server that degrades through the window still FAILs, and a rule with nothing
to size it from is INCONCLUSIVE (never a PASS)."""

from __future__ import annotations

import json
import math
from pathlib import Path
from types import SimpleNamespace

import jsonschema
import numpy as np
import pyarrow as pa
import pytest

from tests.support import synthetic as synthesis
from vllm_slo.analysis.summary import SloEntry
from vllm_slo.analysis.trial_verdicts import sized_across_trials
from vllm_slo.analysis.warmup_sizing import baseline, size_rules
from vllm_slo.reports.run_report import render_run
from vllm_slo.scenarios.loader import load_scenario
from vllm_slo.scenarios.slo import parse_rule

REPO = Path(__file__).resolve().parents[2]
SCHEMA = json.loads((REPO / "reports" / "schema" / "summary.schema.json").read_text())
T0 = 1_800_000_000.0
WARMUP_S, DURATION_S = 5.0, 30.0
CHUNKS = 17


def rows(*, warmup_ttft_s: float, ttft_s: float, warmup_gap_s: float, gap_s: float,
         warmup: bool = True, seed: int = 0) -> pa.Table:
    """Closed-loop-like rows, one request sent every 0.1 s per phase: warm-up rows (5 s) with
    TTFT and chunk gaps around the warm-up values, then 30 s measured around the others (each
    log-normal, sd 0.2)."""
    rng = np.random.default_rng(seed)
    out = []
    phases = ([("warmup", 0.0, warmup_ttft_s, warmup_gap_s)] if warmup else []) + [
        ("measure", WARMUP_S, ttft_s, gap_s)]
    for phase, start_s, ttft_center, gap_center in phases:
        span = WARMUP_S if phase == "warmup" else DURATION_S
        for k in range(int(span / 0.1)):
            send = T0 + start_s + 0.1 * k
            ttft = ttft_center * float(rng.lognormal(0, 0.2))
            offsets = ttft + np.concatenate([[0.0], np.cumsum(
                gap_center * rng.lognormal(0, 0.2, CHUNKS - 1))])
            out.append({
                "request_id": f"{phase}-{k}", "process_id": 1, "user_id": k % 8,
                "phase": phase, "endpoint": "chat", "intended_send_unix_s": send,
                "send_unix_s": send, "send_lag_s": 0.0, "ttft_s": ttft,
                "e2e_s": float(offsets[-1]), "chunk_offsets_s": [float(x) for x in offsets],
                "output_tokens": CHUNKS, "status_code": 200, "ok": True, "error": None})
    columns = {name: [row[name] for row in out] for name in out[0]}
    return synthesis.complete_columns(
        {name: pa.array(values, type=synthesis.SAMPLE_SCHEMA.field(name).type)
         for name, values in columns.items()}, len(out))


def chat_run(tmp_path: Path, name: str, table: pa.Table) -> Path:
    """A run folder of the shipped chat scenario (its own SLOs) over `table`."""
    chat, _ = load_scenario("chat", [f"traffic.duration={DURATION_S}s",
                                     f"traffic.warmup={WARMUP_S}s"])
    return synthesis.write_run_folder(tmp_path / name, table, chat.to_yaml_dict(),
                                      via_writer=False)


def test_the_grammar_reads_a_warmup_factor() -> None:
    rule = parse_rule("itl", "p95 < 3x warmup")
    assert (rule.statistic, rule.comparator, rule.warmup_factor) == ("p95", "<", 3.0)
    assert math.isnan(rule.threshold) and not rule.sized
    assert parse_rule("ttft", "mean <= 1.5x warm-up").warmup_factor == 1.5
    assert parse_rule("ttft", "p50 < 2s").warmup_factor is None
    for text in ("p95 < 0x warmup", "p95 < 2000x warmup"):
        with pytest.raises(ValueError, match="a warm-up factor lies in"):
            parse_rule("itl", text)
    with pytest.raises(ValueError, match="or 3x warmup"):
        parse_rule("itl", "p95 < 3x cooldown")
    chat, _ = load_scenario("chat")
    assert {rule.metric: rule.warmup_factor for rule in chat.slo.rules()} == {
        "ttft": 3.0, "itl": 3.0, "e2e": 3.0, "error_rate": None}


def test_the_threshold_is_the_factor_times_the_warmups_own_statistic() -> None:
    table = rows(warmup_ttft_s=0.2, ttft_s=0.2, warmup_gap_s=0.03, gap_s=0.03)
    warm = table.filter(pa.compute.equal(table.column("phase"), "warmup"))
    ttfts = np.asarray(warm.column("ttft_s"))
    rules = [parse_rule("ttft", "p50 < 3x warmup"), parse_rule("ttft", "mean < 2x warmup"),
             parse_rule("e2e", "p50 < 10s")]
    sizing = size_rules(rules, table, WARMUP_S)
    assert sizing.rules[0].threshold == pytest.approx(3 * float(np.quantile(ttfts, 0.5)))
    assert sizing.rules[1].threshold == pytest.approx(2 * float(ttfts.mean()))
    assert sizing.rules[2] is rules[2]  # an absolute rule is left alone
    assert sizing.rules[0] == rules[0]  # a sized rule is still the rule that was written
    assert len(sizing.notes) == 2
    assert sizing.notes[0].startswith("ttft p50 < 3x warmup: threshold ")
    assert "= 3 × the warm-up's p50 " in sizing.notes[0]
    assert f"({ttfts.size} requests in 5 s of warm-up on this host)" in sizing.notes[0]
    assert baseline(np.array([]), "p50") is None


@pytest.mark.parametrize("slowdown", [1.0, 4.0], ids=["fast-host", "4x-slower-host"])
def test_the_main_jobs_slos_pass_on_a_fast_and_a_slow_host(tmp_path: Path,
                                                           slowdown: float) -> None:
    """The same server behaviour on a host 4× slower: every latency 4× larger. Absolute
    thresholds sized on the fast host would not hold there; sized from the warm-up they do."""
    table = rows(warmup_ttft_s=0.25 * slowdown, ttft_s=0.3 * slowdown,
                 warmup_gap_s=0.03 * slowdown, gap_s=0.035 * slowdown)
    rendered = render_run(chat_run(tmp_path, f"x{slowdown:g}", table))
    summary = rendered.summary
    jsonschema.Draft202012Validator(SCHEMA).validate(summary)
    verdicts = {s["metric"]: s["verdict"] for s in summary["slos"]}
    assert verdicts == {"ttft": "PASS", "itl": "PASS", "e2e": "PASS", "error_rate": "PASS"}
    assert summary["exit_code"] == 0, summary["invalid_reasons"]
    itl = next(s for s in summary["slos"] if s["metric"] == "itl")
    assert itl["text"] == "p95 < 3x warmup"
    assert 3 * 0.03 * slowdown < itl["threshold"] < 3 * 0.03 * slowdown * 1.6  # p95 of gaps
    notes = [w for w in summary["warnings"] if "x warmup: threshold" in w]
    assert len(notes) == 3 and all(note in rendered.text for note in notes)  # said on screen


def test_a_server_that_degrades_through_the_window_still_fails(tmp_path: Path) -> None:
    table = rows(warmup_ttft_s=0.25, ttft_s=1.5, warmup_gap_s=0.03, gap_s=0.2)
    summary = render_run(chat_run(tmp_path, "degraded", table)).summary
    verdicts = {s["metric"]: s["verdict"] for s in summary["slos"]}
    assert verdicts["ttft"] == verdicts["itl"] == verdicts["e2e"] == "FAIL"
    assert summary["exit_code"] == 1


def test_without_warmup_rows_the_rule_is_inconclusive_not_a_pass(tmp_path: Path) -> None:
    table = rows(warmup_ttft_s=0.25, ttft_s=0.3, warmup_gap_s=0.03, gap_s=0.03,
                 warmup=False)
    rendered = render_run(chat_run(tmp_path, "no-warmup", table))
    summary = rendered.summary
    jsonschema.Draft202012Validator(SCHEMA).validate(summary)
    for entry in summary["slos"]:
        if entry["text"].endswith("x warmup"):
            assert entry["verdict"] == "INCONCLUSIVE" and entry["threshold"] is None
            assert entry["basis"] == (
                f"no warm-up sample of {entry['metric']} to size '{entry['text']}' "
                f"(no successful {entry['metric']} sample in the 5 s warm-up)")
    assert summary["exit_code"] == 3
    # the basis says why, once: no warning repeats it
    assert not any("warm-up" in w for w in summary["warnings"])
    # summary.json reads back (the experiment and the tuner read trials' entries)
    entry = SloEntry.from_json_dict(summary["slos"][0])
    assert not entry.rule.sized


def test_across_trials_the_threshold_is_the_median_of_the_trials_own() -> None:
    rule = parse_rule("itl", "p95 < 3x warmup")

    def trial(threshold: float) -> SimpleNamespace:
        sized = SloEntry.from_json_dict({
            "metric": "itl", "statistic": "p95", "comparator": "<", "threshold": threshold,
            "text": "p95 < 3x warmup", "profile": None,
            "observed": {"value": None, "ci_low": None, "ci_high": None, "confidence": 0.95,
                         "n": 0, "n_effective": 0.0, "method": "none", "warnings": []},
            "verdict": "PASS", "basis": "", "scope": "within-instance"})
        return SimpleNamespace(outcome=SimpleNamespace(slos=(sized,)))

    assert sized_across_trials(rule, [trial(0.3), trial(0.1), trial(0.2)]).threshold == 0.2
    assert not sized_across_trials(rule, [trial(None)]).sized  # type: ignore[arg-type]
    assert not sized_across_trials(rule, []).sized
