"""The tune's orchestration (vllm_slo/tuner.py) with its trials replaced by made-up results:
grid trials interleaved, each search started from the best candidate so far, a step equal to
an earlier candidate not run again, the stop and its boundary, and the errors a user can
make. Real servers and trials: tests/integration/test_tune_vllm_cpu.py."""

from __future__ import annotations

import json
from pathlib import Path

import jsonschema
import pytest

from vllm_slo import tuner
from vllm_slo.analysis.tuning import CandidateResult
from vllm_slo.analysis.verdicts import INTERRUPTED_REASON
from vllm_slo.reports.run_report import RenderedRun
from vllm_slo.scenarios.errors import ScenarioError
from vllm_slo.scenarios.model import Scenario

TUNE_SCHEMA = json.loads((Path(__file__).resolve().parents[2] / "reports" / "schema" /
                          "tune.schema.json").read_text())
SCENARIO = {
    "name": "t", "server": {"model": "tiny", "args": {"max-model-len": 2048}},
    "slo": {"e2e": ["p50 < 5s"]},
    "tune": {"trials": 2, "grid": {"max-num-seqs": [2, 8],
                                   "enable-prefix-caching": [True, False]},
             "search": [{"arg": "max-num-seqs", "start": 4, "factor": 2, "max": 64,
                         "until": ["slo_fail"]}]},
}


