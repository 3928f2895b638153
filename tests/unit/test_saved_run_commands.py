"""`compare`, `gate`, `plan` and `report` on saved folders (issue 24 items 4 and 7, issue 25
items 2 and 7): damaged folders end in exit 2 naming the file (or are read as far as the data
allow), out-of-range flags name their range, `compare` writes under --runs-dir and refuses
what `gate` refuses, both say which family Holm runs over, trials that share a server instance
are called within-instance, experiments write junit.xml and summary.md, and nothing says PASS
when no SLO was given."""

from __future__ import annotations

import dataclasses
import json
import shutil
import xml.etree.ElementTree as ET
from pathlib import Path

import numpy as np
import pytest
import yaml

from tests.support.synthetic import EXPERIMENT_OVERRIDES, write_synthetic_trial
from tests.support.synthetic import write_synthetic_experiment as experiment
from vllm_slo import cli
from vllm_slo.analysis.comparison import gate_values
from vllm_slo.reports.experiment_report import render_experiment
from vllm_slo.scenarios.errors import ExitCode
from vllm_slo.scenarios.loader import load_scenario
from vllm_slo.stats.statistics import Verdict
from vllm_slo.stats.trial_statistics import non_inferiority

BENCH = Path(__file__).resolve().parent / "data" / "vllm_bench"


def run_main(arguments: list[str]) -> tuple[int, str, str]:
    said: list[str] = []
    complained: list[str] = []
    code = cli.main(arguments, said.append, complained.append)
    return code, "\n".join(said), "\n".join(complained)


