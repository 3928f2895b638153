"""Scenario files, overrides and their error messages; the `vllm serve` command line."""

from __future__ import annotations

from pathlib import Path

import pytest

from vllm_slo.scenarios.errors import ExitCode, ScenarioError
from vllm_slo.scenarios.loader import load_scenario, resolve_variants, shipped_scenarios
from vllm_slo.scenarios.server_spec import ServerSpec
from vllm_slo.servers.vllm_server import engine_args_to_argv, plan_launch


def test_every_shipped_scenario_is_valid() -> None:
    assert "chat" in shipped_scenarios()
    for name in shipped_scenarios():
        scenario, path = load_scenario(name)
        assert scenario.name == name
        assert path.name == f"{name}.yaml"


def test_overrides_reach_the_model_with_units() -> None:
    scenario, _ = load_scenario("chat", [
        "traffic.duration=45s", "traffic.warmup=500ms", "server.args.block-size=32",
        "traffic.arrival.users=3", "server.args.enable-prefix-caching=false",
        "slo.ttft=[\"p99 < 1.5s\"]"])
    assert scenario.traffic.duration_s == 45.0
    assert scenario.traffic.warmup_s == 0.5
    assert scenario.server.args["block-size"] == 32
    assert scenario.server.args["enable-prefix-caching"] is False
    assert scenario.traffic.arrival.users == 3
    (rule, *_) = scenario.slo.rules()
    assert (rule.metric, rule.statistic, rule.comparator, rule.threshold) == (
        "ttft", "p99", "<", 1.5)


def test_scenario_is_frozen() -> None:
    scenario, _ = load_scenario("chat")
    with pytest.raises(Exception, match="frozen"):
        scenario.traffic.seed = 3  # type: ignore[misc]


def _error(reference: str, overrides: list[str]) -> ScenarioError:
    with pytest.raises(ScenarioError) as caught:
        load_scenario(reference, overrides)
    assert caught.value.exit_code == ExitCode.USAGE_ERROR
    return caught.value


def test_unknown_key_names_file_key_value_and_allowed_keys() -> None:
    message = str(_error("chat", ["traffic.duraton=30s"]))
    assert "chat.yaml" in message
    assert "traffic.duraton = '30s'" in message
    assert "command-line override 'traffic.duraton=30s'" in message
    assert "allowed keys here:" in message and "duration" in message and "warmup" in message


def test_bad_duration_says_what_is_allowed() -> None:
    message = str(_error("chat", ["traffic.duration=soon"]))
    assert "traffic.duration = 'soon'" in message
    assert "30s, 500ms or 2m" in message


def test_bad_enum_lists_choices() -> None:
    message = str(_error("chat", ["traffic.endpoint=embeddings"]))
    assert "traffic.endpoint = 'embeddings'" in message
    assert "'chat'" in message and "'completions'" in message


def test_bad_slo_rule() -> None:
    message = str(_error("chat", ["slo.ttft=[\"p95 less than 2s\"]"]))
    assert "slo.ttft" in message and "p95 < 2s" in message
    message = str(_error("chat", ["slo.error_rate=\"< 200%\""]))
    assert "slo.error_rate" in message and "between 0% and 100%" in message


def test_malformed_override_and_unknown_scenario() -> None:
    assert "dotted.key=value" in str(_error("chat", ["traffic.duration"]))
    assert "not a mapping" in str(_error("chat", ["name.x=1"]))
    message = str(_error("no-such-scenario", []))
    assert "no-such-scenario" in message and "chat" in message


def test_bad_file(tmp_path: Path) -> None:
    broken = tmp_path / "broken.yaml"
    broken.write_text("name: [unclosed\n")
    assert "not valid YAML" in str(_error(str(broken), []))
    listing = tmp_path / "list.yaml"
    listing.write_text("- a\n- b\n")
    assert "mapping at the top level" in str(_error(str(listing), []))
    extra = tmp_path / "extra.yaml"
    extra.write_text("name: x\nserver: {modle: tiny}\n")
    message = str(_error(str(extra), []))
    assert str(extra) in message and "server.modle" in message and "model" in message


def test_engine_args_become_vllm_flags() -> None:
    argv = engine_args_to_argv({
        "max-model-len": 2048, "enable-chunked-prefill": False, "enforce-eager": True,
        "dropped": None, "compilation-config": {"level": 0}, "middleware": ["a", "b"]})
    assert argv == ["--max-model-len", "2048", "--no-enable-chunked-prefill", "--enforce-eager",
                    "--compilation-config", '{"level":0}', "--middleware", "a", "b"]