class FakeTune(tuner.Tune):
    """Trials recorded, not run; a candidate's goodput is its max-num-seqs (+0.5 with prefix
    caching) and its SLO fails from 16 sequences on."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.trials_run: list[tuple[str, int]] = []

    def _trial(self, candidate, trial) -> None:
        self.trials_run.append((candidate.name, trial))

    def result(self, candidate) -> CandidateResult:
        seqs = candidate.args["max-num-seqs"]
        goodput = seqs + (0.5 if candidate.args.get("enable-prefix-caching") else 0.0)
        return CandidateResult(name=candidate.name, origin=candidate.origin,
                               changed=candidate.changed, args=candidate.args,
                               objective_values=(goodput, goodput + 0.1),
                               slo_verdict="FAIL" if seqs >= 16 else "PASS", preemptions=0.0,
                               throughput_values=(100.0 * goodput,) * 2,
                               latency_values=(1.0 / goodput,) * 2)


@pytest.fixture(autouse=True)
def no_vllm(monkeypatch) -> None:
    monkeypatch.setattr(tuner, "validate_server_args", lambda specs, platform: None)
    monkeypatch.setattr(tuner, "resolve_model_path", lambda spec: "/models/tiny")


def test_grid_then_search_from_the_best(tmp_path: Path) -> None:
    tune = FakeTune(Scenario.model_validate(SCENARIO), tmp_path, lambda text: None)
    outcome = tune.run()
    # the grid interleaved A B C D D C B A; the best is c03 (8 sequences, prefix caching);
    # the search from it: 4 (new), 8 (= c03: not run again), 16 (new, its SLO fails: stop)
    assert tune.trials_run == [("c01", 1), ("c02", 1), ("c03", 1), ("c04", 1),
                               ("c04", 2), ("c03", 2), ("c02", 2), ("c01", 2),
                               ("c05", 1), ("c05", 2), ("c06", 1), ("c06", 2)]
    assert tune.candidates["c03"].args == {"max-model-len": 2048, "max-num-seqs": 8,
                                           "enable-prefix-caching": True}
    assert tune.candidates["c05"].changed == {"max-num-seqs": 4, "enable-prefix-caching": True}
    assert tune.candidates["c06"].changed == {"max-num-seqs": 16, "enable-prefix-caching": True}
    document = json.loads((tmp_path / "tune.json").read_text())
    jsonschema.validate(document, TUNE_SCHEMA)
    (search,) = document["searches"]
    assert search["values"] == [4, 8, 16] and search["candidates"] == ["c05", "c03", "c06"]
    assert (search["boundary"], search["boundary_candidate"]) == (8, "c03")
    assert search["stop"] == "an SLO failed"
    assert document["recommended"]["candidate"] == "c03"
    assert document["recommended"]["command"] == (
        "vllm serve /models/tiny --max-model-len 2048 --max-num-seqs 8 --enable-prefix-caching")
    assert outcome.exit_code == 0
    saved = json.loads((tmp_path / "candidates.json").read_text())
    assert list(saved) == ["c01", "c02", "c03", "c04", "c05", "c06"]
    assert saved["c06"]["origin"] == "search 1 (max-num-seqs) step 3"


def test_a_search_alone_starts_from_the_scenarios_own_args(tmp_path: Path) -> None:
    document = {**SCENARIO, "tune": {"trials": 1, "search": [
        {"arg": "max-num-seqs", "start": 2, "factor": 2, "until": ["slo_fail"]}]}}
    tune = FakeTune(Scenario.model_validate(document), tmp_path, lambda text: None)
    tune.run()
    assert [args["max-num-seqs"] for args in (c.args for c in tune.candidates.values())] == \
        [2, 4, 8, 16]
    assert json.loads((tmp_path / "tune.json").read_text())["searches"][0]["boundary"] == 8


def test_baseline_runs_the_scenarios_own_args_first_among_the_grid(tmp_path: Path,
                                                                     monkeypatch) -> None:
    """tune.baseline: the scenario's own args are candidate c01 ("as given"), checked by vLLM's
    parser with the grid and interleaved with it; a grid point equal to them is that one
    candidate; tune.json states the recommendation's gain over it."""
    checked: list[str] = []
    monkeypatch.setattr(tuner, "validate_server_args",
                        lambda specs, platform: checked.extend(label for label, _ in specs))
    document = {**SCENARIO, "server": {"model": "tiny", "args": {"max-model-len": 2048,
                                                                  "max-num-seqs": 2}},
                "tune": {"trials": 2, "baseline": True,
                         "grid": {"max-num-seqs": [2, 8]}}}
    tune = FakeTune(Scenario.model_validate(document), tmp_path, lambda text: None)
    tune.run()
    assert checked[:3] == ["grid point 1", "grid point 2", "as given"]
    # max-num-seqs 2 is the scenario's own value: that grid point is c01, not a new candidate
    assert list(tune.candidates) == ["c01", "c02"]
    assert (tune.candidates["c01"].origin, tune.candidates["c01"].changed) == ("as given", {})
    assert tune.trials_run == [("c01", 1), ("c02", 1), ("c02", 2), ("c01", 2)]
    gain = json.loads((tmp_path / "tune.json").read_text())["gain_over_given"]
    assert (gain["given"], gain["best"]) == ("c01", "c02")
    assert gain["ratio"]["value"] == pytest.approx(8.05 / 2.05, rel=0.02)
    # a search alone from the scenario's own args: they run first, as a candidate of their own
    alone = {**document, "tune": {"trials": 1, "baseline": True, "search": [
        {"arg": "max-num-seqs", "start": 4, "factor": 2, "until": ["slo_fail"]}]}}
    searched = FakeTune(Scenario.model_validate(alone), tmp_path / "alone", lambda text: None)
    (tmp_path / "alone").mkdir()
    searched.run()
    assert searched.trials_run == [("c01", 1), ("c02", 1), ("c03", 1), ("c04", 1)]
    assert [c.args["max-num-seqs"] for c in searched.candidates.values()] == [2, 4, 8, 16]


def test_a_signal_before_a_trials_own_handling_is_an_interrupted_tune(tmp_path: Path,
                                                                       monkeypatch) -> None:
    """SIGTERM at a trial's start (the claims watchdog's moment): the KeyboardInterrupt comes
    out of run_trial itself; the tune still stops as interrupted and writes its report."""
    def run_trial(arm, folder, say):  # type: ignore[no-untyped-def]
        folder.mkdir(parents=True)
        raise KeyboardInterrupt

    monkeypatch.setattr(tuner, "run_trial", run_trial)
    said: list[str] = []
    outcome = tuner.Tune(Scenario.model_validate(SCENARIO), tmp_path, said.append).run()
    assert int(outcome.exit_code) == 4
    assert json.loads((tmp_path / "tune.json").read_text())["interrupted"] is True
    assert any("interrupted: no further trials; continue with" in line for line in said)


