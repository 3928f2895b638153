"""`traffic:` — what the load generator sends and when: the profile (and each registered
profile's settings section), how requests arrive (`arrival`: closed loop, open loop, stages),
the window (warm-up, measured, cool-down), the request fields, the mix of profiles and of LoRA
adapters, and the bounds past which a run is flagged client-limited."""

from __future__ import annotations

import functools
from collections.abc import Mapping
from typing import Annotated, Any, Literal, TypeVar

from pydantic import (
    AfterValidator,
    BeforeValidator,
    Field,
    ModelWrapValidatorHandler,
    PrivateAttr,
    SerializationInfo,
    SerializerFunctionWrapHandler,
    TypeAdapter,
    model_serializer,
    model_validator,
)

from vllm_slo.scenarios.lora import BASE, AdapterName, lora_weights
from vllm_slo.scenarios.model_base import MAX_RATE, Frozen, Seconds, validate_registered_keys
from vllm_slo.scenarios.prefix_cache import PrefixCacheSpec
from vllm_slo.scenarios.profile_specs import PROFILE_SPECS, mixable_profiles, one_of

OPEN_LOOP_KINDS = ("poisson", "gamma", "constant")
# request fields the suite sets itself (vllm_slo/loadtests/openai_stream.py `request_body`),
# each with where to set it instead: `extra_body` is merged last, so one of these there would
# change what the server is asked while the rows record what the suite meant to ask
SUITE_OWNED_FIELDS = {
    "model": "the suite sends the served model's name: set server.served_model_name, or "
             "traffic.lora for adapters",
    "messages": "the traffic profile writes the prompts",
    "prompt": "the traffic profile writes the prompts",
    "stream": "the suite streams every request, timing each chunk",
    "max_tokens": "the traffic profile sets each request's output length",
    "max_completion_tokens": "the traffic profile sets each request's output length",
    "n": "the suite measures one completion per request",
    "temperature": "use traffic.temperature",
    "ignore_eos": "use traffic.ignore_eos",
}
RETRY_AFTER_MAX_S = 60.0  # closed loop: the longest Retry-After a user honours


class StageSpec(Frozen):
    """One step of a `stages` load: a request rate (open loop) or a user count (closed)."""

    duration_s: Seconds = Field(alias="duration", gt=0)
    rate: float | None = Field(None, gt=0, le=MAX_RATE,
                               description="requests per second (open loop)")
    users: int | None = Field(None, ge=1, le=100_000, description="concurrent users (closed)")

    @model_validator(mode="after")
    def _rate_or_users(self) -> StageSpec:
        if (self.rate is None) == (self.users is None):
            raise ValueError(f"a stage sets exactly one of rate (req/s) or users, got "
                             f"rate = {self.rate!r}, users = {self.users!r}")
        return self


class ArrivalSpec(Frozen):
    """How requests arrive.

    closed: `users` concurrent users, each sending after the previous answer + `think_time`
        (Locust's native model), ramped in at `spawn_rate` users/s.
    poisson | gamma | constant: open loop at `rate` req/s; requests start at their scheduled
        times whatever earlier responses do; at most `max_in_flight` at once (hits reported).
        gamma: `burstiness` is the shape as in vLLM bench (1 = poisson, < 1 burstier).
    stages: a list of {duration, rate} (open loop, poisson within a stage) or
        {duration, users} (closed loop, via Locust's LoadTestShape) steps from the start of the
        run (warm-up included); the last stage lasts until the end.
    trace: open loop at the times of `traffic.profile: trace`'s records (its plan carries
        them); at most `max_in_flight` at once.
    """

    kind: Literal["closed", "poisson", "gamma", "constant", "stages", "trace"] = "closed"
    users: int = Field(8, ge=1, le=100_000)
    spawn_rate: float = Field(4.0, gt=0, le=MAX_RATE,
                              description="users started per second (closed)")
    think_time_s: Seconds = Field(0.0, alias="think_time", ge=0)
    rate: float | None = Field(None, gt=0, le=MAX_RATE,
                               description="requests per second (open loop)")
    burstiness: float = Field(1.0, gt=0)
    max_in_flight: int = Field(256, ge=1, le=100_000)
    stages: list[StageSpec] = Field(default_factory=list)

    @model_validator(mode="after")
    def _complete_for_kind(self) -> ArrivalSpec:
        if self.kind in OPEN_LOOP_KINDS and self.rate is None:
            raise ValueError(f"arrival kind {self.kind!r} needs rate (requests per second)")
        if self.kind not in OPEN_LOOP_KINDS and self.rate is not None:
            raise ValueError(
                f"rate = {self.rate!r} is only used with the open-loop kinds "
                f"({', '.join(OPEN_LOOP_KINDS)}); kind {self.kind!r} "
                + {"stages": "sets a rate per stage",
                   "trace": "sends at the trace's times (traffic.trace.speedup, rate_scale)"
                   }.get(self.kind, "is driven by users"))
        if self.kind == "stages":
            if not self.stages:
                raise ValueError("arrival kind 'stages' needs a non-empty stages list")
            if len({stage.rate is None for stage in self.stages}) > 1:
                raise ValueError("stages are all open loop (rate) or all closed loop (users)")
        elif self.stages:
            raise ValueError(f"stages are only used with kind 'stages', not {self.kind!r}")
        if self.think_time_s > 0 and self.open_loop:
            raise ValueError(
                f"think_time = {self.think_time_s!r}s is only used by closed-loop users "
                f"(kind 'closed' or stages of users); an open loop sends at its rate")
        return self

    @property
    def open_loop(self) -> bool:
        return self.kind in (*OPEN_LOOP_KINDS, "trace") or (
            self.kind == "stages" and self.stages[0].rate is not None)

    def peak_rate(self) -> float | None:
        if self.kind in OPEN_LOOP_KINDS:
            return self.rate
        if self.kind == "stages" and self.open_loop:
            return max(stage.rate or 0.0 for stage in self.stages)
        return None


