"""Absurd input and usage errors found by issue 25's sweep: each is exit 2 with one line naming
the file, key or flag, never a traceback or exit 1, and none leaves a run folder behind (they
are refused before a folder or a server exists)."""

from __future__ import annotations

import json
import os
import signal
from pathlib import Path

import pytest

import vllm_slo.runner as runner
from vllm_slo.cli import main
from vllm_slo.scenarios.errors import ScenarioError
from vllm_slo.scenarios.loader import (
    MAX_SHOWN_MESSAGE_CHARS,
    MAX_SHOWN_VALUE_CHARS,
    MAX_YAML_VALUES,
)
from vllm_slo.scenarios.model import Scenario

# attach mode at a port nobody listens on: nothing may get as far as contacting it
NOWHERE = "server.url=http://127.0.0.1:9"


@pytest.fixture(autouse=True)
def restore_signals():
    previous = {sig: signal.getsignal(sig) for sig in (signal.SIGINT, signal.SIGTERM)}
    yield
    for sig, handler in previous.items():
        signal.signal(sig, handler)


def _refused(argv: list[str], runs: Path) -> str:
    """Run the CLI; assert exit 2, nothing on stdout, one message, no run folder; return it."""
    said: list[str] = []
    complained: list[str] = []
    code = main(["--runs-dir", str(runs), *argv], said.append, complained.append)
    assert code == 2, (code, said, complained)
    assert len(complained) == 1 and complained[0].startswith("vllm-slo: error: ")
    assert "Traceback" not in complained[0]
    assert not runs.is_dir() or list(runs.iterdir()) == [], list(runs.iterdir())
    return complained[0]


def _scenario_file(tmp_path: Path, text: str, name: str = "s.yaml") -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