def test_each_candidates_gpus_come_from_its_trials_provenance(tmp_path: Path,
                                                               monkeypatch) -> None:
    """Real trial folders (synthetic rows), the grid's second candidate's trials on another
    GPU (a tune resumed elsewhere): each candidate's GPU UUID sets are read from its trials'
    provenance and the tune warns that the comparison includes the machine."""
    from tests.support.synthetic import write_synthetic_trial
    from vllm_slo.scenarios.errors import ExitCode

    def run_trial(arm, folder, say):  # type: ignore[no-untyped-def]
        seqs = arm.server.args["max-num-seqs"]
        gpu = "GPU-aaaaaaaaaaaa" if seqs == 2 else "GPU-bbbbbbbbbbbb"
        write_synthetic_trial(folder, arm.to_yaml_dict(), 0.05 * seqs, 1.0,
                              seed=int(folder.name[:3]),
                              provenance={"host": {"gpus": ["NVIDIA H200"], "gpu_uuids": [gpu]}})
        return ExitCode.PASS, RenderedRun({"invalid_reasons": []}, "", folder / "report.html",
                                          folder / "summary.json")

    monkeypatch.setattr(tuner, "run_trial", run_trial)
    document = {**SCENARIO, "tune": {"trials": 2, "grid": {"max-num-seqs": [2, 8]}}}
    tuner.Tune(Scenario.model_validate(document), tmp_path, lambda text: None).run()
    tune = json.loads((tmp_path / "tune.json").read_text())
    assert [c["gpu_sets"] for c in tune["candidates"]] == [["GPU-aaaaaaaaaaaa"],
                                                           ["GPU-bbbbbbbbbbbb"]]
    assert any("ran on 2 different sets of GPUs (GPU-aaaaaaaa: c01; GPU-bbbbbbbb: c02)" in w
               for w in tune["warnings"])


DOUBLING = {  # the guide's max-num-batched-tokens doubling from vLLM's defaults (h200-tune)
    "name": "t", "server": {"model": "tiny", "args": {"max-model-len": 4096}},
    "slo": {"e2e": ["p50 < 5s"]},
    "tune": {"trials": 2, "baseline": True, "search": [
        {"arg": "max-num-batched-tokens", "start": "max-model-len", "factor": 2,
         "max": 65536, "until": ["no_gain"]}]},
}


