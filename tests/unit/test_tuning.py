"""The tune's decisions (vllm_slo/analysis/tuning.py) and its outputs (reports/tune_report.py)
on made-up candidate results: grid order, search values and stops, the ranking's significance,
the Pareto front, the recommendation and the exit code; the tune section's validation."""

from __future__ import annotations

import json
from pathlib import Path

import jsonschema
import numpy as np
import pytest
from pydantic import ValidationError

from vllm_slo.analysis.tune_summary import TuneResult
from vllm_slo.analysis.tuning import (
    GIVEN_ORIGIN,
    CandidateResult,
    gain_over_given,
    grid_candidates,
    machines_warning,
    pareto_front,
    rank_candidates,
    same_server,
    search_finding,
    search_start,
    search_values,
    stop_reason,
)
from vllm_slo.reports.tune_report import build_tune, write_tune
from vllm_slo.scenarios.model import Scenario
from vllm_slo.scenarios.tune_spec import SearchSpec
from vllm_slo.stats.trial_statistics import compare_trials

TUNE_SCHEMA = json.loads((Path(__file__).resolve().parents[2] / "reports" / "schema" /
                          "tune.schema.json").read_text())


def result(name: str, values: tuple[float, ...], *, verdict: str = "PASS",
           failures: tuple[str, ...] = (), preemptions: float | None = 0.0,
           throughput: tuple[float, ...] = (), latency: tuple[float, ...] = (),
           args: dict | None = None) -> CandidateResult:
    args = args or {"max-num-seqs": int(name[1:])}
    return CandidateResult(name=name, origin="grid", changed=args, args=args,
                           objective_values=values, start_failures=failures,
                           slo_verdict=verdict, preemptions=preemptions,
                           throughput_values=throughput or tuple(100 * v for v in values),
                           latency_values=latency or tuple(0.1 for _ in values))


def search(**fields) -> SearchSpec:
    return SearchSpec.model_validate({"arg": "max-num-seqs", "start": 64, "factor": 2,
                                      "until": ["slo_fail"], **fields})


def test_grid_is_every_combination_first_flag_slowest() -> None:
    assert grid_candidates({"block-size": [16, 32], "enforce-eager": [True, False]}) == [
        {"block-size": 16, "enforce-eager": True}, {"block-size": 16, "enforce-eager": False},
        {"block-size": 32, "enforce-eager": True}, {"block-size": 32, "enforce-eager": False}]


def test_search_values_double_or_step_and_respect_max() -> None:
    assert search_values(search(max=512), 64) == [64, 128, 256, 512]
    assert search_values(search(max_steps=3), 64) == [64, 128, 256]
    stepped = SearchSpec(arg="gpu-memory-utilization", start=0.8, step=0.05, max=0.95,
                         until=["start_failure"])
    assert search_values(stepped, 0.8) == [0.8, 0.85, 0.9, 0.95]
    assert all(isinstance(v, int) for v in search_values(search(max=512), 64))


def test_search_starts_from_another_arg_or_says_why_not() -> None:
    spec = search(arg="max-num-batched-tokens", start="max-model-len")
    assert search_start(spec, {"max-model-len": 4096}) == 4096.0
    with pytest.raises(ValueError, match=r"max-model-len.*do not set"):
        search_start(spec, {})


def test_search_stops_on_its_conditions_in_order() -> None:
    spec = search(until=["preemptions", "slo_fail", "no_gain"])
    assert stop_reason(spec, [result("c1", (1.0,))]) is None
    assert "preempted 3" in stop_reason(spec, [result("c1", (1.0,), preemptions=3)])
    assert stop_reason(spec, [result("c1", (1.0,), verdict="FAIL")]) == "an SLO failed"
    assert stop_reason(spec, [result("c1", (2.0,)), result("c2", (1.5,))]) == \
        "the objective did not rise"
    assert stop_reason(spec, [result("c1", (1.0,)), result("c2", (1.5,))]) is None
    # a server that does not start ends every search: nothing is learnt above it
    assert stop_reason(spec, [result("c1", (), failures=("OOM",))]) == \
        "the server did not start"


