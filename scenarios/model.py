"""The scenario model: one frozen, strict pydantic model per scenario file.

YAML keys are the user's words (`duration: 30s`); attributes carry units (`duration_s`).
Unknown keys are rejected everywhere; `server.args` is passed verbatim to `vllm serve`.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import AfterValidator, BaseModel, BeforeValidator, ConfigDict, Field, model_validator

from scenarios.slo import (
    LATENCY_METRICS,
    SloRule,
    parse_error_rate_rule,
    parse_latency_rule,
    parse_rate_rule,
)
from scenarios.units import parse_duration_s

Seconds = Annotated[float, BeforeValidator(parse_duration_s)]
EngineArgValue = str | int | float | bool | None | list[str | int | float] | dict[str, Any]


class Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid", populate_by_name=True)


def _check_flag_name(args: dict[str, EngineArgValue]) -> dict[str, EngineArgValue]:
    for key in args:
        if key.startswith("-") or not key.replace("-", "").replace("_", "").isalnum():
            raise ValueError(
                f"engine arg names are vLLM flag names without leading dashes, "
                f"e.g. 'max-model-len'; got {key!r}"
            )
    return args


class ServerSpec(Frozen):
    """How to get a server: launch `vllm serve` (default) or attach to a running one by URL."""

    model: str = Field("tiny", description="'tiny' (generated locally), a local path or model id")
    url: str | None = Field(None, description="attach mode: target this running server")
    served_model_name: str | None = None
    args: Annotated[dict[str, EngineArgValue], AfterValidator(_check_flag_name)] = Field(
        default_factory=dict, description="`vllm serve` flags, verbatim (true/false -> --x/--no-x)"
    )
    env: dict[str, str] = Field(default_factory=dict)
    command: list[str] | None = Field(
        None, description="launcher prefix replacing `python -m servers.vllm_cli`, e.g. [vllm]"
    )
    platform: Literal["auto", "cpu", "gpu"] = "auto"
    ready_timeout_s: Seconds = Field(600.0, alias="ready_timeout", gt=0)
    api_key_env: str | None = Field(None, description="name of the env var holding the API key")

    @model_validator(mode="after")
    def _url_is_http(self) -> ServerSpec:
        if self.url is not None and not self.url.startswith(("http://", "https://")):
            raise ValueError(f"url must start with http:// or https://, got {self.url!r}")
        return self


class ArrivalSpec(Frozen):
    """Closed loop: `users` concurrent users, each sending after the previous answer + think."""

    kind: Literal["closed"] = "closed"
    users: int = Field(8, ge=1, le=100_000)
    spawn_rate: float = Field(4.0, gt=0, description="users started per second")
    think_time_s: Seconds = Field(0.0, alias="think_time", ge=0)


class ChatSpec(Frozen):
    """Multi-turn chat conversations sharing one long system prompt."""

    endpoint: Literal["chat", "completions"] = "chat"
    system_prompt_words: int = Field(200, ge=0)
    user_words: int = Field(40, ge=1)
    turns: int = Field(3, ge=1)
    max_tokens: int = Field(64, ge=1)
    ignore_eos: bool = True
    temperature: float = Field(0.0, ge=0)


class TrafficSpec(Frozen):
    profile: Literal["chat"] = "chat"
    arrival: ArrivalSpec = Field(default_factory=ArrivalSpec)
    duration_s: Seconds = Field(60.0, alias="duration", gt=0)
    warmup_s: Seconds = Field(10.0, alias="warmup", ge=0)
    stop_timeout_s: Seconds = Field(60.0, alias="stop_timeout", gt=0)
    request_timeout_s: Seconds = Field(300.0, alias="request_timeout", gt=0)
    seed: int = 0
    processes: int = Field(1, ge=1, le=256, description="Locust --processes")
    chat: ChatSpec = Field(default_factory=ChatSpec)


def _latency_rules(metric: str):
    def check(texts: list[str]) -> list[str]:
        for text in texts:
            parse_latency_rule(metric, text)
        return texts

    return AfterValidator(check)


def _single_rule(parse):
    def check(text: str | None) -> str | None:
        if text is not None:
            parse(text)
        return text

    return AfterValidator(check)


class SloSpec(Frozen):
    ttft: Annotated[list[str], _latency_rules("ttft")] = Field(default_factory=list)
    itl: Annotated[list[str], _latency_rules("itl")] = Field(default_factory=list)
    tpot: Annotated[list[str], _latency_rules("tpot")] = Field(default_factory=list)
    e2e: Annotated[list[str], _latency_rules("e2e")] = Field(default_factory=list)
    error_rate: Annotated[str | None, _single_rule(parse_error_rate_rule)] = None
    output_throughput: Annotated[
        str | None, _single_rule(lambda t: parse_rate_rule("output_throughput", t))
    ] = None
    request_throughput: Annotated[
        str | None, _single_rule(lambda t: parse_rate_rule("request_throughput", t))
    ] = None

    def rules(self) -> tuple[SloRule, ...]:
        rules: list[SloRule] = []
        for metric in LATENCY_METRICS:
            rules.extend(parse_latency_rule(metric, text) for text in getattr(self, metric))
        if self.error_rate is not None:
            rules.append(parse_error_rate_rule(self.error_rate))
        for metric in ("output_throughput", "request_throughput"):
            text = getattr(self, metric)
            if text is not None:
                rules.append(parse_rate_rule(metric, text))
        return tuple(rules)


class Scenario(Frozen):
    name: str = Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9_.-]*$")
    description: str = ""
    server: ServerSpec = Field(default_factory=ServerSpec)
    traffic: TrafficSpec = Field(default_factory=TrafficSpec)
    slo: SloSpec = Field(default_factory=SloSpec)

    def to_yaml_dict(self) -> dict[str, Any]:
        """The resolved scenario as the user would write it (aliases, durations in seconds)."""
        return self.model_dump(mode="json", by_alias=True)
