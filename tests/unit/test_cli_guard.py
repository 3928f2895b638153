"""The CLI's top-level guard: no crash reads as a verdict. An exception the suite did not raise
on purpose ends as exit 4 with one line naming it and a log file holding its traceback (exit 1
means an SLO or a gate failed, so a crash must never exit 1); a stray KeyboardInterrupt is exit
4 with a message, never 130 and a traceback; a second stop signal during a run's teardown is
acknowledged, not obeyed, and a third quits."""

from __future__ import annotations

import signal
import tempfile
from pathlib import Path

import pytest

import vllm_slo.saved_runs
from vllm_slo import cli
from vllm_slo.cli import MAX_MESSAGE_CHARS, StopSignals, main
from vllm_slo.scenarios.errors import ScenarioError, ServerError


@pytest.fixture(autouse=True)
def restore_signals(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    """`main` installs SIGINT/SIGTERM handlers; give the test process its own back. Crash
    logs go to the test's folder."""
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    previous = {sig: signal.getsignal(sig) for sig in (signal.SIGINT, signal.SIGTERM)}
    yield
    for sig, handler in previous.items():
        signal.signal(sig, handler)


def _run(argv: list[str]) -> tuple[int, list[str], list[str]]:
    said: list[str] = []
    complained: list[str] = []
    return main(argv, said.append, complained.append), said, complained


@pytest.mark.parametrize("error", [RuntimeError("boom in the runner\nsecond line"),
                                   ValueError("invalid literal for int() with base 10: 'x'"),
                                   OverflowError(), MemoryError("out of memory")],
                         ids=["runtime", "value", "overflow-no-text", "memory"])
def test_a_crash_in_run_is_exit_4_with_one_line_and_a_traceback_log(
        error: Exception, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def crash(*_args: object) -> int:
        raise error

    monkeypatch.setattr(cli, "command_run", crash)
    code, said, complained = _run(["run", "scenario=chat", "server.url=http://u:pw@h:1"])
    assert code == 4 and said == [] and len(complained) == 1
    line = complained[0]
    assert "\n" not in line and "Traceback" not in line
    assert line.startswith("vllm-slo: internal error (exit 4, not a verdict): "
                           f"{type(error).__name__}")
    if str(error):
        assert str(error).splitlines()[0] in line
    logs = list(tmp_path.glob("vllm-slo-crash-*.log"))
    assert len(logs) == 1 and f"the traceback is in {logs[0]}" in line
    text = logs[0].read_text()
    assert "Traceback (most recent call last)" in text and "in crash" in text
    assert "pw@" not in text and "u:***@" not in text  # the override's credentials redacted


def test_a_crash_in_a_saved_run_command_is_not_a_gate_failure(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def crash(*_args: object) -> object:
        raise KeyError("summary")

    monkeypatch.setattr(vllm_slo.saved_runs, "gate_saved_runs", crash)
    code, said, complained = _run(["gate", str(tmp_path), "--baseline", str(tmp_path)])
    assert code == 4 and said == [] and len(complained) == 1
    assert "KeyError: 'summary'" in complained[0]
    assert len(list(tmp_path.glob("vllm-slo-crash-*.log"))) == 1


def test_an_unwritable_log_folder_still_gives_one_line(monkeypatch: pytest.MonkeyPatch,
                                                       tmp_path: Path) -> None:
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path / "missing" / "folder"))
    monkeypatch.setattr(cli, "command_run", lambda *_: 1 / 0)
    code, _, complained = _run(["run", "scenario=chat"])
    assert code == 4 and len(complained) == 1
    assert "ZeroDivisionError: division by zero; no traceback log (" in complained[0]


def test_a_stray_keyboard_interrupt_is_exit_4_with_a_message(
        monkeypatch: pytest.MonkeyPatch) -> None:
    def interrupted(*_args: object) -> int:
        raise KeyboardInterrupt

    monkeypatch.setattr(cli, "command_run", interrupted)
    code, said, complained = _run(["run", "scenario=chat"])
    assert (code, said) == (4, [])
    assert complained == [cli.INTERRUPTED_MESSAGE]
    assert "vllm-slo report RUN_DIR" in complained[0]


def test_an_enormous_error_message_is_capped(monkeypatch: pytest.MonkeyPatch) -> None:
    def refuse(*_args: object) -> int:
        raise ScenarioError("x.yaml: " + "[" * 10 * MAX_MESSAGE_CHARS)

    monkeypatch.setattr(cli, "command_run", refuse)
    code, _, complained = _run(["run", "scenario=chat"])
    assert code == 2 and len(complained) == 1
    assert len(complained[0]) < MAX_MESSAGE_CHARS + 100
    whole = len("vllm-slo: error: x.yaml: ") + 10 * MAX_MESSAGE_CHARS
    assert complained[0].endswith(f"({whole - MAX_MESSAGE_CHARS:,} more characters left out)")


def test_an_error_naming_a_url_with_credentials_prints_it_redacted(
        monkeypatch: pytest.MonkeyPatch) -> None:
    def not_ready(*_args: object) -> int:  # what readiness raises for an attached URL
        raise ServerError("http://u:pw@127.0.0.1:1 not ready after 600s: /health answered "
                          "nothing")

    monkeypatch.setattr(cli, "command_run", not_ready)
    code, _, complained = _run(["run", "scenario=chat", "server.url=http://u:pw@127.0.0.1:1"])
    assert code == int(ServerError.exit_code) and len(complained) == 1
    assert complained[0] == ("vllm-slo: error: http://***@127.0.0.1:1 not ready after 600s: "
                             "/health answered nothing")


def test_stop_signals_first_stops_second_is_acknowledged_third_quits() -> None:
    said: list[str] = []
    stop = StopSignals(said.append)
    with pytest.raises(KeyboardInterrupt):
        stop(signal.SIGINT, None)
    stop(signal.SIGINT, None)  # the teardown and the report go on
    assert len(said) == 1 and "stopping already" in said[0] and "once more" in said[0]
    with pytest.raises(KeyboardInterrupt):
        stop(signal.SIGTERM, None)


def test_main_installs_the_stop_handler_for_both_signals() -> None:
    code, _, _ = _run(["scenarios"])
    assert code == 0
    assert isinstance(signal.getsignal(signal.SIGINT), StopSignals)
    assert signal.getsignal(signal.SIGTERM) is signal.getsignal(signal.SIGINT)