def test_finding_is_the_last_step_before_the_stop() -> None:
    spec = search(until=["slo_fail"])
    steps = [result("c1", (1.0,)), result("c2", (2.0,)), result("c4", (3.0,), verdict="FAIL")]
    finding = search_finding(1, spec, [64, 128, 256, 512], steps, "an SLO failed")
    assert (finding.boundary, finding.boundary_candidate) == (128, "c2")
    assert finding.values == (64, 128, 256)
    unstopped = search_finding(1, spec, [64, 128], steps[:2], None)
    assert (unstopped.boundary, unstopped.boundary_candidate) == (128, "c2")
    first = search_finding(1, spec, [64], [steps[2]], "an SLO failed")
    assert first.boundary is None and first.boundary_candidate is None


def test_ranking_calls_a_candidate_worse_only_when_trials_show_it() -> None:
    clear = rank_candidates([result("c1", (10.0, 10.2, 10.1, 9.9, 10.3)),
                             result("c2", (5.0, 5.1, 4.9, 5.2, 5.0))])
    assert clear.best == "c1" and clear.tied_with_best == ()
    assert clear.entries[1].versus_best.significant
    assert clear.entries[1].standing == "significantly worse than the best"
    ratio = clear.entries[1].versus_best.ratio
    assert ratio.ci_low < 0.5 < ratio.ci_high < 1.0
    assert clear.entries[1].versus_best.test == "welch-log"  # compare.test's default
    # two trials each: Welch tests them (and finds no difference here); the rank test cannot
    close = [result("c1", (5.0, 5.2)), result("c2", (5.3, 5.1))]
    welch = rank_candidates(close)
    assert welch.best == "c2" and welch.tied_with_best == ("c1",)
    assert welch.entries[1].standing == "~ not significantly different from the best"
    ranks = rank_candidates(close, test="mann-whitney")
    assert ranks.tied_with_best == ("c1",)
    assert ranks.entries[1].standing.startswith("~ too few trials")
    # one trial each: no test at all, ordered by median, called a tie
    single = rank_candidates([result("c1", (5.0,)), result("c2", (9.0,))])
    assert single.best == "c2" and single.entries[1].standing.startswith("~ too few trials")


def test_ineligible_candidates_are_never_recommended() -> None:
    ranking = rank_candidates([result("c1", (9.0, 9.0)), result("c2", (20.0, 21.0),
                                                               verdict="FAIL"),
                               result("c3", (), failures=("CUDA out of memory",))])
    assert ranking.best == "c1"
    assert [(e.name, e.eligible) for e in ranking.entries] == [
        ("c1", True), ("c2", False), ("c3", False)]
    assert ranking.entries[1].why_ineligible == "an SLO failed"
    assert ranking.entries[2].why_ineligible.startswith("server did not start")
    assert rank_candidates([result("c2", (1.0,), verdict="FAIL")]).best is None


def test_pareto_front_keeps_only_undominated_points() -> None:
    points = {"a": (100.0, 0.5), "b": (200.0, 0.8), "c": (150.0, 0.9), "d": (50.0, 0.4),
              "e": (float("nan"), 0.1)}
    assert pareto_front(points) == ["d", "a", "b"]  # c: b has more throughput, less latency


