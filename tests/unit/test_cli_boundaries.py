"""Issue 40, the command line's boundaries: a plugin's `sys.exit()` never sets the exit code
(item 3); a plugin metric that raises or returns the wrong type is named, the summary and
report still written (13); an ASCII terminal keeps the verdict (12); a write failure of the
environment is exit 4 naming the path, after the verdict (18); no file is written through a
planted link (7); folder names are unique under concurrency (10); a typo in `--cells` is a
usage error (19)."""

from __future__ import annotations

import errno
import json
import os
import shutil
import subprocess
import sys
import threading
import uuid
from collections.abc import Iterator
from concurrent.futures import ProcessPoolExecutor
from datetime import datetime, timezone
from pathlib import Path

import numpy as np
import pytest

from tests.support.synthetic import EXPERIMENT_OVERRIDES, write_synthetic_trial
from vllm_slo import cli, saved_runs
from vllm_slo.run_folder import file_writes
from vllm_slo.run_folder.file_writes import (
    OutputWriteError,
    unique_folder,
    write_atomic,
    write_atomic_with,
)
from vllm_slo.scenarios.errors import ExitCode, ScenarioError
from vllm_slo.scenarios.loader import load_scenario
from vllm_slo.scenarios.metrics import METRICS, unregister_metric
from vllm_slo.scenarios.plugins import PLUGINS_ENV, load_plugins

REPO = Path(__file__).resolve().parents[2]


def run_main(arguments: list[str]) -> tuple[int, str, str]:
    said: list[str] = []
    complained: list[str] = []
    code = cli.main(arguments, said.append, complained.append)
    return code, "\n".join(said), "\n".join(complained)


@pytest.fixture
def plugin_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """A folder on sys.path where a test writes plugin modules; they are forgotten after."""
    folder = tmp_path / "plugins"
    folder.mkdir()
    monkeypatch.syspath_prepend(str(folder))
    before = set(sys.modules)
    yield folder
    for name in set(sys.modules) - before:
        if name.startswith("boundary_plugin_"):
            sys.modules.pop(name, None)


def plugin(folder: Path, source: str) -> str:
    """A plugin module with `source`; returns its (unique) module name."""
    name = f"boundary_plugin_{uuid.uuid4().hex[:8]}"
    (folder / f"{name}.py").write_text(source)
    return name


