"""What a scenario may ask of the server, refused at load (exit 2) with what to write instead:
`traffic.extra_body` setting a field the suite sets itself, a `server.url` that is an OpenAI
base URL or an endpoint's, a `server.args` flag the suite sets, and (checked with vLLM's own
configs) a number outside the bounds vLLM declares for it."""

from __future__ import annotations

from pathlib import Path

import pytest
from pydantic import Field
from pydantic.dataclasses import dataclass

from vllm_slo.scenarios.errors import ExitCode, ScenarioError
from vllm_slo.scenarios.loader import load_scenario
from vllm_slo.scenarios.server_spec import ServerSpec, root_url_problem, suite_flag_problem
from vllm_slo.scenarios.traffic_spec import SUITE_OWNED_FIELDS
from vllm_slo.servers import vllm_args
from vllm_slo.servers.vllm_args import ArgsCheck, rejection_message
from vllm_slo.servers.vllm_cli import CHECK_REVISION, out_of_bounds
from vllm_slo.servers.vllm_server import plan_launch


def _refused(*overrides: str) -> str:
    with pytest.raises(ScenarioError) as caught:
        load_scenario("chat", list(overrides))
    assert caught.value.exit_code == ExitCode.USAGE_ERROR
    return str(caught.value)


@pytest.mark.parametrize("key", sorted(SUITE_OWNED_FIELDS))
def test_extra_body_may_not_set_a_suite_owned_field(key: str) -> None:
    message = _refused(f"traffic.extra_body={{{key}: 2, top_k: 5}}")
    assert f"extra_body sets request fields the suite sets itself: {key} (" in message
    assert "top_k" not in message  # a field of vLLM's own is the user's to send


def test_every_owned_field_is_named_in_one_message() -> None:
    message = _refused("traffic.extra_body={max_tokens: 2, stream: false, model: x}")
    assert "max_tokens (the traffic profile sets each request's output length)" in message
    assert "stream (the suite streams every request, timing each chunk)" in message
    assert "model (" in message and message.count("Remove them") == 1


def test_stream_options_may_drop_continuous_usage_but_not_usage() -> None:
    scenario, _ = load_scenario("chat", ["traffic.extra_body={stream_options: "
                                         "{include_usage: true}}"])
    assert scenario.traffic.extra_body == {"stream_options": {"include_usage": True}}
    message = _refused("traffic.extra_body={stream_options: {include_usage: false}}")
    assert "stream_options = {'include_usage': False}" in message
    assert "keep include_usage: true" in message
    assert "stream_options = 'x'" in _refused("traffic.extra_body={stream_options: x}")


def test_chat_template_kwargs_beside_reasoning_is_refused_alone_it_is_not() -> None:
    load_scenario("chat", ["traffic.extra_body={chat_template_kwargs: {a: 1}}"])
    message = _refused("traffic.reasoning=true",
                       "traffic.extra_body={chat_template_kwargs: {a: 1}}")
    assert "chat_template_kwargs (traffic.reasoning: true sets its enable_thinking" in message


@pytest.mark.parametrize(("url", "root"), [
    ("http://h:8000/v1", "http://h:8000"),
    ("http://h:8000/v1/", "http://h:8000"),
    ("https://gw.example/vllm/v1/chat/completions", "https://gw.example/vllm"),
    ("http://h:8000/v1/completions?x=1", "http://h:8000"),
    ("http://h:8000/v1/models", "http://h:8000"),
])
def test_a_base_or_endpoint_url_is_refused_at_load_naming_the_root(url: str,
                                                                   root: str) -> None:
    message = _refused(f"server.url={url}")
    assert f"give the server's root, {root!r}" in message
    assert "the suite adds /health, /v1/models and /v1/chat/completions itself" in message


@pytest.mark.parametrize("url", ["http://h:8000", "http://h:8000/", "https://gw/vllm",
                                 "http://h/v10", "http://h/api/v1x"])
def test_a_root_url_passes(url: str) -> None:
    assert root_url_problem(url) is None
    load_scenario("chat", [f"server.url={url}"])