def test_tune_section_is_validated() -> None:
    base = {"name": "t"}
    with pytest.raises(ValidationError, match=r"grid.*or a search"):
        Scenario.model_validate({**base, "tune": {}})
    with pytest.raises(ValidationError, match="baseline alone has nothing to compare"):
        Scenario.model_validate({**base, "tune": {"baseline": True}})
    with pytest.raises(ValidationError, match="exactly one of factor"):
        Scenario.model_validate({**base, "tune": {"search": [
            {"arg": "max-num-seqs", "start": 4, "factor": 2, "step": 1, "until": ["slo_fail"]}]}})
    with pytest.raises(ValidationError, match="repeats a value"):
        Scenario.model_validate({**base, "tune": {"grid": {"block-size": [16, 16]}}})
    with pytest.raises(ValidationError, match="lists no values"):
        Scenario.model_validate({**base, "tune": {"grid": {"block-size": []}}})
    with pytest.raises(ValidationError, match="more than max_candidates"):
        Scenario.model_validate({**base, "tune": {"max_candidates": 3, "grid": {
            "block-size": [16, 32], "max-num-seqs": [1, 2]}}})
    with pytest.raises(ValidationError, match="until"):
        Scenario.model_validate({**base, "tune": {"search": [
            {"arg": "max-num-seqs", "start": 4, "factor": 2, "until": ["banana"]}]}})
    with pytest.raises(ValidationError, match="do not mix"):
        Scenario.model_validate({**base, "variants": {"a": {}},
                                 "tune": {"grid": {"block-size": [16]}}})
    ok = Scenario.model_validate({**base, "tune": {"grid": {"block-size": [16, 32]}}})
    assert "tune" not in Scenario.model_validate({**base}).to_yaml_dict()
    assert Scenario.model_validate(ok.to_yaml_dict()) == ok


def tune_result(candidates: list[CandidateResult], interrupted: bool = False,
                baseline: bool = False, test: str = "welch-log") -> TuneResult:
    scenario = Scenario.model_validate({
        "name": "t", "slo": {"ttft": ["p50 < 1s"]}, "compare": {"test": test},
        "tune": {"grid": {"max-num-seqs": [2, 8]}, "trials": 4, "baseline": baseline}})
    return TuneResult(scenario, "20261201T000000Z-t-tune", 4, candidates, [], "ttft.p50",
                      "output_throughput.mean", interrupted, "/models/tiny")


def test_tune_outputs_rank_recommend_and_write_a_config(tmp_path: Path) -> None:
    candidates = [result("c2", (5.0, 5.1, 5.2, 4.9), args={"max-num-seqs": 2, "block-size": 128}),
                  result("c8", (9.0, 9.1, 9.3, 8.8), args={"max-num-seqs": 8, "block-size": 128})]
    document, text, view = build_tune(tune_result(candidates))
    assert document["recommended"]["candidate"] == "c8"
    assert document["test"] == "welch-log"
    jsonschema.validate(document, TUNE_SCHEMA)
    assert document["recommended"]["command"] == \
        "vllm serve /models/tiny --max-num-seqs 8 --block-size 128"
    assert document["exit_code"] == 0
    assert [r["name"] for r in document["ranking"]] == ["c8", "c2"]
    # 4 + 4 trials, ×0.55: the worse one is significantly worse
    assert document["ranking"][1]["ratio_to_best"]["significant"]
    assert "recommended: c8" in text and "vllm serve /models/tiny" in text
    assert "objective goodput · vs best: welch-log, Holm, alpha 0.05" in text.splitlines()[0]
    assert view.command == document["recommended"]["command"]
    assert not any("too few valid trials" in w for w in document["warnings"])
    _, _, one = build_tune(tune_result([result("c2", (5.0,)), result("c8", (9.0,))]))
    assert any(w.startswith("c2: too few valid trials ever to differ significantly") and
               "welch-log" in w for w in one.warnings)
    two = [result("c2", (5.0, 5.1)), result("c8", (9.0, 9.1))]
    assert not any("too few" in w for w in build_tune(tune_result(two))[2].warnings)
    ranks = build_tune(tune_result(two, test="mann-whitney"))[2]
    assert any("mann-whitney" in w and "4 + 4 trials pass alone" in w for w in ranks.warnings)
    written = write_tune(tmp_path, tune_result(candidates))  # no trial folders: no experiment
    assert json.loads(written.summary_path.read_text()) == written.summary
    assert (tmp_path / "recommended-command.txt").read_text().startswith("vllm serve")
    config = (tmp_path / "recommended.yaml").read_text()
    assert "max-num-seqs: 8" in config and "block-size: 128" in config
    assert "c8" in written.report_path.read_text()


