"""VLLM_SLO_PLUGINS: the modules that register metrics or profiles are imported by every
process that reads a scenario (the CLI, each Locust process), so a registered rate SLO or
traffic profile is known to the run, its load generator and `vllm-slo report` later."""

from __future__ import annotations

import sys
from collections.abc import Iterator

import pytest

from vllm_slo.cli import main
from vllm_slo.scenarios.errors import ScenarioError
from vllm_slo.scenarios.loader import load_scenario
from vllm_slo.scenarios.metrics import METRICS, unregister_metric
from vllm_slo.scenarios.plugins import (
    PLUGINS_ENV,
    load_plugins,
    plugin_names,
    unregistered_hint,
)

MODULE = "tests.support.send_rate"


@pytest.fixture
def no_send_rate() -> Iterator[None]:
    """send_rate unregistered before and after (the plugin module registers it on import)."""
    sys.modules.pop(MODULE, None)
    assert "send_rate" not in METRICS
    try:
        yield
    finally:
        unregister_metric("send_rate")
        sys.modules.pop(MODULE, None)


def test_the_named_modules_are_imported(no_send_rate: None) -> None:
    assert plugin_names({}) == () and plugin_names({PLUGINS_ENV: " , "}) == ()
    assert load_plugins({PLUGINS_ENV: f" {MODULE} ,"}) == (MODULE,)
    assert "send_rate" in METRICS
    scenario, _ = load_scenario("chat", ['slo={send_rate: ">= 1 req/s"}'])
    assert [rule.metric for rule in scenario.slo.rules()] == ["send_rate"]
    assert load_plugins({PLUGINS_ENV: MODULE}) == (MODULE,)  # again: imported once


def test_a_module_that_cannot_be_imported_is_named(no_send_rate: None) -> None:
    with pytest.raises(ScenarioError) as raised:
        load_plugins({PLUGINS_ENV: f"{MODULE},tests.support.no_such_plugin"})
    assert str(raised.value) == (
        f"{PLUGINS_ENV}: cannot import 'tests.support.no_such_plugin': ModuleNotFoundError: "
        "No module named 'tests.support.no_such_plugin'")


def test_the_cli_loads_them_first(no_send_rate: None, monkeypatch: pytest.MonkeyPatch) -> None:
    said: list[str] = []
    complained: list[str] = []
    monkeypatch.setenv(PLUGINS_ENV, "tests.support.no_such_plugin")
    assert main(["scenarios"], said.append, complained.append) == 2
    assert complained == [f"vllm-slo: error: {PLUGINS_ENV}: cannot import "
                          "'tests.support.no_such_plugin': ModuleNotFoundError: No module named "
                          "'tests.support.no_such_plugin'"]
    monkeypatch.setenv(PLUGINS_ENV, MODULE)
    assert main(["scenarios"], said.append, complained.append) == 0
    assert "send_rate" in METRICS


def test_a_saved_scenario_read_without_its_plugins_says_what_to_set(
        no_send_rate: None, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(PLUGINS_ENV, raising=False)
    saved = {"slo": {"ttft": [], "send_rate": ">= 1 req/s", "by_profile": {}},
             "traffic": {"profile": "fixed-length"}}
    assert unregistered_hint(saved) == (
        "slo.send_rate, traffic.profile 'fixed-length' not registered in this process: name the "
        f"modules that register them in {PLUGINS_ENV}, as the run had it (now: unset)")
    load_plugins({PLUGINS_ENV: MODULE})
    assert unregistered_hint({"slo": {"send_rate": ">= 1 req/s"}}) == ""
    assert unregistered_hint(None) == "" and unregistered_hint({"slo": "x"}) == ""


def test_report_of_a_run_made_with_plugins_names_them(
        no_send_rate: None, monkeypatch: pytest.MonkeyPatch, tmp_path) -> None:
    """`vllm-slo report` reads a run folder's scenario through read_run_scenario: without the
    run's plugins it says which keys are unregistered and what to set, not a list of schema
    errors."""
    import yaml

    from vllm_slo.reports.run_folder_read import read_run_scenario
    monkeypatch.delenv(PLUGINS_ENV, raising=False)
    scenario, _ = load_scenario("chat")
    document = scenario.to_yaml_dict()
    document["slo"] = {"send_rate": ">= 1 req/s"}
    (tmp_path / "scenario.yaml").write_text(yaml.safe_dump(document))
    with pytest.raises(ScenarioError, match=r"slo\.send_rate not registered in this process"):
        read_run_scenario(tmp_path)