@pytest.mark.parametrize("key", ["port", "host"])
def test_the_hint_for_host_and_port_says_to_attach_not_to_use_server_model(key: str) -> None:
    with pytest.raises(ScenarioError) as caught:
        plan_launch(ServerSpec(args={key: 9}), "gpu", "/m", 1)
    message = str(caught.value)
    assert message.startswith(f"server.args.{key}: set by the suite; ")
    assert "server.model" not in message and "attach with server.url" in message


def test_model_flags_are_pointed_at_their_own_keys() -> None:
    assert suite_flag_problem("model") == "server.args.model: set by the suite; use server.model"
    assert suite_flag_problem("served_model_name") == (
        "server.args.served_model_name: set by the suite; use server.served_model_name")
    assert suite_flag_problem("max-num-seqs") is None


@dataclass
class SchedulerLike:
    """The shape of vLLM's configs: pydantic dataclasses with bounded fields."""

    max_num_seqs: int = Field(default=128, ge=1)
    gpu_memory_utilization: float = Field(default=0.9, gt=0, le=1)
    long_prefill_token_threshold: int = Field(default=0, ge=0)


@pytest.mark.parametrize(("values", "said"), [
    ({"max_num_seqs": 0}, "argument --max-num-seqs: 0 is out of range: vLLM's "
                          "SchedulerLike.max_num_seqs must be >= 1"),
    ({"max_num_seqs": -3}, "argument --max-num-seqs: -3 is out of range"),
    ({"gpu_memory_utilization": 1.5}, "argument --gpu-memory-utilization: 1.5 is out of range: "
                                      "vLLM's SchedulerLike.gpu_memory_utilization must be <= 1"),
    ({"gpu_memory_utilization": 0.0}, "argument --gpu-memory-utilization: 0.0 is out of range: "
                                      "vLLM's SchedulerLike.gpu_memory_utilization must be > 0"),
])
def test_numbers_outside_vllms_declared_bounds_are_named(values: dict[str, object],
                                                         said: str) -> None:
    problem = out_of_bounds(values, [SchedulerLike, int])
    assert problem is not None and problem.startswith(said)


def test_numbers_within_bounds_and_other_values_pass() -> None:
    assert out_of_bounds({"max_num_seqs": 1, "gpu_memory_utilization": 1.0,
                          "long_prefill_token_threshold": 0, "other": -1}, [SchedulerLike]) \
        is None
    assert out_of_bounds({"max_num_seqs": None, "gpu_memory_utilization": "auto"},
                         [SchedulerLike]) is None
    assert out_of_bounds({"max_num_seqs": True}, [SchedulerLike]) is None  # a flag, not 1


@dataclass
class SpeculativeLike:
    max_model_len: int | None = Field(default=None, ge=1)


@dataclass
class ModelLike:
    max_model_len: int | None = Field(default=None, ge=-1)


def test_a_name_several_configs_declare_is_refused_only_outside_all_of_them() -> None:
    configs = [SpeculativeLike, ModelLike]
    assert out_of_bounds({"max_model_len": -1}, configs) is None  # ModelConfig's "auto"
    problem = out_of_bounds({"max_model_len": -2}, configs)
    assert problem is not None and problem.endswith("SpeculativeLike.max_model_len must be >= 1")


def test_a_bound_refusal_reads_as_a_rejection_of_the_key() -> None:
    error = out_of_bounds({"max_num_seqs": 0}, [SchedulerLike])
    message = rejection_message({"max-num-seqs": 0}, ArgsCheck(False, error, ()))
    assert message.startswith("server.args.max-num-seqs = 0: vLLM rejects it: argument "
                              "--max-num-seqs: 0 is out of range")


def test_answers_cached_by_an_older_check_are_asked_again(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setattr(vllm_args, "cache_root", lambda: tmp_path)
    monkeypatch.setattr(vllm_args, "vllm_version", lambda: "0.32.0+cpu")
    assert vllm_args._cache_dir() == (tmp_path / "vllm-args" /
                                      f"0.32.0+cpu-check{CHECK_REVISION}")
    assert CHECK_REVISION >= 2  # 1: parser only, which took max-num-seqs 0