def test_tune_exit_codes() -> None:
    failing = [result("c2", (5.0,), verdict="FAIL"), result("c8", (9.0,), verdict="FAIL")]
    assert build_tune(tune_result(failing))[0]["exit_code"] == 1
    assert build_tune(tune_result(failing))[0]["recommended"] is None
    unclear = [result("c2", (5.0,), verdict="INCONCLUSIVE")]
    assert build_tune(tune_result(unclear))[0]["exit_code"] == 3
    assert build_tune(tune_result([result("c2", (5.0,))], interrupted=True))[0][
        "exit_code"] == 4
    none_started = [result("c2", (), failures=("KV cache too small",))]
    assert build_tune(tune_result(none_started))[0]["exit_code"] == 4


def given(values: tuple[float, ...], failures: tuple[str, ...] = (),
          verdict: str = "PASS") -> CandidateResult:
    """The scenario's own args (nothing changed), as tune.baseline runs them."""
    return CandidateResult(name="c01", origin=GIVEN_ORIGIN, changed={},
                           args={"max-num-seqs": 4}, objective_values=values,
                           start_failures=failures, slo_verdict=verdict, preemptions=0.0,
                           throughput_values=tuple(100 * v for v in values),
                           latency_values=(0.1,) * len(values))


def test_the_gain_over_the_scenarios_own_args_is_best_over_given_per_trial(tmp_path: Path
                                                                          ) -> None:
    """4 + 4 trials, best at ~4.0x the as-given goodput: the gain is best / given with its
    interval, the ranking's comparison of the pair turned round (one comparison in the family
    here, Welch on the logarithms: significant)."""
    candidates = [given((2.0, 2.1, 2.2, 2.3)),
                  result("c02", (8.5, 8.6, 8.7, 8.8), args={"max-num-seqs": 8})]
    ranking = rank_candidates(candidates)
    gain = gain_over_given(candidates, ranking)
    assert gain is not None and (gain.given, gain.best) == ("c01", "c02")
    versus_best = ranking.entries[1].versus_best  # c01 / c02 in the ranking
    assert versus_best is not None and gain.ratio is not None and gain.holm
    assert gain.ratio == pytest.approx(1 / versus_best.ratio.value)
    assert (gain.ci_low, gain.ci_high) == pytest.approx((1 / versus_best.ratio.ci_high,
                                                         1 / versus_best.ratio.ci_low))
    assert 3.7 < gain.ratio < 4.4 and gain.ci_low > 1.0
    assert gain.p_value == pytest.approx(versus_best.p_adjusted) and gain.significant
    assert gain.p_value < 0.001  # Welch; the rank test's smallest p at 4 + 4 is 2/70
    document, text, view = build_tune(tune_result(candidates, baseline=True))
    jsonschema.validate(document, TUNE_SCHEMA)
    assert document["gain_over_given"]["ratio"]["value"] == pytest.approx(gain.ratio)
    assert document["gain_over_given"]["significant"] is True
    assert document["gain_over_given"]["holm"] is True
    assert "gain over the scenario's own args: c02 over c01 (as given): ×4." in text
    assert ("(significant, Holm over the ranking's comparisons with the best; the best was "
            "picked by these trials") in text
    assert view.gain.startswith("c02 over c01 (as given): ×4.")
    page = write_tune(tmp_path, tune_result(candidates, baseline=True)).report_path.read_text()
    assert "<p id=\"gain\">Gain over the scenario's own args: c02 over c01 (as given): ×4." \
        in page
    # 1 + 1 trials: a ratio, but no test can decide it; and the as-given candidate as the best
    few = build_tune(tune_result([given((2.0,)), result("c02", (8.5,))]))[0]
    assert few["gain_over_given"]["testable"] is False
    assert few["gain_over_given"]["ratio"]["value"] > 1.0
    best = build_tune(tune_result([given((9.0, 9.1)), result("c02", (8.5, 8.6))]))
    assert best[0]["gain_over_given"] == {"given": "c01", "best": "c01", "ratio": None,
                                          "p_value": None, "holm": False, "significant": False,
                                          "testable": False}
    assert "c01 is the scenario's own args (as given): no gain from tuning here" in best[1]