class DefaultsTune(tuner.Tune):
    """Trials recorded, not run; every server states vLLM's default token budget, 8192 (as the
    H200's did), and throughput falls as the budget rises from 4096."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.trials_run: list[tuple[str, int]] = []

    def _trial(self, candidate, trial) -> None:
        self.trials_run.append((candidate.name, trial))

    def effective_args(self, name: str) -> dict:
        return {"max-model-len": 4096, "max-num-batched-tokens": 8192,
                "enable-chunked-prefill": True}

    def result(self, candidate) -> CandidateResult:
        budget = candidate.args.get("max-num-batched-tokens", 8192)
        value = {4096: 10.0, 8192: 9.0, 16384: 8.0}[budget]
        return CandidateResult(name=candidate.name, origin=candidate.origin,
                               changed=candidate.changed, args=candidate.args,
                               objective_values=(value, value + 0.1), slo_verdict="PASS",
                               preemptions=0.0, throughput_values=(value,) * 2,
                               latency_values=(1.0 / value,) * 2)


def test_a_search_step_at_vllms_own_default_is_the_as_given_candidate(tmp_path: Path) -> None:
    """The doubling from max-model-len reaches 8192, the value vLLM's defaults already ran with
    (the server's own log): that step is c01, whose trials are not run again; the search
    judges it as a step and stops on no gain (on 2026-12-04 it cost the H200 tune a candidate,
    4 trials, the A/A c03)."""
    said: list[str] = []
    tune = DefaultsTune(Scenario.model_validate(DOUBLING), tmp_path, said.append)
    tune.run()
    assert tune.trials_run == [("c01", 1), ("c01", 2), ("c02", 1), ("c02", 2)]
    assert list(tune.candidates) == ["c01", "c02"]
    assert any("max-num-batched-tokens=8192 is what c01's server ran with" in line
               for line in said)
    (search,) = json.loads((tmp_path / "tune.json").read_text())["searches"]
    assert search["values"] == [4096, 8192] and search["candidates"] == ["c02", "c01"]
    assert (search["boundary"], search["stop"]) == (4096, "the objective did not rise")
    assert list(json.loads((tmp_path / "candidates.json").read_text())) == ["c01", "c02"]


def test_a_folder_that_ran_the_default_as_its_own_candidate_replays_as_it_ran(
        tmp_path: Path) -> None:
    """A tune folder written before the rule (the H200 tune's c03, max-num-batched-tokens 8192
    spelled out): its candidates.json names that candidate, so a resume or a report replays it
    under its own name and with its own trials, not as c01."""
    base = {"max-model-len": 4096}
    (tmp_path / "candidates.json").write_text(json.dumps({
        "c01": {"args": base, "changed": {}, "origin": "as given"},
        "c02": {"args": {**base, "max-num-batched-tokens": 4096}, "changed": {}, "origin": "s"},
        "c03": {"args": {**base, "max-num-batched-tokens": 8192}, "changed": {}, "origin": "s"},
    }))
    tune = DefaultsTune(Scenario.model_validate(DOUBLING), tmp_path, lambda text: None)
    tune.run()
    assert list(tune.candidates) == ["c01", "c02", "c03"]
    assert tune.trials_run[-2:] == [("c03", 1), ("c03", 2)]


def test_a_candidates_effective_args_come_from_its_trials_server_facts(tmp_path: Path) -> None:
    tune = tuner.Tune(Scenario.model_validate(DOUBLING), tmp_path, lambda text: None)
    damaged, stated = tmp_path / "001-c01-1", tmp_path / "002-c01-2"
    for folder in (damaged, stated):
        folder.mkdir()
    (damaged / "server_facts.json").write_text("{not json")
    (stated / "server_facts.json").write_text(json.dumps(
        {"vllm_version": "0.26.0", "max_num_batched_tokens": 8192, "block_size": 16,
         "max_seq_len": 4096, "enable_chunked_prefill": True, "kv_cache_tokens": 235632,
         "enforce_eager": None}))
    tune.folders["c01"] = [damaged, stated]
    assert tune.effective_args("c01") == {
        "max-num-batched-tokens": 8192, "block-size": 16, "max-model-len": 4096,
        "enable-chunked-prefill": True}
    tune.folders["c02"] = [tmp_path / "missing"]
    assert tune.effective_args("c02") == {}


def test_a_search_from_an_unset_arg_is_a_usage_error(tmp_path: Path) -> None:
    document = {**SCENARIO, "tune": {"search": [
        {"arg": "max-num-batched-tokens", "start": "max-num-seqs", "factor": 2,
         "until": ["preemptions"]}]}}
    tune = FakeTune(Scenario.model_validate(document), tmp_path, lambda text: None)
    with pytest.raises(ScenarioError, match=r"tune.search\[0\].*max-num-seqs"):
        tune.run()


def test_tune_needs_a_tune_section_and_a_launched_server(tmp_path: Path) -> None:
    with pytest.raises(ScenarioError, match="no tune section"):
        tuner.run_tune(Scenario.model_validate({"name": "t"}), tmp_path)
    attached = {**SCENARIO, "server": {"url": "http://127.0.0.1:8000"}}
    with pytest.raises(ScenarioError, match="attach mode"):
        tuner.run_tune(Scenario.model_validate(attached), tmp_path)
    assert list(tmp_path.iterdir()) == []  # refused before a folder was made
    with pytest.raises(ScenarioError, match="not a tune folder"):
        tuner.tune_folder_scenario(tmp_path, [])


@pytest.mark.parametrize(("objective", "expected"), [
    ("goodput", 1.05), ("output_throughput", 76.075), ("request_throughput", 12.2)])
def test_a_trials_objective_is_read_from_its_summary_typed(tmp_path: Path, objective: str,
                                                          expected: float) -> None:
    """Each objective from a real summary.json (the golden run's), through RunRates; a trial
    cut by an interruption is not complete, a finished one is."""
    golden = Path(__file__).resolve().parent / "golden" / "summary.json"
    document = json.loads(golden.read_text())
    (tmp_path / "summary.json").write_text(json.dumps(document))
    assert tuner._objective_value(tmp_path, objective) == pytest.approx(expected)
    assert tuner._trial_complete(tmp_path)
    document["invalid_reasons"] = [INTERRUPTED_REASON]
    (tmp_path / "summary.json").write_text(json.dumps(document))
    assert not tuner._trial_complete(tmp_path)


def _tune_folder(tmp_path: Path, document: dict) -> Path:
    """A tune folder as run_tune writes it: tune.yaml through the redaction."""
    import yaml

    from vllm_slo.redaction import redact_secrets

    run_dir = tmp_path / "tune"
    run_dir.mkdir()
    (run_dir / "tune.yaml").write_text(yaml.safe_dump(
        redact_secrets(Scenario.model_validate(document).to_yaml_dict()), sort_keys=False))
    return run_dir


def test_tune_resume_refuses_hidden_credentials_and_takes_them_again(tmp_path: Path) -> None:
    """tune.yaml holds the API key as ***: resuming would launch every trial with it. Refused
    naming the key; given again on the resume line, the candidates launch with the real one
    (and `report` re-renders without it: nothing is launched)."""
    from vllm_slo.cli import main

    secret = {**SCENARIO, "server": {"model": "tiny",
                                     "args": {"max-model-len": 2048, "api-key": "sk-9"}}}
    run_dir = _tune_folder(tmp_path, secret)
    with pytest.raises(ScenarioError, match=r"server\.args\.api-key as \*\*\*.*"
                                            r"vllm-slo tune --resume .* server\.args\.api-key="):
        tuner.tune_folder_scenario(run_dir, [])
    assert main(["tune", "--resume", str(run_dir)]) == 2
    resumed = tuner.tune_folder_scenario(run_dir, ["server.args.api-key=sk-9"])
    assert resumed.server.args["api-key"] == "sk-9"
    assert tuner.tune_folder_scenario(run_dir).server.args["api-key"] == "***"


def test_tune_resume_of_a_damaged_tune_yaml_is_a_usage_error(tmp_path: Path) -> None:
    run_dir = _tune_folder(tmp_path, SCENARIO)
    (run_dir / "tune.yaml").write_text("name: t\ntune: {grid: [unclosed\n")
    with pytest.raises(ScenarioError, match=r"tune\.yaml is damaged or unreadable"):
        tuner.tune_folder_scenario(run_dir, [])
    with pytest.raises(ScenarioError, match=r"tune\.yaml is damaged or unreadable"):
        tuner.report_tune(run_dir)


def test_a_tune_trial_with_an_unreadable_summary_runs_again(tmp_path: Path) -> None:
    (tmp_path / "summary.json").write_text('{"exit_code": 0, "invalid_rea')
    assert not tuner._trial_complete(tmp_path)  # (was: JSONDecodeError, exit 4)
    said: list[str] = []
    assert not tuner._trial_complete(tmp_path, said.append)
    assert "summary.json is damaged or unreadable" in said[0] and "runs again" in said[0]