def suite_owned_problem(extra_body: Mapping[str, Any], reasoning: bool) -> str | None:
    """Pure: why `traffic.extra_body` may not be sent as it is: the suite-owned fields it
    sets (named, each with where to set it instead), a `stream_options` without
    `include_usage: true` (the plain form, without continuous usage, is allowed), or
    `chat_template_kwargs` beside `traffic.reasoning` (which sets it); None when it sets
    none."""
    lines = [f"{key} ({SUITE_OWNED_FIELDS[key]})" for key in extra_body
             if key in SUITE_OWNED_FIELDS]
    options = extra_body.get("stream_options", {"include_usage": True})
    if not isinstance(options, Mapping) or options.get("include_usage") is not True:
        lines.append(f"stream_options = {options!r} (the suite counts tokens with the usage "
                     "chunk: keep include_usage: true; {include_usage: true} alone is the "
                     "plain form for a server that refuses continuous_usage_stats)")
    if reasoning and "chat_template_kwargs" in extra_body:
        lines.append("chat_template_kwargs (traffic.reasoning: true sets its "
                     "enable_thinking: put enable_thinking: true in yours and drop "
                     "traffic.reasoning)")
    if not lines:
        return None
    return ("extra_body sets request fields the suite sets itself: " + "; ".join(lines)
            + ". Remove them from traffic.extra_body")


def _worker_count(value: Any) -> int | str:
    if value == "auto":
        return "auto"
    if isinstance(value, int) and not isinstance(value, bool) and 1 <= value <= 256:
        return value
    raise ValueError(f"expected 'auto' or a whole number of processes from 1 to 256, "
                     f"got {value!r}")


@functools.lru_cache(maxsize=256)
def _adapter(model: type[Frozen]) -> TypeAdapter[Any]:
    return TypeAdapter(model)


def _registered_profile(name: str) -> str:
    if name not in PROFILE_SPECS:
        raise ValueError(f"Input should be {one_of(list(PROFILE_SPECS))}")
    return name


def _mixable_profile(name: str) -> str:
    """A part of a mix: a profile registered as mixable (`traffic.mix`, `slo.by_profile`)."""
    if name not in mixable_profiles():
        raise ValueError(f"Input should be {one_of(mixable_profiles())} (the profiles a mix "
                         "draws from)")
    return name


# a part of a mix: the key of `traffic.mix` and of `slo.by_profile`
MixPart = Annotated[str, AfterValidator(_mixable_profile)]

_Traffic = TypeVar("_Traffic", bound="TrafficSpec")
_Settings = TypeVar("_Settings", bound=Frozen)