def test_the_gain_never_contradicts_the_ranking() -> None:
    """Three eligible candidates, 4 trials each, the rank test (compare.test: mann-whitney):
    the as-given one is in the ranking's Holm family of two comparisons with the best, so the
    gain carries the adjusted p (2/70 x 2 = 0.057: not significant), as the ranking calls the
    pair a tie; an unadjusted 0.029 would call the same pair different on the same page."""
    candidates = [given((2.0, 2.1, 1.9, 2.2)),
                  result("c02", (6.0, 6.2, 5.8, 6.1), args={"max-num-seqs": 8}),
                  result("c03", (7.0, 6.6, 7.2, 6.9), args={"max-num-seqs": 32})]
    document, text, _ = build_tune(tune_result(candidates, baseline=True, test="mann-whitney"))
    gain = document["gain_over_given"]
    assert (gain["best"], gain["holm"], gain["significant"]) == ("c03", True, False)
    assert gain["p_value"] == pytest.approx(4 / 70)
    ranked = {r["name"]: r for r in document["ranking"]}
    assert ranked["c01"]["ratio_to_best"]["p_adjusted"] == pytest.approx(gain["p_value"])
    assert ranked["c01"]["ratio_to_best"]["significant"] is False
    # 4 + 4 in a family of two can never reach p < 0.05: the ranking's tie, said alike
    assert "c03 over c01 (as given): ×3.38, p=0.057 (too few trials to tell, Holm" in text


def test_an_ineligible_as_given_candidate_is_one_comparison_of_its_own() -> None:
    """The scenario's own args failed an SLO (not eligible, not in the ranking's family): the
    gain is their own comparison with the best, unadjusted, and says so."""
    candidates = [given((2.0, 2.1, 2.2, 2.3), verdict="FAIL"),
                  result("c02", (8.5, 8.6, 8.7, 8.8), args={"max-num-seqs": 8}),
                  result("c03", (8.0, 8.1, 8.2, 8.3), args={"max-num-seqs": 16})]
    document, text, _ = build_tune(tune_result(candidates, baseline=True))
    gain = document["gain_over_given"]
    assert (gain["best"], gain["holm"], gain["significant"]) == ("c02", False, True)
    alone = compare_trials(np.array([2.0, 2.1, 2.2, 2.3]), np.array([8.5, 8.6, 8.7, 8.8]),
                           test="welch-log")
    assert gain["p_value"] == pytest.approx(alone.p_value)  # Welch, unadjusted
    assert 3.7 < gain["ratio"]["value"] < 4.4
    assert "one comparison: the as-given args are not eligible" in text


def test_without_a_valid_as_given_candidate_there_is_no_gain_and_baseline_says_why() -> None:
    others = [result("c02", (8.5, 8.6), args={"max-num-seqs": 8})]
    assert build_tune(tune_result(others, baseline=True))[0]["gain_over_given"] is None
    document = build_tune(tune_result([given((), failures=("CUDA out of memory",)), *others],
                                      baseline=True))[0]
    assert document["gain_over_given"] is None
    assert any("c01, as given) ran no valid trial (its server did not start)" in w
               for w in document["warnings"])
    assert document["recommended"]["candidate"] == "c02"