def test_cpu_platform_adds_defaults_and_rejects_bad_block_sizes() -> None:
    plan = plan_launch(ServerSpec(args={"max-model-len": 512}), "cpu", "/m", 8000)
    assert plan.platform_defaults == {"kv-cache-memory-bytes": "1G", "enforce-eager": True}
    assert "--kv-cache-memory-bytes" in plan.argv and "--enforce-eager" in plan.argv
    assert plan.argv[plan.argv.index("--port") + 1] == "8000"
    explicit = plan_launch(ServerSpec(args={"gpu-memory-utilization": 0.1,
                                            "enforce-eager": False}), "cpu", "/m", 1)
    assert explicit.platform_defaults == {}
    assert "--no-enforce-eager" in explicit.argv
    gpu = plan_launch(ServerSpec(args={"block-size": 16}), "gpu", "/m", 1)
    assert gpu.platform_defaults == {} and "16" in gpu.argv
    with pytest.raises(ScenarioError, match=r"block-size = 16: .*multiple of 32"):
        plan_launch(ServerSpec(args={"block-size": 16}), "cpu", "/m", 1)
    with pytest.raises(ScenarioError, match="set by the suite"):
        plan_launch(ServerSpec(args={"port": 9}), "gpu", "/m", 1)


def test_attach_url_must_be_http() -> None:
    message = str(_error("chat", ["server.url=localhost:8000"]))
    assert "server" in message and "http://" in message


def test_a_named_server_config_gives_flags_that_args_override() -> None:
    scenario, _ = load_scenario("chat", ["server.config=chunked-prefill-8k",
                                         "server.args.max-num-batched-tokens=4096"])
    spec = scenario.server
    assert spec.config == "chunked-prefill-8k"
    assert spec.engine_args["enable-chunked-prefill"] is True
    assert spec.engine_args["max-num-batched-tokens"] == 4096  # the scenario's own arg wins
    argv = plan_launch(spec, "gpu", "/m", 8000).argv
    assert argv[argv.index("--max-num-batched-tokens") + 1] == "4096"
    plain, _ = load_scenario("chat", ["server.config=chunked-prefill-2k", "server.args={}"])
    assert plain.server.engine_args == {"enable-chunked-prefill": True,
                                        "max-num-batched-tokens": 2048}


def test_variants_pick_their_own_configs() -> None:
    scenario, _ = load_scenario("chat", [
        "server.args={block-size: 32}",
        "variants={small: {server: {config: chunked-prefill-2k}}, "
        "large: {server: {config: chunked-prefill-8k}}}"])
    arms = resolve_variants(scenario)
    assert arms["small"].server.engine_args == {
        "enable-chunked-prefill": True, "max-num-batched-tokens": 2048, "block-size": 32}
    assert arms["large"].server.engine_args["max-num-batched-tokens"] == 8192


def test_a_bad_server_config_is_refused_with_the_file_and_the_choices(tmp_path: Path) -> None:
    with pytest.raises(ScenarioError) as missing:
        load_scenario("chat", ["server.config=chunked-prefil-8k"])
    assert "server.config" in str(missing.value)
    assert "no server config 'chunked-prefil-8k'" in str(missing.value)
    assert "chunked-prefill-8k" in str(missing.value)  # the named configs are listed
    listing = tmp_path / "list.yaml"
    listing.write_text("- max-num-seqs\n- 16\n")
    reserved = tmp_path / "reserved.yaml"
    reserved.write_text("port: 9000\nmax-num-seqs: 16\n")
    dashed = tmp_path / "dashed.yaml"
    dashed.write_text("--max-num-seqs: 16\n")
    for path, words in ((listing, "expected a mapping of vllm serve flag names"),
                        (reserved, "'port' is set by the suite"),
                        (dashed, "flag names without leading dashes")):
        with pytest.raises(ScenarioError) as bad:
            load_scenario("chat", [f"server.config={path}"])
        assert str(path) in str(bad.value) or words in str(bad.value), bad.value
        assert words in str(bad.value), bad.value


def test_a_config_path_is_kept_absolute(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "mine.yaml").write_text("max_num_seqs: 8\n")  # underscores, as vLLM allows
    monkeypatch.chdir(tmp_path)
    scenario, _ = load_scenario("chat", ["server.config=./mine.yaml"])
    assert scenario.server.config == str(tmp_path / "mine.yaml")
    assert scenario.server.engine_args["max-num-seqs"] == 8