@pytest.fixture(scope="module")
def pristine(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """Two rendered single runs of one setting (TTFT 50 and 60 ms; SLO p50 < 80 ms)."""
    root = tmp_path_factory.mktemp("pristine")
    scenario, _ = load_scenario("chat", EXPERIMENT_OVERRIDES)
    for name, ttft_s, seed in (("a", 0.05, 1), ("b", 0.06, 2)):
        write_synthetic_trial(root / name, scenario.to_yaml_dict(), ttft_s, 1.0, seed=seed)
    return root / "a", root / "b"


@pytest.fixture
def runs(pristine: tuple[Path, Path], tmp_path: Path) -> tuple[Path, Path]:
    a, b = pristine
    return (Path(shutil.copytree(a, tmp_path / "a")), Path(shutil.copytree(b, tmp_path / "b")))


# item 3: a plugin's sys.exit() -------------------------------------------------------------

@pytest.mark.parametrize("exit_call", ["sys.exit(0)", "sys.exit('bye')", "sys.exit(1)"])
def test_a_plugin_exiting_at_import_is_a_named_usage_error(
        plugin_dir: Path, monkeypatch: pytest.MonkeyPatch, exit_call: str) -> None:
    name = plugin(plugin_dir, f"import sys\n{exit_call}\n")
    monkeypatch.setenv(PLUGINS_ENV, name)
    code, said, complained = run_main(["scenarios"])
    assert code == ExitCode.USAGE_ERROR, (said, complained)
    expected = exit_call.replace("sys.exit", "SystemExit")
    assert f"plugin {name} raised {expected}" in complained
    assert "chat" not in said  # nothing ran


def test_a_plugin_exiting_at_import_cannot_make_gate_say_regression(
        plugin_dir: Path, monkeypatch: pytest.MonkeyPatch, runs: tuple[Path, Path]) -> None:
    monkeypatch.setenv(PLUGINS_ENV, plugin(plugin_dir, "import sys\nsys.exit('msg')\n"))
    code, _, complained = run_main(["gate", str(runs[1]), "--baseline", str(runs[0])])
    assert code == ExitCode.USAGE_ERROR and "SystemExit('msg')" in complained


def test_a_real_ctrl_c_while_importing_a_plugin_still_interrupts(
        plugin_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    name = plugin(plugin_dir, "raise KeyboardInterrupt\n")
    with pytest.raises(KeyboardInterrupt):
        load_plugins({PLUGINS_ENV: name})
    monkeypatch.setenv(PLUGINS_ENV, name)
    code, _, complained = run_main(["scenarios"])
    assert code == ExitCode.INVALID_MEASUREMENT and complained == cli.INTERRUPTED_MESSAGE


def test_a_plugin_exiting_during_a_command_is_exit_4_naming_it(
        plugin_dir: Path, monkeypatch: pytest.MonkeyPatch, runs: tuple[Path, Path]) -> None:
    """Any plugin code the command calls (a profile, a hook) that calls sys.exit(0): the
    command ends in exit 4 naming the plugin, never 0."""
    name = plugin(plugin_dir, "import sys\ndef hook():\n    sys.exit(0)\n")
    monkeypatch.setenv(PLUGINS_ENV, name)

    def dispatch(options: object, say: object) -> int:
        __import__(name).hook()
        return 0

    monkeypatch.setattr(cli, "_dispatch", dispatch)
    code, _, complained = run_main(["report", str(runs[0])])
    assert code == ExitCode.INVALID_MEASUREMENT
    assert f"plugin {name} raised SystemExit(0)" in complained


# item 13: a plugin metric that raises or returns the wrong type ------------------------------

BAD_SOURCES = {
    "raises": ("def samples(run):\n    raise ZeroDivisionError('division by zero')\n",
               "raised ZeroDivisionError('division by zero')"),
    "exits": ("import sys\ndef samples(run):\n    sys.exit(0)\n", "raised SystemExit(0)"),
    "text": ("def samples(run):\n    return 'fast'\n", "returned str 'fast'"),
    "wrong length": ("import numpy as np\ndef samples(run):\n    return np.ones(3)\n",
                     "returned ndarray"),
    "dict": ("def samples(run):\n    return {'a': 1}\n", "returned dict"),
}


@pytest.mark.parametrize("case", list(BAD_SOURCES))
def test_a_failing_plugin_metric_is_named_and_the_report_still_written(
        case: str, plugin_dir: Path, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    source, said_of_it = BAD_SOURCES[case]
    name = plugin(plugin_dir, source + (
        "from vllm_slo.scenarios.metrics import Metric, MetricKind, register_metric\n"
        "register_metric(Metric('boom_rate', MetricKind.RATE, 'Boom', 'req/s', False, "
        "samples, '', '1-s bin'))\n"))
    monkeypatch.setenv(PLUGINS_ENV, name)
    try:
        load_plugins()
        scenario, _ = load_scenario("chat", [
            *EXPERIMENT_OVERRIDES[:2],
            'slo={ttft: ["p50 < 80ms"], boom_rate: "> 1 req/s"}'])
        run = tmp_path / "run"
        write_synthetic_trial(run, scenario.to_yaml_dict(), 0.05, 1.0, seed=1)  # renders
        for path in (run / "summary.json", run / "report.html"):
            path.unlink()
        code, said, complained = run_main(["report", str(run)])
    finally:
        unregister_metric("boom_rate")
    assert "boom_rate" not in METRICS
    assert code == ExitCode.INCONCLUSIVE, (said, complained)  # ttft passes; boom_rate unknown
    summary = json.loads((run / "summary.json").read_text())
    assert (run / "report.html").is_file()
    warning = next(w for w in summary["warnings"] if "boom_rate" in w)
    assert f"plugin {name}: metric boom_rate failed" in warning and said_of_it in warning
    slo = next(s for s in summary["slos"] if "boom_rate" in json.dumps(s))
    assert slo["verdict"] == "INCONCLUSIVE"
    assert f"plugin {name}: metric boom_rate failed" in said


# item 12: an ASCII terminal ----------------------------------------------------------------

def test_an_ascii_terminal_keeps_the_verdict(runs: tuple[Path, Path]) -> None:
    """LC_ALL=C without UTF-8 mode: stdout is ASCII; `±`, `†`, `×` print as fallbacks and
    the exit code is the verdict's, not 4."""
    env = {k: v for k, v in os.environ.items()
           if k not in ("PYTHONIOENCODING", "PYTHONUTF8", "LANG", "LC_CTYPE")}
    env.update(LC_ALL="C", PYTHONUTF8="0", PYTHONPATH=str(REPO))
    expected = json.loads((runs[0] / "summary.json").read_text())["exit_code"]
    done = subprocess.run(
        [sys.executable, "-c", "import sys; print(sys.stdout.encoding, file=sys.stderr); "
         "from vllm_slo.cli import main; sys.exit(main())", "report", str(runs[0])],
        env=env, capture_output=True, timeout=120, cwd=runs[0].parent, check=False)
    stderr = done.stderr.decode("ascii")
    assert stderr.splitlines()[0].lower() in ("ascii", "ansi_x3.4-1968")  # the case at hand
    assert done.returncode == expected, stderr
    assert "UnicodeEncodeError" not in stderr and "internal error" not in stderr
    stdout = done.stdout.decode("ascii")  # nothing but ASCII reached the terminal
    assert f"exit code {expected}" in stdout


def test_fallbacks_for_the_symbols_the_suite_prints() -> None:
    import io

    raw = io.BytesIO()
    stream = io.TextIOWrapper(raw, encoding="ascii")
    cli.encodable_output([stream])
    stream.write("p50 12ms ± 3 † 2 × 3 … é")
    stream.flush()
    assert raw.getvalue() == b"p50 12ms +/- 3 + 2 x 3 ... ?"


# items 7 and 18: atomic writes that never follow a link; environment failures ---------------

def test_write_atomic_replaces_a_planted_link_and_leaves_its_target(tmp_path: Path) -> None:
    victim = tmp_path / "victim.txt"
    victim.write_text("precious\n")
    link = tmp_path / "report.html"
    link.symlink_to(victim)
    write_atomic(link, "<html>")
    assert victim.read_text() == "precious\n"
    assert not link.is_symlink() and link.read_text() == "<html>"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["report.html", "victim.txt"]


def test_report_never_writes_through_links_planted_in_a_run_folder(
        runs: tuple[Path, Path], tmp_path: Path) -> None:
    run = runs[0]
    victims = {}
    for name in ("report.html", "summary.json", "junit.xml", "summary.md"):
        victim = tmp_path / f"victim-{name}"
        victim.write_text("precious\n")
        (run / name).unlink()
        (run / name).symlink_to(victim)
        victims[name] = victim
    code, _, complained = run_main(["report", str(run)])
    assert code in (0, 3), complained
    for name, victim in victims.items():
        assert victim.read_text() == "precious\n", name
        assert not (run / name).is_symlink()
    assert json.loads((run / "summary.json").read_text())["exit_code"] == code


def test_the_run_folder_files_a_run_writes_replace_planted_links(tmp_path: Path) -> None:
    """run_status.json and provenance.json (written again on --resume) go through the same
    helper: a link planted at their names is replaced, its target untouched."""
    from vllm_slo.run_folder.provenance import Provenance
    from vllm_slo.run_folder.run_status import RunStatus

    victim = tmp_path / "victim"
    victim.write_text("precious\n")
    run = tmp_path / "run"
    run.mkdir()
    for name in ("run_status.json", "provenance.json"):
        (run / name).symlink_to(victim)
    RunStatus(warnings=["w"]).write(run)
    Provenance.model_validate({"seed": 3}).write(run, lambda document: document)
    assert victim.read_text() == "precious\n"
    assert json.loads((run / "run_status.json").read_text())["warnings"] == ["w"]
    assert json.loads((run / "provenance.json").read_text())["seed"] == 3


def test_a_failed_write_keeps_the_old_file_whole_and_names_the_path(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "summary.json"
    path.write_text('{"old": true}\n')

    def full(descriptor: int) -> None:
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(file_writes.os, "fsync", full)
    with pytest.raises(OutputWriteError) as raised:
        write_atomic(path, '{"new": true}\n' * 1000)
    assert str(raised.value) == f"cannot write {path}: No space left on device"
    assert raised.value.exit_code == ExitCode.INVALID_MEASUREMENT
    assert path.read_text() == '{"old": true}\n'  # never truncated
    assert [p.name for p in tmp_path.iterdir()] == ["summary.json"]  # no temporary left


def test_write_atomic_with_cleans_up_after_a_failing_writer(tmp_path: Path) -> None:
    def broken(temporary: Path) -> None:
        temporary.write_text("half")
        raise ValueError("the writer broke")

    with pytest.raises(ValueError):
        write_atomic_with(tmp_path / "samples.parquet", broken)
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("failure", [errno.ENOSPC, errno.EROFS])
def test_report_on_a_full_disk_or_read_only_folder_prints_the_verdict_then_exit_4(
        runs: tuple[Path, Path], monkeypatch: pytest.MonkeyPatch, failure: int) -> None:
    run = runs[0]
    before = (run / "summary.json").read_text()
    expected = json.loads(before)["exit_code"]
    real_open = os.open

    def refusing(path: object, flags: int, mode: int = 0o777) -> int:
        if Path(str(path)).parent == run and flags & os.O_CREAT:
            raise OSError(failure, os.strerror(failure), str(path))
        return real_open(path, flags, mode)  # type: ignore[arg-type]

    monkeypatch.setattr(file_writes.os, "open", refusing)
    code, said, complained = run_main(["report", str(run)])
    assert code == ExitCode.INVALID_MEASUREMENT
    assert f"cannot write {run / 'summary.json'}: {os.strerror(failure)}" in complained
    assert "internal error" not in complained
    assert f"verdict: exit code {expected} ({ExitCode(expected).name}), but it could not " \
           "be saved" in said
    assert (run / "summary.json").read_text() == before


@pytest.mark.skipif(os.geteuid() == 0, reason="root writes into read-only folders")
def test_report_on_a_really_read_only_folder(runs: tuple[Path, Path]) -> None:
    run = runs[0]
    run.chmod(0o555)
    try:
        code, _, complained = run_main(["report", str(run)])
    finally:
        run.chmod(0o755)
    assert code == ExitCode.INVALID_MEASUREMENT and str(run) in complained


def test_an_unwritable_step_summary_is_a_warning_not_a_lost_verdict(
        runs: tuple[Path, Path], monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    target = tmp_path / "a-folder-not-a-file"
    target.mkdir()
    monkeypatch.setenv("GITHUB_STEP_SUMMARY", str(target))
    expected = json.loads((runs[0] / "summary.json").read_text())["exit_code"]
    code, said, complained = run_main(["report", str(runs[0])])
    assert code == expected and complained == ""
    assert f"warning: $GITHUB_STEP_SUMMARY {target}: not appended" in said
    # compare appends its own summary.md: the same warning, the comparison written
    code, said, complained = run_main(["--runs-dir", str(tmp_path / "cmp"), "compare",
                                       str(runs[0]), str(runs[1])])
    assert code == ExitCode.PASS, complained
    assert "not appended" in said
    assert (next((tmp_path / "cmp").iterdir()) / "summary.json").is_file()


def test_an_environment_error_naming_a_path_is_exit_4_naming_it(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """A read-only cache folder (vllm_args, tiny_model): the path and the reason, exit 4."""
    cache = "/root/.cache/vllm-slo/vllm-args/0.1/options.json"

    def dispatch(options: object, say: object) -> int:
        raise PermissionError(errno.EACCES, os.strerror(errno.EACCES), cache)

    monkeypatch.setattr(cli, "_dispatch", dispatch)
    code, _, complained = run_main(["scenarios"])
    assert code == ExitCode.INVALID_MEASUREMENT
    assert complained.startswith(f"vllm-slo: error: cannot use {cache}: Permission denied")


# item 10: folder names unique under concurrency ---------------------------------------------

def test_unique_folder_under_threads(tmp_path: Path) -> None:
    made: list[Path] = []
    barrier = threading.Barrier(16)

    def make() -> None:
        barrier.wait()
        made.append(unique_folder(tmp_path, "compare-20270101T000000Z"))

    threads = [threading.Thread(target=make) for _ in range(16)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(set(made)) == 16
    assert {p.name for p in made} == {"compare-20270101T000000Z",
                                      *(f"compare-20270101T000000Z-{k}" for k in range(2, 17))}


def test_unique_folder_under_processes(tmp_path: Path) -> None:
    with ProcessPoolExecutor(max_workers=2) as pool:
        made = list(pool.map(unique_folder, [tmp_path] * 12, ["20270101T000000Z-chat"] * 12))
    assert len(set(made)) == 12


def test_two_compares_in_one_second_write_two_folders(
        runs: tuple[Path, Path], monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    class Frozen(datetime):
        @classmethod
        def now(cls, tz: object = None) -> Frozen:  # type: ignore[override]
            return cls(2027, 1, 1, 12, 0, 0, tzinfo=timezone.utc)

    monkeypatch.setattr(saved_runs, "datetime", Frozen)
    root = tmp_path / "compares"
    first = saved_runs.compare_saved_runs(list(runs), None, 0.05, runs_root=root)
    second = saved_runs.compare_saved_runs(list(runs), None, 0.05, runs_root=root)
    assert first.report_path is not None and second.report_path is not None
    folders = sorted(p.name for p in root.iterdir())
    assert folders == ["compare-20270101T120000Z", "compare-20270101T120000Z-2"]
    for folder in folders:  # each comparison's summary names its own folder
        assert json.loads((root / folder / "summary.json").read_text())["run_id"] == folder


# item 19: a typo in --cells -----------------------------------------------------------------

@pytest.mark.parametrize("cell", ["bogus.p50", "ttft.p0", "ttft.p100", "ttft", "ttft.rate",
                                  "nopart:ttft.p50"])
@pytest.mark.parametrize("command", ["compare", "gate"])
def test_a_typo_in_cells_is_a_usage_error(runs: tuple[Path, Path], tmp_path: Path,
                                          command: str, cell: str) -> None:
    a, b = runs
    arguments = (["--runs-dir", str(tmp_path / "out"), "compare", str(a), str(b)]
                 if command == "compare" else ["gate", str(b), "--baseline", str(a)])
    code, _, complained = run_main([*arguments, "--cells", "ttft.p50", cell])
    assert code == ExitCode.USAGE_ERROR, complained
    assert complained.startswith(f"vllm-slo: error: --cells {cell!r}: ")
    assert "internal error" not in complained
    assert not (tmp_path / "out").exists()  # nothing written


def test_check_cells_passes_good_cells_through() -> None:
    assert saved_runs.check_cells(None) is None
    assert saved_runs.check_cells(("ttft.p50", "chat:itl.p99", "error_rate.rate")) == [
        "ttft.p50", "chat:itl.p99", "error_rate.rate"]
    with pytest.raises(ScenarioError, match="percentile must lie strictly between"):
        saved_runs.check_cells(["ttft.p100"])


def test_metric_values_of_a_good_plugin_are_unchanged() -> None:
    """The check on registered sources leaves a well-behaved one's values as they were."""
    from vllm_slo.analysis.run_metrics import RunSeries

    series = RunSeries(
        ttft_s=np.full(4, 0.1), itl_s=np.empty(0), tpot_s=np.empty(0), e2e_s=np.full(4, 0.2),
        send_lag_s=np.zeros(4), window_start_unix_s=0.0, window_s=3.0, requests=4, failed=0,
        output_tokens_per_bin=np.ones(3), completions_per_bin=np.array([1.0, 2.0, 1.0]),
        rate_span_s=3.0, bin_widths_s=np.ones(3))
    assert series.rate_per_s("request_throughput") == pytest.approx(4 / 3)
    assert series.metric_failure("request_throughput") is None
