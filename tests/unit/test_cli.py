"""The thin CLI: usage and configuration errors are exit code 2 with one clear message."""

from __future__ import annotations

import pytest

from vllm_slo.cli import main


def test_bad_override_exits_2_naming_key_value_and_choices(capsys: pytest.CaptureFixture
                                                           ) -> None:
    assert main(["run", "scenario=chat", "traffic.arrival.users=lots"]) == 2
    error = capsys.readouterr().err
    assert "chat.yaml" in error and "traffic.arrival.users = 'lots'" in error
    assert "valid integer" in error


def test_missing_scenario_and_unknown_file(capsys: pytest.CaptureFixture) -> None:
    assert main(["run", "traffic.duration=3s"]) == 2
    assert "which scenario?" in capsys.readouterr().err
    assert main(["scenario=does/not/exist.yaml"]) == 2
    assert "does not exist" in capsys.readouterr().err


def test_unknown_subcommand_is_usage_error(capsys: pytest.CaptureFixture) -> None:
    assert main(["frobnicate"]) == 2
    assert main(["report", "/nonexistent/run"]) == 2
    assert "does not exist" in capsys.readouterr().err


def test_lists_shipped_scenarios(capsys: pytest.CaptureFixture) -> None:
    assert main(["scenarios"]) == 0
    assert "chat" in capsys.readouterr().out.split()


def test_output_goes_through_the_injected_writers() -> None:
    said: list[str] = []
    complained: list[str] = []
    assert main(["scenarios"], say=said.append, complain=complained.append) == 0
    assert "chat" in said[0].split() and complained == []
    assert main(["plan", "/nonexistent/run"], say=said.append,
                complain=complained.append) == 2
    assert len(said) == 1 and "does not exist" in complained[0]


def test_tune_usage_errors(capsys: pytest.CaptureFixture, tmp_path) -> None:
    assert main(["tune"]) == 2
    assert "which scenario?" in capsys.readouterr().err
    assert main(["tune", "--resume", str(tmp_path), "scenario=chat"]) == 2
    assert "takes no scenario (got scenario=chat)" in capsys.readouterr().err
    assert main(["tune", "--resume", str(tmp_path)]) == 2
    assert "not a tune folder" in capsys.readouterr().err
    assert main(["--runs-dir", str(tmp_path), "tune", "scenario=chat"]) == 2  # no tune section
    assert "has no tune section" in capsys.readouterr().err
    assert list(tmp_path.iterdir()) == []


def test_help_opens_with_what_the_tool_does_and_lists_every_command(
        capsys: pytest.CaptureFixture[str]) -> None:
    """`vllm-slo --help`: after argparse's usage line, one line for users saying what the tool
    does; every command the parser takes is listed, and the exit codes; no developer prose."""
    from vllm_slo import cli

    assert main(["--help"]) == 0
    text = capsys.readouterr().out
    lines = [line for line in text.splitlines() if line.strip()]
    assert lines[0].startswith("usage: vllm-slo")
    description = next(line for line in lines[1:] if not line.startswith(" "))
    assert description.startswith("Load-test a vLLM server against SLOs")
    commands = cli._parser()._subparsers._group_actions[0].choices  # type: ignore[union-attr]
    listed = {line.split()[0] for line in text.split("commands:")[1].split("exit codes")[
        0].splitlines() if line.startswith("  ") and not line.startswith("   ")}
    assert set(commands) <= listed, set(commands) - listed
    assert "exit codes: 0 every SLO passed" in text and "4 the measurement is invalid" in text
    for prose in ("thin command line", "main(argv)", "library"):
        assert prose not in text