class TrafficSpec(Frozen):
    """`traffic:`. The registered profiles (profile_specs.PROFILE_SPECS) name `profile` and
    each has its settings section, `traffic.<name>` (read with `settings(ChatSpec)`), checked
    by its own model; the traffic model has no field per profile."""

    profile: Annotated[str, AfterValidator(_registered_profile)] = Field(
        "chat", description="a registered traffic profile: chat | long-doc | sharegpt | mix "
        "| trace")
    endpoint: Literal["chat", "completions"] = "chat"
    arrival: ArrivalSpec = Field(default_factory=ArrivalSpec)
    duration_s: Seconds = Field(60.0, alias="duration", gt=0)
    warmup_s: Seconds = Field(10.0, alias="warmup", ge=0)
    cooldown_s: Seconds = Field(0.0, alias="cooldown", ge=0)
    stop_timeout_s: Seconds = Field(60.0, alias="stop_timeout", gt=0)
    request_timeout_s: Seconds = Field(300.0, alias="request_timeout", gt=0)
    seed: int = 0
    workers: Annotated[int | Literal["auto"], BeforeValidator(_worker_count)] = Field(
        "auto", description="Locust worker processes (--processes N); auto: the host's cores "
        "minus the launched server's share, at most one per user")
    ignore_eos: bool = Field(True, description="vLLM extension: exact output lengths")
    temperature: float = Field(0.0, ge=0)
    reasoning: bool = Field(
        False, description="chat: ask a reasoning model to think "
        "(chat_template_kwargs.enable_thinking); the server needs --reasoning-parser")
    extra_body: dict[str, Any] = Field(
        default_factory=dict, description="more top-level request fields, as the OpenAI "
        "client's extra_body (vLLM's logit_bias, top_k, chat_template_kwargs ...), merged last")
    overlong: Literal["trim", "reject"] = Field(
        "trim", description="prompts that do not fit max-model-len are trimmed or dropped")
    tokenizer: str | None = Field(
        None, description="tokenizer folder/file; default: the launched model's folder, "
        "else the server's /tokenize endpoint")
    prefix_cache: PrefixCacheSpec = Field(
        default_factory=PrefixCacheSpec,
        description="reset | keep, or {target_hit_rate, tolerance, phases: cold | warm | keep}: "
        "the cache state before the window and a hit rate shaped and checked (prefix_cache.py)")
    max_send_lag_p99_s: Seconds = Field(
        0.05, alias="max_send_lag_p99", gt=0,
        description="a run whose p99 send lag exceeds this is flagged client-limited")
    remote_workers: int = Field(
        0, ge=0, le=4096,
        description="Locust's distributed mode across hosts: the suite runs the master only and "
        "waits for this many `vllm-slo worker` processes (the command, with the run's token, "
        "is printed); the plan goes to them and their rows come back over Locust's channel")
    remote_workers_wait_s: Seconds = Field(
        300.0, alias="remote_workers_wait", gt=0,
        description="with remote_workers: how long the master waits for all of them to join "
        "(fewer by then: the run is invalid, exit 4)")
    master_bind: str = Field(
        "127.0.0.1", description="with remote_workers: the address the Locust master listens "
        "on (loopback by default; give this host's address to admit other hosts)")
    master_port: int = Field(5557, ge=1, le=65535, description="with remote_workers")
    max_loop_lag_p99_s: Seconds = Field(
        0.05, alias="max_loop_lag_p99", gt=0,
        description="a run whose load-generator event-loop lag p99 exceeds this is flagged "
        "client-limited (its timestamps are late by that much); the main job on a 2-core box "
        "measured 2.9-27.6 ms (docs/measurement.md); lower it for fast servers")
    min_held_concurrency: float = Field(
        0.98, gt=0, le=1,
        description="closed loop: a run whose users were busy (in flight or thinking) less than "
        "this share of the measured window is flagged client-limited")
    retry_after: Literal["honour", "ignore"] = Field(
        "honour",
        description="closed loop: a user answered with an HTTP error carrying Retry-After (429, "
        f"503) waits that long, at most {RETRY_AFTER_MAX_S:g} s, before its next request "
        "(ignore: goes on at once); open loop keeps its schedule either way (the arrivals are "
        "the experiment)")
    mix: dict[MixPart, Annotated[float, Field(gt=0)]] = Field(
        default_factory=dict,
        description="profile: mix — each conversation is dealt to one of these profiles "
        "(configured in their own sections) by these weights, e.g. {chat: 3, long-doc: 1}: "
        "every leading part of the plan within one conversation of the weights")
    lora: Annotated[dict[AdapterName, Annotated[float, Field(gt=0)]],
                    AfterValidator(lora_weights)] = Field(
        default_factory=dict,
        description=f"weights across the base model ({BASE!r}) and LoRA adapters, e.g. "
        f"{{{BASE}: 2, sql: 1}}: each conversation's requests name one of them as `model`")
    _sections: dict[str, Frozen] = PrivateAttr(default_factory=dict)

    @classmethod
    def registered_keys(cls) -> Mapping[str, Any]:
        return {name: spec.settings for name, spec in PROFILE_SPECS.items()
                if spec.settings is not None}

    @model_validator(mode="wrap")
    @classmethod
    def _profile_sections(cls, data: Any, handler: ModelWrapValidatorHandler[_Traffic]
                          ) -> _Traffic:
        """Each registered profile's section by its settings model (defaults where absent)."""
        sections = cls.registered_keys()
        traffic, values = validate_registered_keys(
            cls, data, {name: _adapter(model) for name, model in sections.items()}, handler)
        if values is not None:
            traffic._sections = {name: values.get(name) or model()
                                 for name, model in sections.items()}
        return traffic

    @model_serializer(mode="wrap")
    def _with_sections(self, handler: SerializerFunctionWrapHandler,
                       info: SerializationInfo) -> dict[str, Any]:
        """The sections written back where they always were: before `mix`."""
        document: dict[str, Any] = handler(self)
        mix = document.pop("mix")
        for name, spec in PROFILE_SPECS.items():
            if spec.settings is not None:
                document[name] = self.settings(spec.settings).model_dump(
                    mode=info.mode, by_alias=info.by_alias)
        document["mix"] = mix
        return document

    def settings(self, model: type[_Settings]) -> _Settings:
        """This run's section of the profile whose settings model is `model`
        (`traffic.settings(ChatSpec).turns`)."""
        name = next((name for name, spec in PROFILE_SPECS.items() if spec.settings is model),
                    None)
        if name is None:
            raise ValueError(f"no registered traffic profile has the settings {model.__name__}")
        section = self._sections.get(name)
        return section if isinstance(section, model) else model()

    @model_validator(mode="after")
    def _mix_names_its_profiles(self) -> TrafficSpec:
        if self.profile == "mix" and len(self.mix) < 2:
            raise ValueError("profile: mix draws from two or more profiles: set traffic.mix, "
                             "e.g. {chat: 3, long-doc: 1}")
        if self.profile != "mix" and self.mix:
            raise ValueError(f"traffic.mix is for profile: mix (this profile is "
                             f"{self.profile!r})")
        return self

    @model_validator(mode="after")
    def _trace_sets_the_times(self) -> TrafficSpec:
        """profile: trace and arrival kind trace go together: the trace's records carry the
        send times, and its prompts carry the trace's own prefix sharing."""
        if (self.profile == "trace") != (self.arrival.kind == "trace"):
            raise ValueError(
                "profile: trace replays the trace's times: set traffic.arrival.kind: trace"
                if self.profile == "trace" else
                f"arrival kind 'trace' takes its times from profile: trace (this profile is "
                f"{self.profile!r})")
        if self.profile == "trace" and self.prefix_cache.target_hit_rate is not None:
            raise ValueError("profile: trace shares prefixes as the trace's hash ids say; "
                             "prefix_cache.target_hit_rate would reshape them: leave it unset")
        return self

    @model_validator(mode="after")
    def _extra_body_leaves_the_suites_fields(self) -> TrafficSpec:
        problem = suite_owned_problem(self.extra_body, self.reasoning)
        if problem is not None:
            raise ValueError(problem)
        return self

    @model_validator(mode="before")
    @classmethod
    def _processes_is_workers(cls, data: Any) -> Any:
        """`processes` (the name before `workers`; saved run folders carry it) means workers."""
        if isinstance(data, dict) and "processes" in data:
            data = dict(data)
            processes = data.pop("processes")
            if "workers" in data and data["workers"] != processes:
                raise ValueError(f"processes ({processes!r}) and workers ({data['workers']!r}) "
                                 "both given: use workers")
            data["workers"] = processes
        return data

    @property
    def total_s(self) -> float:
        """Planned traffic time: warm-up + measured window + cool-down."""
        return self.warmup_s + self.duration_s + self.cooldown_s

    @property
    def retry_after_max_s(self) -> float | None:
        """The longest Retry-After a closed-loop user waits out; None: not honoured."""
        if self.retry_after == "honour" and not self.arrival.open_loop:
            return RETRY_AFTER_MAX_S
        return None