def test_candidates_from_different_machines_are_named_in_a_warning() -> None:
    """A tune resumed on another machine: its candidates' trials ran on different GPUs (by
    UUID); the summary names which ran where and asks for an A/B on one machine."""
    def on(name: str, values: tuple[float, ...], *gpus: str) -> CandidateResult:
        base = result(name, values, args={"max-num-seqs": int(name[1:])})
        return CandidateResult(name=base.name, origin=base.origin, changed=base.changed,
                               args=base.args, objective_values=values, gpu_sets=gpus)

    one_machine = [on("c1", (1.0, 1.1), "GPU-aaaaaaaaaaaa-1"), on("c2", (2.0, 2.1),
                                                                  "GPU-aaaaaaaaaaaa-1")]
    assert machines_warning(one_machine) is None
    assert machines_warning([on("c1", (1.0,)), on("c2", (2.0,))]) is None  # CPU: unknown
    resumed = [*one_machine, on("c3", (3.0, 3.1), "GPU-bbbbbbbbbbbb-2"),
               on("c4", (2.5, 2.6), "GPU-aaaaaaaaaaaa-1", "GPU-bbbbbbbbbbbb-2")]
    warning = machines_warning(resumed)
    assert warning is not None and warning.startswith("the trials ran on 2 different sets")
    assert "GPU-aaaaaaaa: c1 c2 c4; GPU-bbbbbbbb: c3 c4" in warning
    document = build_tune(tune_result(resumed))[0]
    assert warning in document["warnings"]
    assert document["candidates"][3]["gpu_sets"] == ["GPU-aaaaaaaaaaaa-1", "GPU-bbbbbbbbbbbb-2"]
    jsonschema.validate(document, TUNE_SCHEMA)


def test_four_trials_bound_a_small_gain_on_the_h200_tunes_own_values() -> None:
    """The per-trial output tok/s of the H200 tune of 2026-12-04 (vLLM's defaults c01,
    max-num-batched-tokens 4096 c02, 8192 c03 with one trial cut short; results/h200):
    4 trials a candidate give the gain an interval with Welch (Holm over 2), and it is far from
    the guides' ×2; the rank test at 4 + 4 in a family of two can give none."""
    candidates = [given((5127.6, 5127.0, 4980.2, 5126.6)),
                  result("c02", (5205.8, 5102.3, 5148.9, 5201.5), args={"max-num-seqs": 8}),
                  result("c03", (5071.9, 5146.6, 5048.3), args={"max-num-seqs": 32})]
    gain = build_tune(tune_result(candidates, baseline=True))[0]["gain_over_given"]
    ratio = gain["ratio"]
    assert (gain["best"], gain["testable"], gain["significant"]) == ("c02", True, False)
    assert ratio["ci_low"] < 1.0 < ratio["ci_high"] < 1.1 and ratio["confidence"] == 0.975
    ranks = build_tune(tune_result(candidates, baseline=True, test="mann-whitney"))[0]
    assert ranks["gain_over_given"]["testable"] is False
    assert ranks["gain_over_given"]["ratio"]["ci_high"] is None


def test_same_server_is_the_ran_args_plus_flags_at_their_stated_values() -> None:
    ran = {"max-model-len": 4096}
    stated = {"max-model-len": 4096, "max-num-batched-tokens": 8192,
              "enable-prefix-caching": True}
    assert same_server({**ran, "max-num-batched-tokens": 8192}, ran, stated)
    assert same_server({**ran, "max-num-batched-tokens": 8192.0}, ran, stated)  # a factor's
    assert not same_server({**ran, "max-num-batched-tokens": 4096}, ran, stated)
    assert not same_server(ran, ran, stated)  # the same args: a key match, not this rule
    assert not same_server({**ran, "max-num-seqs": 256}, ran, stated)  # a flag not stated
    assert not same_server({"max-model-len": 2048, "max-num-batched-tokens": 8192}, ran,
                           stated)  # a flag it set, changed
    assert not same_server({"max-num-batched-tokens": 8192}, ran, stated)  # one it set, gone
    assert same_server({**ran, "enable-prefix-caching": True}, ran, stated)
    assert not same_server({**ran, "enable-prefix-caching": 1}, ran, stated)  # not a bool