def test_a_binary_scenario_file_is_named_as_such(tmp_path: Path) -> None:
    path = tmp_path / "model.yaml"
    path.write_bytes(b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR" + bytes(range(256)))
    message = _refused(["run", f"scenario={path}"], tmp_path / "runs")
    assert f"{path}: not a text file (byte 0x89 at offset 0 is not UTF-8)" in message


def test_an_oversized_scenario_file_is_refused_unread(tmp_path: Path) -> None:
    path = _scenario_file(tmp_path, "name: big\ndescription: " + "x" * (2 << 20) + "\n")
    message = _refused(["run", f"scenario={path}"], tmp_path / "runs")
    assert f"{path}: {path.stat().st_size:,} bytes is not a scenario file" in message


def test_a_300_character_name_is_refused_not_a_file_name_error(tmp_path: Path) -> None:
    path = _scenario_file(tmp_path, f"name: {'a' * 300}\n")
    message = _refused(["run", f"scenario={path}", NOWHERE], tmp_path / "runs")
    assert "name = 'aaaa" in message and "at most 100 characters" in message
    assert len(message) < 600  # the value is quoted short
    variant = _scenario_file(tmp_path, f"name: ok\nvariants: {{{'b' * 101}: {{}}}}\n", "v.yaml")
    assert "at most 100 characters" in _refused(["run", f"scenario={variant}"],
                                                tmp_path / "runs")


@pytest.mark.parametrize(("override", "expect"), [
    ("traffic.duration=99999999999999999999h",
     "traffic.duration = '99999999999999999999h' (from command-line override "
     "'traffic.duration=99999999999999999999h'): at most 7 days (604800 s), got 3.6e+23 s"),
    ("traffic.warmup=169h", "traffic.warmup = '169h'"),
    ("traffic.request_timeout=.inf", "at most 7 days (604800 s), got inf s"),
    ("traffic.duration=.nan", "traffic.duration = nan"),
    ("traffic.arrival={kind: poisson, rate: 1e9}",
     "traffic.arrival.rate = '1e9': Input should be less than or equal to 100000"),
    ("traffic.arrival.spawn_rate=1e300",
     "traffic.arrival.spawn_rate = '1e300' (from command-line override "
     "'traffic.arrival.spawn_rate=1e300'): Input should be less than or equal to 100000"),
    ("traffic.arrival.users=10000000", "traffic.arrival.users = 10000000"),
], ids=["duration-overflow", "warmup-over-a-week", "timeout-inf", "duration-nan", "rate",
        "spawn-rate", "users"])
def test_absurd_durations_rates_and_users_are_capped(override: str, expect: str,
                                                     tmp_path: Path) -> None:
    message = _refused(["run", "scenario=chat", NOWHERE, override], tmp_path / "runs")
    assert expect in message, message


def test_a_schedule_too_large_to_plan_is_refused_before_the_run(tmp_path: Path) -> None:
    message = _refused(["run", "scenario=chat", NOWHERE, "traffic.duration=160h",
                        "traffic.warmup=0s",
                        "traffic.arrival={kind: poisson, rate: 100}"], tmp_path / "runs")
    assert ("traffic.arrival: 100 req/s over 576000 s plans about 57,600,000 requests; at most "
            "10,000,000 a run") in message


def test_runs_dir_that_is_a_file_is_named(tmp_path: Path) -> None:
    runs = tmp_path / "runs.txt"
    runs.write_text("not a folder")
    message = _refused(["run", "scenario=chat", NOWHERE], runs)
    assert f"--runs-dir {runs}: it is not a folder" in message
    inside = runs / "deeper"
    message = _refused(["run", "scenario=chat", NOWHERE], inside)
    assert f"--runs-dir {inside}: {runs} is not a folder" in message


def test_a_scenario_path_that_is_a_directory_or_a_link_loop_is_named(tmp_path: Path) -> None:
    folder = tmp_path / "scenarios.yaml"
    folder.mkdir()
    assert f"scenario path '{folder}' is a directory, not a scenario file" in _refused(
        ["run", f"scenario={folder}"], tmp_path / "runs")
    loop = tmp_path / "loop.yaml"
    os.symlink(loop, loop)
    assert f"scenario path '{loop}' is a symbolic link loop" in _refused(
        ["run", f"scenario={loop}"], tmp_path / "runs")
    broken = tmp_path / "broken.yaml"
    os.symlink(tmp_path / "gone.yaml", broken)
    assert f"scenario path '{broken}' is a broken symbolic link" in _refused(
        ["run", f"scenario={broken}"], tmp_path / "runs")
    assert f"scenario file '{tmp_path}/none.yaml' does not exist" in _refused(
        ["run", f"scenario={tmp_path}/none.yaml"], tmp_path / "runs")


# the 348-byte bomb: nine levels of nine aliases, 9**9 = 387 million values
BOMB = "name: bomb\n" + "".join(
    f"l{k}: &l{k} [{', '.join([f'*l{k - 1}'] * 9 if k else ['x'] * 9)}]\n" for k in range(9)) \
    + "traffic: {duration: *l8}\n"


def test_a_yaml_alias_bomb_is_refused_with_a_short_message(tmp_path: Path) -> None:
    path = _scenario_file(tmp_path, BOMB)
    message = _refused(["run", f"scenario={path}"], tmp_path / "runs")
    assert (f"{path}: refused: its aliases expand to more than {MAX_YAML_VALUES:,} values "
            "(an alias bomb?)") in message
    assert len(message) < 300
    recursive = _scenario_file(tmp_path, "name: r\ndescription: &a [*a]\n", "r.yaml")
    assert "recursive alias" in _refused(["run", f"scenario={recursive}"], tmp_path / "runs")
    in_override = "description=[" + ", ".join(["&a [x, x, x, x, x, x, x, x, x, x]"] + [
        f"&{chr(98 + k)} [{', '.join([f'*{chr(97 + k)}'] * 10)}]" for k in range(5)]) + "]"
    assert "override 'description': value refused: its aliases expand" in _refused(
        ["run", "scenario=chat", in_override], tmp_path / "runs")


def test_a_bad_value_is_quoted_short_whatever_its_size(tmp_path: Path) -> None:
    aliased = ("name: big\nl0: &l0 [" + ", ".join(["xxxxxxxxxx"] * 15) + "]\n"
               "traffic: {duration: [*l0, *l0, *l0, *l0, *l0, *l0, *l0, *l0, *l0]}\n")
    message = _refused(["run", f"scenario={_scenario_file(tmp_path, aliased)}"],
                       tmp_path / "runs")
    lines = message.splitlines()
    assert len(lines) == 3 and "traffic.duration = [[" in message
    assert "… (1,575 characters): expected a duration like" in message
    assert all(len(line) < MAX_SHOWN_VALUE_CHARS + MAX_SHOWN_MESSAGE_CHARS + 50
               for line in lines), [len(line) for line in lines]


@pytest.mark.parametrize(("overrides", "expect"), [
    (["traffic.duration=3s", "traffic.duration=4s"],
     "override 'traffic.duration=4s': traffic.duration is given twice (also "
     "'traffic.duration=3s'); give each key once"),
    (["traffic.arrival.users=4", "traffic.arrival={kind: closed, users: 2}"],
     "override 'traffic.arrival={kind: closed, users: 2}' replaces the whole of "
     "traffic.arrival, including 'traffic.arrival.users=4' given before it"),
], ids=["same-key", "mapping-after-its-key"])
def test_a_repeated_override_is_refused_naming_the_key(overrides: list[str], expect: str,
                                                       tmp_path: Path) -> None:
    message = _refused(["run", "scenario=chat", *overrides], tmp_path / "runs")
    assert "chat.yaml: " + expect in message, message


def test_layering_and_a_repeated_equal_value_are_not_conflicts(tmp_path: Path) -> None:
    from vllm_slo.scenarios.loader import load_scenario

    scenario, _ = load_scenario("chat", ["traffic.arrival={kind: closed, users: 2}",
                                         "traffic.arrival.users=4"])
    assert scenario.traffic.arrival.users == 4
    same, _ = load_scenario("chat", ["traffic.duration=3s", "traffic.duration=3s"])
    assert same.traffic.duration_s == 3.0  # the same value twice changes nothing


@pytest.mark.parametrize(("data", "expect"), [
    (None, "traffic.sharegpt: {data}: no such ShareGPT file"),
    ("", "traffic.sharegpt: {data}: not valid JSON"),
    ("[]", "traffic.sharegpt: {data}: the ShareGPT file holds no conversations"),
    ('{"a": 1}', "traffic.sharegpt: {data}: a ShareGPT file is a JSON list of"),
    (json.dumps([1, {"conversations": "x"}]),
     "traffic.sharegpt: {data}: no entry is a usable conversation (2 malformed; the first: "
     "entry is not an object)"),
], ids=["missing", "empty", "empty-list", "not-a-list", "all-malformed"])
def test_an_unusable_sharegpt_file_leaves_no_run_folder(data: str | None, expect: str,
                                                        tmp_path: Path) -> None:
    file = tmp_path / "conversations.json"
    if data is not None:
        file.write_text(data)
    message = _refused(["run", "scenario=sharegpt", NOWHERE, f"traffic.sharegpt.path={file}"],
                       tmp_path / "runs")
    assert expect.replace("{data}", str(file)) in message, message


def test_a_variant_with_an_unusable_sharegpt_file_is_named(tmp_path: Path) -> None:
    path = _scenario_file(tmp_path, "name: ab\ntrials: 4\nserver: {url: 'http://127.0.0.1:9'}\n"
                          "variants:\n  a: {}\n  b: {traffic: {profile: sharegpt, sharegpt: "
                          f"{{path: {tmp_path}/none.json}}}}}}\n")
    message = _refused(["run", f"scenario={path}"], tmp_path / "runs")
    assert f"variants.b: traffic.sharegpt: {tmp_path}/none.json: no such ShareGPT file" \
        in message


def test_a_missing_tokenizer_leaves_no_run_folder(tmp_path: Path) -> None:
    missing = tmp_path / "no-such-model"
    message = _refused(["run", "scenario=chat", NOWHERE, f"traffic.tokenizer={missing}"],
                       tmp_path / "runs")
    assert f"traffic.tokenizer = '{missing}': no tokenizer.json at {missing}" in message
    broken = tmp_path / "tokenizer.json"
    broken.write_text("{not json")
    message = _refused(["run", "scenario=chat", NOWHERE, f"traffic.tokenizer={broken}"],
                       tmp_path / "runs")
    assert f"{broken}: not a readable tokenizer.json" in message


def test_a_usage_error_found_once_the_server_answered_removes_the_run_folder(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Prompts that fit no context are known only from the server's max-model-len: the
    folder made for the run is removed with the error."""
    made: list[Path] = []

    def refuse(scenario: Scenario, run_dir: Path, say: object) -> object:
        made.append(run_dir)
        (run_dir / "server.log").write_text("started\n")
        raise ScenarioError("traffic.chat: prompts do not fit max-model-len 100")

    monkeypatch.setattr(runner, "run_trial", refuse)
    monkeypatch.setattr(runner, "validate_server_args", lambda *_: None)
    said: list[str] = []
    scenario = Scenario.model_validate({"name": "x", "server": {"url": "http://127.0.0.1:9"}})
    with pytest.raises(ScenarioError):
        runner.run_scenario(scenario, tmp_path / "runs", said.append)
    assert len(made) == 1 and not made[0].exists()
    assert said == [f"run folder removed: {made[0]} (a usage error; no traffic was sent)"]