@pytest.fixture(scope="module")
def pristine(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """Two rendered single runs of one setting (TTFT 50 and 60 ms)."""
    root = tmp_path_factory.mktemp("pristine")
    scenario, _ = load_scenario("chat", EXPERIMENT_OVERRIDES)
    runs = []
    for name, ttft_s, seed in (("a", 0.05, 1), ("b", 0.06, 2)):
        write_synthetic_trial(root / name, scenario.to_yaml_dict(), ttft_s, 1.0, seed=seed)
        runs.append(root / name)
    return runs[0], runs[1]


@pytest.fixture
def runs(pristine: tuple[Path, Path], tmp_path: Path) -> tuple[Path, Path]:
    a, b = pristine
    return (Path(shutil.copytree(a, tmp_path / "a")), Path(shutil.copytree(b, tmp_path / "b")))


def _truncate_samples(run: Path) -> str:
    parquet = run / "samples.parquet"
    parquet.write_bytes(parquet.read_bytes()[: parquet.stat().st_size // 2])
    shutil.rmtree(run / "samples")  # no stream to fall back on either
    return "samples.parquet"


def _truncate_samples_keep_streams(run: Path) -> str:
    parquet = run / "samples.parquet"
    parquet.write_bytes(parquet.read_bytes()[: parquet.stat().st_size // 2])
    return "samples.parquet"


DAMAGE = {  # damage -> (what it does to a run folder, the file named)
    "scenario.yaml unparsable": (lambda r: (r / "scenario.yaml").write_text("name: [x\n"),
                                 "scenario.yaml"),
    "scenario.yaml binary": (lambda r: (r / "scenario.yaml").write_bytes(b"\xff\xfe\x00\x81"),
                             "scenario.yaml"),
    "scenario.yaml invalid": (lambda r: (r / "scenario.yaml").write_text("traffic: 3\n"),
                              "scenario.yaml"),
    "run_status.json": (lambda r: (r / "run_status.json").write_text('{"interrupted": '),
                        "run_status.json"),
    "provenance.json": (lambda r: (r / "provenance.json").write_text('{"seed": "seven"}'),
                        "provenance.json"),
    "samples.parquet truncated, no streams": (_truncate_samples, "samples.parquet"),
    "samples.parquet truncated, streams intact": (_truncate_samples_keep_streams,
                                                  "samples.parquet"),
}
USAGE = ExitCode.USAGE_ERROR
#: the exit code each command gives each damage (default: 2, naming the file); otherwise the
#: folder is read as far as its data allow. A damaged run_status.json: compare/gate/plan read
#: the outcome in summary.json, `report` (rebuilding it) calls the run invalid (exit 4: how it
#: ended is unknown); a damaged provenance.json: `report` leaves it out with a warning (None:
#: the intact run's exit code), comparing and gating need it (model, vLLM version, host,
#: instance); a damaged samples.parquet is read from intact streams. `plan` on one run (one
#: trial, one instance) cannot estimate the restart-to-restart variation: exit 3.
EXPECTED: dict[str, dict[str, int | None]] = {
    "run_status.json": {"compare": 0, "gate": 3, "plan": 3, "report": 4},
    "provenance.json": {"compare": USAGE, "gate": USAGE, "plan": USAGE, "report": None},
    "samples.parquet truncated, streams intact": {"compare": 0, "gate": 3, "plan": 3,
                                                  "report": None},
}


@pytest.mark.parametrize("damage", list(DAMAGE))
@pytest.mark.parametrize("command", ["compare", "gate", "plan", "report"])
def test_a_damaged_file_is_named_or_read_as_far_as_the_data_allow(
        runs, tmp_path: Path, damage: str, command: str) -> None:
    a, b = runs
    apply, named = DAMAGE[damage]
    intact_exit = json.loads((a / "summary.json").read_text())["exit_code"]
    apply(a)
    arguments = {"compare": ["compare", str(a), str(b)],
                 "gate": ["gate", str(a), "--baseline", str(b)],
                 "plan": ["plan", str(a)], "report": ["report", str(a)]}[command]
    code, said, complained = run_main(["--runs-dir", str(tmp_path / "out"), *arguments])
    expected = EXPECTED.get(damage, {}).get(command, USAGE)
    assert "Traceback" not in said + complained
    if expected == USAGE:
        assert code == USAGE, (said, complained)
        first = complained.splitlines()[0]  # a scenario's validation lists its problems below
        assert str(a / named) in first and ("damaged" in first or "invalid" in first), first
        return
    assert complained == "", complained
    assert code == (intact_exit if expected is None else expected), said
    if command == "report":  # the run report says what it could not read
        assert f"{named} is damaged" in said


@pytest.mark.parametrize("damage", ["missing", "not json", "wrong keys"])
def test_a_missing_or_invalid_summary_is_rebuilt_from_the_samples_in_memory(
        runs, tmp_path: Path, damage: str) -> None:
    a, b = runs
    summary = a / "summary.json"
    expected_exit = json.loads(summary.read_text())["exit_code"]
    {"missing": summary.unlink, "not json": lambda: summary.write_text("{"),
     "wrong keys": lambda: summary.write_text('{"exit_code": 0}')}[damage]()
    before = sorted(p.name for p in a.iterdir())
    code, said, complained = run_main(["--runs-dir", str(tmp_path / "out"), "compare",
                                       str(a), str(b)])
    assert code == ExitCode.PASS and complained == "", complained
    assert "n=1+1" in said
    assert sorted(p.name for p in a.iterdir()) == before  # nothing written into the run
    code, said, _ = run_main(["gate", str(a), "--baseline", str(b)])
    assert code == ExitCode.INCONCLUSIVE, said  # one trial a side: restart variation unseen
    from vllm_slo.reports.trial_folders import load_trial
    assert load_trial(a).outcome.exit_code == expected_exit


def test_an_empty_folder_a_file_and_a_missing_folder(runs, tmp_path: Path) -> None:
    a, _ = runs
    empty = tmp_path / "empty"
    empty.mkdir()
    afile = tmp_path / "file.txt"
    afile.write_text("x")
    for target, words in ((empty, "is not a vllm-slo run folder (no scenario.yaml)"),
                          (afile, "is a file, not a run folder"),
                          (tmp_path / "nowhere", "does not exist")):
        for arguments in (["compare", str(target), str(a)], ["gate", str(target),
                                                            "--baseline", str(a)],
                          ["plan", str(target)]):
            code, _, complained = run_main(["--runs-dir", str(tmp_path / "out"), *arguments])
            assert code == ExitCode.USAGE_ERROR and words in complained, (arguments, complained)
    (empty / "trials").mkdir()  # an experiment that never finished a trial
    code, _, complained = run_main(["plan", str(empty)])
    assert code == ExitCode.USAGE_ERROR and "holds no trial folder" in complained


@pytest.mark.parametrize(("flag", "value", "words"), [
    ("--margin", "-5%", "--margin -0.05 (-5.0%) is outside [0%, 100%)"),
    ("--margin", "500%", "--margin 5 (500.0%) is outside [0%, 100%)"),
    ("--alpha", "1.5", "--alpha 1.5 (150.0%) is outside (0%, 100%)"),
])
def test_gate_flags_out_of_range_name_the_range(runs, flag: str, value: str,
                                                words: str) -> None:
    a, b = runs
    code, _, complained = run_main(["gate", str(a), "--baseline", str(b), f"{flag}={value}"])
    assert code == ExitCode.USAGE_ERROR and words in complained, complained


def test_plan_flags_out_of_range(runs) -> None:
    a, _ = runs
    for arguments, words in ((["--effect=0%"], "--effect 0% asks for a change of nothing"),
                             (["--effect=-150%"], "--effect -1.5 (-150.0%) is outside"),
                             (["--margin=100%"], "--margin 1 (100.0%) is outside (0%, 100%)")):
        code, _, complained = run_main(["plan", str(a), *arguments])
        assert code == ExitCode.USAGE_ERROR and words in complained, complained


def test_compare_writes_under_runs_dir_and_never_inside_a_run(runs, tmp_path: Path) -> None:
    a, b = runs
    before = {run: sorted(p.name for p in run.iterdir()) for run in (a, b)}
    code, said, _ = run_main(["--runs-dir", str(tmp_path / "out"), "compare", str(a), str(b)])
    assert code == ExitCode.PASS
    written = list((tmp_path / "out").iterdir())
    assert len(written) == 1 and written[0].name.startswith("compare-")
    assert {"summary.json", "report.html", "junit.xml", "summary.md"} <= {
        p.name for p in written[0].iterdir()}
    assert f"report: {written[0] / 'report.html'}" in said
    assert {run: sorted(p.name for p in run.iterdir()) for run in (a, b)} == before
    code, _, complained = run_main(["--runs-dir", str(a / "inside"), "compare", str(a), str(b)])
    assert code == ExitCode.USAGE_ERROR and "would be inside the compared run" in complained
    (tmp_path / "file.txt").write_text("x")
    code, _, complained = run_main(["--runs-dir", str(tmp_path / "file.txt"), "compare",
                                    str(a), str(b)])
    assert code == ExitCode.USAGE_ERROR and "cannot create the comparison's folder" in complained


def test_a_compare_folder_inside_trials_breaks_neither_report_nor_compare(tmp_path: Path
                                                                         ) -> None:
    run = experiment(tmp_path / "exp", {"a": 0.05, "b": 0.06}, trials=2, noise=0.05)
    trials = sorted((run / "trials").iterdir())
    # what an older `compare trials/001-a-1 trials/002-b-1` left there
    code, _, _ = run_main(["compare", str(trials[0]), str(trials[1]), "--out",
                           str(run / "trials" / "compare-20261202T000000Z")])
    assert code == ExitCode.PASS
    assert (run / "trials" / "compare-20261202T000000Z" / "summary.json").is_file()
    code, _, complained = run_main(["report", str(run)])
    assert complained == "" and code in (0, 1, 3), complained
    code, _, complained = run_main(["--runs-dir", str(tmp_path / "out"), "compare",
                                       f"{run}", str(trials[0])])
    assert code == ExitCode.USAGE_ERROR and "with itself" in complained  # a trial of run


def test_compare_refuses_a_run_with_itself(runs, tmp_path: Path) -> None:
    a, _ = runs
    code, _, complained = run_main(["--runs-dir", str(tmp_path / "out"), "compare",
                                    str(a), str(a)])
    assert code == ExitCode.USAGE_ERROR and "refusing to compare a run with itself" in complained
    code, _, complained = run_main(["gate", str(a), "--baseline", str(a)])
    assert code == ExitCode.USAGE_ERROR and "against itself" in complained
    # one vllm bench file imported twice (or a run folder copied): the same measurement
    source = BENCH / "chat-rate8-trial1.json"
    for name in ("first", "again"):
        assert run_main(["import", "vllm-bench", str(source), "--out",
                         str(tmp_path / name)])[0] == ExitCode.PASS
    code, _, complained = run_main(["--runs-dir", str(tmp_path / "out"), "compare",
                                    str(tmp_path / "first"), str(tmp_path / "again")])
    assert code == ExitCode.USAGE_ERROR and "hold the vllm bench record" in complained


def test_compare_refuses_different_workloads_as_gate_does(tmp_path: Path) -> None:
    base = experiment(tmp_path / "base", {"x": 0.05}, trials=3, noise=0.05, seed=1)
    other = experiment(tmp_path / "long", {"x": 0.05}, trials=3, noise=0.05, seed=2,
                       overrides=["traffic.arrival.users=3"])
    code, _, compared = run_main(["--runs-dir", str(tmp_path / "out"), "compare",
                                  str(base), str(other)])
    assert code == ExitCode.USAGE_ERROR
    assert "refusing to compare runs of different workloads" in compared
    code, _, gated = run_main(["gate", str(other), "--baseline", str(base)])
    assert code == ExitCode.USAGE_ERROR
    mismatch = next(line.strip() for line in gated.splitlines() if "workload differs" in line)
    assert mismatch in compared  # one check, the same words
    code, said, _ = run_main(["--runs-dir", str(tmp_path / "out"), "compare", "--force",
                              str(base), str(other)])
    assert code == ExitCode.PASS and "warning: --force: " in said and "workload differs" in said


def test_different_scenario_names_are_said(tmp_path: Path) -> None:
    base = experiment(tmp_path / "base", {"x": 0.05}, trials=3, noise=0.05, seed=1)
    renamed = experiment(tmp_path / "renamed", {"x": 0.05}, trials=3, noise=0.05, seed=2,
                         scenario_patch={"name": "chat-candidate"})
    code, said, _ = run_main(["--runs-dir", str(tmp_path / "out"), "compare", str(base),
                              str(renamed)])
    assert code == ExitCode.PASS
    assert "different scenarios: candidate chat-candidate, baseline chat" in said
    code, said, _ = run_main(["gate", str(renamed), "--baseline", str(base)])
    assert code != ExitCode.USAGE_ERROR and "note: different scenarios" in said


def test_compare_and_gate_name_the_same_holm_family(tmp_path: Path) -> None:
    base = experiment(tmp_path / "base", {"x": 0.05}, trials=5, noise=0.01, seed=4)
    same = experiment(tmp_path / "same", {"x": 0.05}, trials=5, noise=0.01, seed=5)
    family = "Holm over the 2 compared cell(s) of each pair: ttft.p50, e2e.p50"
    _, compared, _ = run_main(["--runs-dir", str(tmp_path / "out"), "compare", str(base),
                               str(same), "--cells", "ttft.p50", "e2e.p50"])
    _, gated, _ = run_main(["gate", str(same), "--baseline", str(base), "--cells",
                            "ttft.p50", "e2e.p50"])
    assert family in compared and family in gated
    summary = json.loads(next((tmp_path / "out").glob("compare-*/summary.json")).read_text())
    assert summary["comparisons"][0]["holm_family"] == ["ttft.p50", "e2e.p50"]


def _fail_only_at_95(margin: float) -> tuple[np.ndarray, np.ndarray]:
    """Per-trial values of one cell whose 95% interval lies beyond 1 + margin but whose 97.5%
    interval does not (searched, then checked against non_inferiority itself)."""
    rng = np.random.default_rng(0)
    baseline = np.exp(rng.normal(0.0, 0.1, 5))
    for shift in np.linspace(0.0, 1.0, 2001):
        candidate = baseline[::-1] * np.exp(shift)
        at_95 = non_inferiority(candidate, baseline, margin, confidence=0.95).verdict
        at_975 = non_inferiority(candidate, baseline, margin, confidence=0.975).verdict
        if at_95 is Verdict.FAIL and at_975 is not Verdict.FAIL:
            return candidate, baseline
    raise AssertionError("no such shift")


def test_gate_fail_is_holm_corrected_over_its_cells() -> None:
    margin = 0.05
    marginal = _fail_only_at_95(margin)
    alone = gate_values({"ttft.p50": marginal}, margin)
    assert [g.result.verdict for g in alone] == [Verdict.FAIL]
    assert alone[0].result.ratio.confidence == pytest.approx(0.95)
    same = np.exp(np.linspace(-0.01, 0.01, 5))
    two = gate_values({"ttft.p50": marginal, "e2e.p50": (same, same)}, margin)
    assert two[0].result.verdict is Verdict.INCONCLUSIVE and two[0].not_after_holm
    assert two[1].result.verdict is Verdict.PASS
    clear = (same * 3.0, same)  # x3: beyond the margin at any level
    both = gate_values({"ttft.p50": clear, "e2e.p50": marginal}, margin)
    # step 1 at 97.5% fails the clear cell; step 2 at 95% then fails the marginal one
    assert [g.result.verdict for g in both] == [Verdict.FAIL, Verdict.FAIL]
    assert [g.holm_factor for g in both] == [2, 1]


def test_an_experiment_writes_junit_and_markdown_like_a_run(tmp_path: Path) -> None:
    run = experiment(tmp_path / "ab", {"fast": 0.05, "slow": 0.10}, trials=5, noise=0.05)
    rendered = render_experiment(run)
    assert rendered.junit_path == run / "junit.xml"
    root = ET.parse(run / "junit.xml").getroot()
    cases = {case.get("name"): case for case in root.iter("testcase")}
    regression = cases["slow vs fast: ttft.p50"].find("failure")
    assert regression is not None and regression.get("type") == "significant regression"
    assert "n=5+5" in (regression.get("message") or "")
    assert cases["slow vs fast: itl.p50"].find("failure") is None  # same gaps in both arms
    assert cases["[slow] ttft p50 < 80ms"].find("failure") is not None  # the SLO failed
    assert cases["[fast] ttft p50 < 80ms"].find("failure") is None
    assert cases["measurement is valid"].find("error") is None
    suite = root.find("testsuite")
    assert suite is not None and suite.get("failures") == str(sum(
        1 for case in cases.values() if case.find("failure") is not None))
    markdown = (run / "summary.md").read_text()
    assert markdown.startswith("### vllm-slo · experiment ab: **FAIL**")
    assert "**regression**" in markdown and "Holm over" in markdown


def _bench_copies(folder: Path, prefix: str, count: int) -> list[Path]:
    """`count` result files of one setting (the two committed trials, alternately)."""
    folder.mkdir(parents=True, exist_ok=True)
    files = []
    for k in range(count):
        source = BENCH / f"chat-rate8-trial{k % 2 + 1}.json"
        target = folder / f"{prefix}{k + 1}.json"
        target.write_text(source.read_text())
        files.append(target)
    return files


@pytest.fixture(scope="module")
def five_vs_five(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, list[str]]:
    root = tmp_path_factory.mktemp("bench")
    files = _bench_copies(root, "a", 5) + _bench_copies(root, "b", 5)
    variants = [f"--variant={f.stem[0]}={f}" for f in files]
    return root, variants


def test_five_vs_five_on_one_instance_per_side_says_so(five_vs_five) -> None:
    root, variants = five_vs_five
    out = root / "one-instance-each"
    code, said, complained = run_main(["import", "vllm-bench", *variants, "--out", str(out)])
    assert code == ExitCode.PASS, complained
    assert "b vs a: n=5+5 trials, 1+1 instances: within-instance" in said
    summary = json.loads((out / "summary.json").read_text())
    instances = summary["comparisons"][0]["instances"]
    assert (instances["baseline"], instances["candidate"], instances["scope"]) == (
        1, 1, "within-instance")
    assert any("not independent instances" in w for w in summary["warnings"])
    code, plan, _ = run_main(["plan", str(out)])
    assert code == ExitCode.INCONCLUSIVE  # no plan: it could not estimate
    assert "cannot estimate the restart-to-restart variation" in plan
    assert "a: 5 valid trial(s) on 1 instance(s)" in plan


def test_each_file_a_fresh_server_with_one_instance_flag(five_vs_five) -> None:
    root, variants = five_vs_five
    out = root / "fresh"
    code, said, complained = run_main(["import", "vllm-bench", *variants, "--out", str(out),
                                       "--instance", "{label}-{file}"])
    assert code == ExitCode.PASS, complained
    assert "b vs a: n=5+5 trials, 5+5 instances: between-instances" in said
    first = yaml.safe_load((out / "trials" / "001-a-1" / "scenario.yaml").read_text())
    assert first["server"]["instance"] == "a-a1"
    code, plan, _ = run_main(["plan", str(out)])
    assert code == ExitCode.PASS and "(5 instance(s))" in plan
    assert "(95% chi-square interval; 10 per-trial values, df 8)" in plan
    assert "trials per variant at the estimate" in plan and "at the upper bound" in plan


def test_instance_flag_errors(five_vs_five) -> None:
    root, variants = five_vs_five
    for extra, words in ((["--instance", "x", "--instance", "y"], "give one NAME for all"),
                         (["--instance", f"x={root / 'nope.json'}"], "is not one of the files"),
                         (["--instance", "{host}"], "unknown placeholder {host}")):
        code, _, complained = run_main(["import", "vllm-bench", *variants, "--out",
                                        str(root / "never"), *extra])
        assert code == ExitCode.USAGE_ERROR and words in complained, complained
        assert not (root / "never").exists()


def test_no_pass_word_without_an_slo(tmp_path: Path) -> None:
    out = tmp_path / "imported"
    code, said, _ = run_main(["import", "vllm-bench", str(BENCH / "chat-rate8-trial1.json"),
                              "--out", str(out)])
    assert code == ExitCode.PASS
    assert "exit code 0 (no SLO given: measured, not judged)" in said
    assert "PASS" not in said
    assert "**MEASURED**" in (out / "summary.md").read_text()
    assert "PASS" not in (out / "summary.md").read_text()
    root = ET.parse(out / "junit.xml").getroot()
    outcome = [p.get("value") for p in root.iter("property") if p.get("name") == "outcome"]
    assert outcome == ["MEASURED"]


def test_instance_of_a_trial_from_its_provenance(runs) -> None:
    """Launched: pid and start time (a fresh process per trial); attached: the label, else the
    URL without userinfo; imported: the label; not recorded: None (an instance of its own)."""
    from vllm_slo.analysis.trials import instance_key
    from vllm_slo.reports.trial_folders import load_trial
    trial = load_trial(runs[0])
    assert instance_key(trial) is None  # the synthetic folder records no instance

    def key(server_instance: dict) -> str | None:
        return instance_key(dataclasses.replace(
            trial, provenance={**trial.provenance, "server_instance": server_instance}))

    launched = {"kind": "launched", "pid": 41, "started_unix_s": 1.5, "port": 8000,
                "label": "box"}
    assert key(launched) != key({**launched, "pid": 42}) != key({**launched, "started_unix_s": 2})
    assert key({"kind": "attached", "url": "http://u:p@gpu:8000", "label": None}) == key(
        {"kind": "attached", "url": "http://gpu:8000", "label": None}) == "url http://gpu:8000"
    assert key({"kind": "attached", "url": "http://gpu:8000", "label": "restart-2"}) == \
        "label restart-2"
    assert key({"kind": "imported", "label": "a"}) == "label a"
    assert key({"kind": "imported", "label": None}) is None


def test_an_attached_experiment_on_one_server_is_within_instance(tmp_path: Path) -> None:
    """Every trial against one URL (attach mode, no label): the SLO verdicts and the pair are
    within-instance, and the text says so."""
    attached = {"server_instance": {"kind": "attached", "url": "http://gpu:8000",
                                    "label": None}}
    run = experiment(tmp_path / "attached", {"a": 0.05, "b": 0.06}, trials=3, noise=0.05,
                     provenance={"a": attached, "b": attached})
    rendered = render_experiment(run)
    summary = rendered.summary
    assert {s["scope"] for v in summary["variants"].values() for s in v["slos"]} == {
        "within-instance"}
    assert "3 trials on 1 server instance(s): within-instance" in rendered.text
    pair = summary["comparisons"][0]["instances"]
    assert (pair["baseline"], pair["candidate"], pair["shared_between_sides"],
            pair["scope"]) == (1, 1, 1, "within-instance")
    assert "b vs a: n=3+3 trials, 1+1 instances, 1 serving both sides: within-instance" in \
        rendered.text
    fresh = experiment(tmp_path / "fresh", {"a": 0.05, "b": 0.06}, trials=3, noise=0.05)
    summary = render_experiment(fresh).summary
    assert {s["scope"] for v in summary["variants"].values() for s in v["slos"]} == {
        "between-trials"}
    assert summary["comparisons"][0]["instances"]["scope"] == "between-instances"
