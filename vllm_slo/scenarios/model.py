"""The scenario model: one frozen, strict pydantic model per scenario file.

YAML keys are the user's words (`duration: 30s`); attributes carry units (`duration_s`).
Unknown keys are rejected everywhere; `server.args` is passed verbatim to `vllm serve`.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable, Mapping
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
    field_validator,
    model_serializer,
    model_validator,
)

from vllm_slo.scenarios.lora import BASE, LORA_FLAGS, AdapterName, LoraSpec, lora_weights
from vllm_slo.scenarios.metrics import (
    BUILT_IN_METRICS,
    METRICS,
    MetricKind,
    parse_cell,
    split_cell,
)
from vllm_slo.scenarios.model_base import Frozen, validate_registered_keys
from vllm_slo.scenarios.prefix_cache import PrefixCacheSpec
from vllm_slo.scenarios.profile_specs import PROFILE_SPECS, mixable_profiles, one_of
from vllm_slo.scenarios.server_configs import CONFIG_DIR, config_path, read_server_config
from vllm_slo.scenarios.slo import SloRule, parse_abort_error_rate, parse_rule
from vllm_slo.scenarios.units import parse_duration_s

MAX_DURATION_S = 7 * 86_400.0  # any duration or timeout of a scenario: at most a week
MAX_RATE = 100_000.0  # requests (or users spawned) per second
MAX_NAME_CHARS = 100  # a scenario's or variant's name is part of a folder's name


def _at_most_a_week(seconds: float) -> float:
    if not seconds <= MAX_DURATION_S:  # also NaN
        raise ValueError(f"at most 7 days ({MAX_DURATION_S:.0f} s), got {seconds:g} s")
    return seconds


Seconds = Annotated[float, BeforeValidator(parse_duration_s), AfterValidator(_at_most_a_week)]
# what server.devices sets: GPUs on a GPU, the OpenMP threads' cores on vLLM's CPU build
DEVICE_ENV_VARS = ("CUDA_VISIBLE_DEVICES", "VLLM_CPU_OMP_THREADS_BIND")
EngineArgValue = str | int | float | bool | None | list[str | int | float] | dict[str, Any]
_FlagArgs = TypeVar("_FlagArgs", bound=Mapping[str, object])  # keyed by vLLM flag names


def _check_flag_name(args: _FlagArgs) -> _FlagArgs:
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
    config: str | None = Field(
        None, description="a named server config (servers/NAME.yaml) or a path to a "
        "YAML file in vLLM's --config format; `args` override its keys")
    env: dict[str, str] = Field(default_factory=dict)
    command: list[str] | None = Field(
        None,
        description="launcher prefix replacing `python -m vllm_slo.servers.vllm_cli`, e.g. [vllm]"
    )
    platform: Literal["auto", "cpu", "gpu"] = "auto"
    ready_timeout_s: Seconds = Field(600.0, alias="ready_timeout", gt=0)
    api_key_env: str | None = Field(None, description="name of the env var holding the API key")
    instance: str | None = Field(
        None, description="a label for the server instance (attach mode: which running server, "
                          "e.g. on-instance-1); recorded per trial in provenance.json")
    devices: tuple[Annotated[int, Field(ge=0)], ...] | None = Field(
        None, min_length=1,
        description="where the launched server runs: GPU indices (CUDA_VISIBLE_DEVICES) on a "
                    "GPU, CPU core ids on vLLM's CPU build (its whole process group confined "
                    "there, its OpenMP threads bound: VLLM_CPU_OMP_THREADS_BIND)")
    core_split: Literal["auto", "off"] = Field(
        "auto", description="vLLM's CPU build on a host of at most 4 cores: auto gives the "
                            "server the first half of the cores and Locust the rest; off pins "
                            "nothing")
    lora: LoraSpec | None = Field(
        None, description="LoRA adapters the launched server loads (--enable-lora "
                          "--lora-modules ...); traffic.lora splits requests across them")

    @model_validator(mode="after")
    def _lora_flags_in_one_place(self) -> ServerSpec:
        if self.lora is None:
            return self
        if self.url is not None:
            raise ValueError("server.lora loads adapters into a launched server; an attached "
                             "one (server.url) serves its own: name them in traffic.lora")
        named = [flag for flag in LORA_FLAGS if flag in self.args]
        if named:
            raise ValueError(f"server.lora sets {', '.join(named)}: remove it from "
                             "server.args (or drop server.lora)")
        return self

    @field_validator("core_split", mode="before")
    @classmethod
    def _yaml_off_is_off(cls, value: object) -> object:
        """YAML reads a bare `off` as false (and `on` as true)."""
        return {False: "off", True: "auto"}.get(value, value) if isinstance(value, bool) \
            else value

    @model_validator(mode="after")
    def _devices_are_placeable(self) -> ServerSpec:
        if self.devices is None:
            return self
        if len(set(self.devices)) != len(self.devices):
            raise ValueError(f"server.devices lists a device twice: {list(self.devices)}")
        if self.url is not None:
            raise ValueError("server.devices places a launched server; attach mode "
                             "(server.url) targets one that already runs")
        named = sorted(set(self.env) & set(DEVICE_ENV_VARS))
        if named:
            raise ValueError(f"server.devices sets {', '.join(named)}: remove it from "
                             "server.env (or drop server.devices)")
        return self

    @field_validator("config")
    @classmethod
    def _config_is_readable(cls, reference: str | None) -> str | None:
        """A config file must exist and hold flags; a path is kept absolute (the run folder's
        copy of the scenario must find it from anywhere)."""
        if reference is None:
            return None
        _check_flag_name(read_server_config(reference))
        path = config_path(reference)
        return reference if path.parent == CONFIG_DIR else str(path)

    @property
    def engine_args(self) -> dict[str, EngineArgValue]:
        """The `vllm serve` flags: the config file's, overridden by `args`."""
        file_flags = read_server_config(self.config) if self.config is not None else {}
        return {**file_flags, **self.args}

    @model_validator(mode="after")
    def _url_is_http(self) -> ServerSpec:
        if self.url is not None and not self.url.startswith(("http://", "https://")):
            raise ValueError(f"url must start with http:// or https://, got {self.url!r}")
        return self


OPEN_LOOP_KINDS = ("poisson", "gamma", "constant")
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
    """

    kind: Literal["closed", "poisson", "gamma", "constant", "stages"] = "closed"
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
                + ("sets a rate per stage" if self.kind == "stages" else "is driven by users"))
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
        return self.kind in OPEN_LOOP_KINDS or (
            self.kind == "stages" and self.stages[0].rate is not None)

    def peak_rate(self) -> float | None:
        if self.kind in OPEN_LOOP_KINDS:
            return self.rate
        if self.open_loop:
            return max(stage.rate or 0.0 for stage in self.stages)
        return None


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


_Traffic = TypeVar("_Traffic", bound="TrafficSpec")
_Settings = TypeVar("_Settings", bound=Frozen)


class TrafficSpec(Frozen):
    """`traffic:`. The registered profiles (profile_specs.PROFILE_SPECS) name `profile` and
    each has its settings section, `traffic.<name>` (read with `settings(ChatSpec)`), checked
    by its own model; the traffic model has no field per profile."""

    profile: Annotated[str, AfterValidator(_registered_profile)] = Field(
        "chat", description="a registered traffic profile: chat | long-doc | sharegpt | mix")
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
        "waits for this many `locust --worker` processes (the command is printed; each host "
        "must see the run folder at the same path)")
    master_bind: str = Field(
        "127.0.0.1", description="with remote_workers: the address the Locust master listens "
        "on (loopback by default; give this host's address to admit other hosts)")
    master_port: int = Field(5557, ge=1, le=65535, description="with remote_workers")
    max_loop_lag_p99_s: Seconds = Field(
        0.05, alias="max_loop_lag_p99", gt=0,
        description="a run whose load-generator event-loop lag p99 exceeds this is flagged "
        "client-limited (its timestamps are late by that much); the main job on a 2-core box "
        "measured 2.9-27.6 ms (README 'Measurement health'); lower it for fast servers")
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
    mix: dict[Annotated[str, AfterValidator(_mixable_profile)],
              Annotated[float, Field(gt=0)]] = Field(
        default_factory=dict,
        description="profile: mix — each conversation is drawn from one of these profiles "
        "(configured in their own sections), with these weights, e.g. {chat: 3, long-doc: 1}")
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


def _rules_of(metric: str) -> TypeAdapter[Any]:
    """An `slo:` entry of `metric`: a list of rules (latency) or one rule (a rate, a fraction;
    null: none), each checked by its kind's grammar (`slo.parse_rule`)."""
    return _rules_adapter(metric, METRICS[metric].kind)


@functools.lru_cache(maxsize=256)
def _rules_adapter(metric: str, kind: MetricKind) -> TypeAdapter[Any]:
    def check(value: list[str] | str | None) -> list[str] | str | None:
        for text in [value] if isinstance(value, str) else value or []:
            parse_rule(metric, text)
        return value

    if kind is MetricKind.LATENCY:
        return TypeAdapter(Annotated[list[str], AfterValidator(check)])
    return TypeAdapter(Annotated[str | None, AfterValidator(check)])


def _single_rule(parse: Callable[[str], object]) -> AfterValidator:
    def check(text: str | None) -> str | None:
        if text is not None:
            parse(text)
        return text

    return AfterValidator(check)


_Rules = TypeVar("_Rules", bound="SloRules")


class SloRules(Frozen):
    """The rules of an `slo:` block (and of each part's under `slo.by_profile`), keyed by the
    metrics of the registry (metrics.METRICS, read when a scenario is validated: a metric
    registered in one module is an `slo:` key at once): a latency metric takes a list of
    rules, a rate or a fraction one rule, each parsed by its kind's grammar. Written back
    (`model_dump`) as the user writes it, every built-in metric included."""

    _written: dict[str, tuple[str, ...]] = PrivateAttr(default_factory=dict)

    @classmethod
    def registered_keys(cls) -> Mapping[str, Any]:
        return {name: (list[str] if metric.kind is MetricKind.LATENCY else str)
                for name, metric in METRICS.items()}

    @model_validator(mode="wrap")
    @classmethod
    def _metric_keys(cls, data: Any, handler: ModelWrapValidatorHandler[_Rules]) -> _Rules:
        rules, values = validate_registered_keys(
            cls, data, {name: _rules_of(name) for name in METRICS}, handler)
        if values is not None:
            rules._written = {name: (value,) if isinstance(value, str) else tuple(value)
                              for name, value in values.items() if value}
        return rules

    @model_serializer(mode="wrap")
    def _as_written(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        document: dict[str, Any] = {}
        for name in (*BUILT_IN_METRICS, *(m for m in self._written if m not in BUILT_IN_METRICS)):
            rules = self._written.get(name, ())
            latency = name in METRICS and METRICS[name].kind is MetricKind.LATENCY
            document[name] = list(rules) if latency else (rules[0] if rules else None)
        fields: dict[str, Any] = handler(self)
        return {**document, **fields}

    def written(self, metric: str) -> tuple[str, ...]:
        """The rules of `metric` as written (none: empty)."""
        return self._written.get(metric, ())

    def own_rules(self, profile: str | None = None) -> tuple[SloRule, ...]:
        """Every rule of this block, in the registry's metric order."""
        rules = [parse_rule(metric, text) for metric in METRICS for text in self.written(metric)]
        return tuple(dataclasses.replace(rule, profile=profile) for rule in rules)


class SloSpec(SloRules):
    by_profile: dict[Annotated[str, AfterValidator(_mixable_profile)], SloRules] = Field(
        default_factory=dict,
        description="profile: mix — rules judged on one part's requests only, e.g. "
                    "{chat: {itl: [\"p99 < 50ms\"]}}")
    by_adapter: dict[AdapterName, SloRules] = Field(
        default_factory=dict,
        description="traffic.lora — rules judged on one adapter's requests only (base: the "
                    "base model's), e.g. {sql: {ttft: [\"p95 < 1s\"]}}")

    def rules(self) -> tuple[SloRule, ...]:
        """Every rule: the whole run's, then each part's (`SloRule.profile` set), then each
        adapter's (`SloRule.adapter` set)."""
        return (*self.own_rules(), *(rule for profile, spec in self.by_profile.items()
                                     for rule in spec.own_rules(profile)),
                *(dataclasses.replace(rule, adapter=adapter)
                  for adapter, spec in self.by_adapter.items() for rule in spec.own_rules()))


VARIANT_KEYS = ("server", "traffic", "slo", "description")
DEFAULT_COMPARED_CELLS = ("ttft.p50", "ttft.p90", "itl.p50", "tpot.p50", "e2e.p50",
                          "output_throughput.mean")


def _check_cell(cell: str) -> str:
    """A whole-run cell (`itl.p99`) or one part's of a mix (`chat:itl.p99`)."""
    part = parse_cell(cell).part
    if part is not None and part not in mixable_profiles():
        raise ValueError(f"{part!r}: a cell's part is one of {', '.join(mixable_profiles())} "
                         "(e.g. chat:itl.p99, for profile: mix)")
    return cell


class CompareSpec(Frozen):
    """What a comparison between variants (or saved runs) tests, on per-trial statistics."""

    cells: list[Annotated[str, AfterValidator(_check_cell)]] = Field(
        default_factory=lambda: list(DEFAULT_COMPARED_CELLS),
        description="metric.statistic cells; Holm-corrected as one family per pair")
    alpha: float = Field(0.05, gt=0, lt=1)
    effect: float = Field(0.10, gt=0, lt=10, description="relative effect to plan trials for; "
                          "a sequential design's equivalence margin (±effect)")
    test: Literal["welch-log", "mann-whitney"] = Field(
        "welch-log", description="the per-trial test of a sequential design's looks and of "
        "the design check: Welch t on logarithms, or Mann-Whitney U (docs/statistics.md)")


class AbortSpec(Frozen):
    """When to stop a run early (exit 4, the reason named): a broken server wastes no more of
    the run. Checked on all rows so far (warm-up too) once `min_requests` have finished."""

    error_rate: Annotated[str | None, _single_rule(parse_abort_error_rate)] = Field(
        None, description="e.g. '> 50%': abort when more than half the requests failed")
    min_requests: int = Field(20, ge=1, description="finished requests before judging")

    @property
    def error_rate_fraction(self) -> float | None:
        return None if self.error_rate is None else parse_abort_error_rate(self.error_rate)

    def reason(self, finished: int, failed: int) -> str | None:
        """Why to abort after `failed` of `finished` requests failed, or None."""
        limit, rule = self.error_rate_fraction, self.error_rate
        if limit is None or rule is None or finished < self.min_requests:
            return None
        rate = failed / finished
        above = rate >= limit if rule.strip().startswith(">=") else rate > limit
        if not above:
            return None
        return (f"error rate {rate:.0%} ({failed} of {finished} requests failed) "
                f"{rule.strip()} (abort_on.error_rate, after >= {self.min_requests})")


class SearchSpec(Frozen):
    """One of the tuning guides' procedures: move one server arg step by step from `start`
    (times `factor`, or plus `step`) until a stop condition holds or `max`/`max_steps` is
    reached. Each step is a candidate run as trials on the best configuration found so far.

    until: preemptions (vLLM counted any), start_failure (the server did not come up: OOM, KV
    cache too small), slo_fail (an SLO failed across the step's trials), no_gain (the
    objective's median did not rise above the previous step's)."""

    arg: str = Field(description="a vllm serve flag name, e.g. max-num-batched-tokens")
    start: float | str = Field(description="a number, or the name of another server arg whose "
                                           "value it starts from (e.g. max-model-len)")
    factor: float | None = Field(None, gt=1, description="multiply the value by this per step")
    step: float | None = Field(None, gt=0, description="add this to the value per step")
    max: float | None = Field(None, gt=0, description="no step goes above this value")
    max_steps: int = Field(6, ge=1, le=64)
    until: list[Literal["preemptions", "start_failure", "slo_fail", "no_gain"]] = Field(
        min_length=1)

    @field_validator("arg")
    @classmethod
    def _arg_is_flag(cls, arg: str) -> str:
        _check_flag_name({arg: None})
        return arg

    @model_validator(mode="after")
    def _one_way_to_move(self) -> SearchSpec:
        if (self.factor is None) == (self.step is None):
            raise ValueError(f"search over {self.arg!r} sets exactly one of factor (multiply "
                             f"per step, e.g. 2) or step (add per step, e.g. 0.05)")
        if isinstance(self.start, str):
            _check_flag_name({self.start: None})
        elif self.start <= 0:
            raise ValueError(f"search over {self.arg!r}: start must be > 0, got {self.start!r}")
        return self


def _grid_values(grid: dict[str, list[EngineArgValue]]) -> dict[str, list[EngineArgValue]]:
    _check_flag_name(grid)
    for flag, values in grid.items():
        if not values:
            raise ValueError(f"grid {flag!r} lists no values")
        if len({repr(value) for value in values}) != len(values):
            raise ValueError(f"grid {flag!r} repeats a value: {values!r}")
    return grid


class SideBySideSpec(Frozen):
    """Each round of an experiment runs all its variants at the same time, one per device
    slot; the slots rotate among the variants from round to round, so every variant meets
    every device (as A B B A balances drift over time)."""

    devices: list[Annotated[list[Annotated[int, Field(ge=0)]], Field(min_length=1)]] = Field(
        min_length=2, description="one slot per variant, e.g. [[0], [1]] (GPU indices; CPU "
                                  "core ids on vLLM's CPU build)")

    @field_validator("devices")
    @classmethod
    def _slots_are_disjoint(cls, slots: list[list[int]]) -> list[list[int]]:
        seen: set[int] = set()
        for slot in slots:
            shared = seen & set(slot)
            if shared or len(set(slot)) != len(slot):
                raise ValueError(f"side_by_side.devices: device(s) "
                                 f"{sorted(shared) or slot} in more than one place: "
                                 "each slot needs devices of its own")
            seen |= set(slot)
        return slots

    def slot_of(self, variant_index: int, round_index: int) -> tuple[int, ...]:
        """The devices variant `variant_index` runs on in round `round_index` (from 0)."""
        return tuple(self.devices[(variant_index + round_index) % len(self.devices)])


class TuneSpec(Frozen):
    """`vllm-slo tune`: a search space over server args, every candidate run as trials on fresh
    servers and ranked by `objective`; one candidate is called better than another only when
    the difference across trials is significant (docs/tuning.md)."""

    objective: Literal["goodput", "output_throughput", "request_throughput"] = Field(
        "goodput", description="goodput: requests/s that met every per-request latency SLO "
        "(ttft, tpot, e2e); throughputs are means over the measured window")
    trials: int | None = Field(None, ge=1, le=100,
                               description="trials per candidate (default: the scenario's)")
    baseline: bool = Field(
        False, description="also run the scenario's own server args as a candidate ('as "
        "given', first, interleaved with the grid), so the tune states the recommendation's "
        "gain over them (the 'N x over defaults' question when they are vLLM's defaults)")
    grid: Annotated[dict[str, list[EngineArgValue]], AfterValidator(_grid_values)] = Field(
        default_factory=dict, description="flag -> values; every combination is a candidate")
    search: list[SearchSpec] = Field(
        default_factory=list, description="procedures run in order after the grid, each from "
        "the best candidate so far")
    latency_cell: Annotated[str | None, AfterValidator(lambda c: c and _check_cell(c))] = Field(
        None, description="the Pareto front's latency axis (default: the first latency SLO's "
        "cell, else e2e.p50)")
    max_candidates: int = Field(64, ge=1, le=1000)

    @model_validator(mode="after")
    def _something_to_search(self) -> TuneSpec:
        if not self.grid and not self.search and not self.baseline:
            raise ValueError("tune needs a grid (flag -> values) or a search procedure")
        if not self.grid and not self.search:
            raise ValueError("tune.baseline alone has nothing to compare the scenario's own "
                             "args with: add a grid or a search")
        combinations = 1
        for values in self.grid.values():
            combinations *= len(values)
        if combinations > self.max_candidates:
            raise ValueError(f"the grid has {combinations} combinations, more than "
                             f"max_candidates = {self.max_candidates}")
        return self


MAX_TRIALS = 1000
# a sequential design's boundaries are integrated per look: at most this many trials per arm
# (analysis.sequential.MAX_SEQUENTIAL_TRIALS; a unit test holds them equal)
MAX_SEQUENTIAL_TRIALS = 200


def _trials_mapping(value: object) -> object:
    """`trials: N` is `{min: N, max: N}` (a fixed count); a mapping is read as it is."""
    if isinstance(value, bool):
        raise ValueError(f"expected a whole number of trials or {{min: N, max: M, budget: "
                         f"DURATION}}, got {value!r}")
    if isinstance(value, int):
        if not 1 <= value <= MAX_TRIALS:
            raise ValueError(f"expected 1 to {MAX_TRIALS} trials per variant, got {value}")
        return {"min": value, "max": value}
    if isinstance(value, TrialsSpec | dict):
        return value
    raise ValueError(f"expected a whole number of trials or {{min: N, max: M, budget: "
                     f"DURATION}}, got {value!r}")


class TrialsSpec(Frozen):
    """Trials per variant: a fixed count (`trials: 5`, min = max) or a sequential design
    (`trials: {min: 3, max: 10, budget: 15m}`): interleaved rounds, one trial per variant each,
    from `min` on the compared cells are tested after every round and the experiment stops
    once each is decided (changed, or equivalent within compare.effect), at `max`, or when
    another round would pass `budget` (wall time)."""

    min: int = Field(ge=1, le=MAX_TRIALS, description="trials per variant before the first look")
    max: int = Field(ge=1, le=MAX_TRIALS, description="trials per variant at most")
    budget_s: Seconds | None = Field(
        None, alias="budget", gt=0,
        description="wall time: no round starts that would end past it (estimated from the "
                    "rounds so far)")

    @model_validator(mode="after")
    def _min_up_to_max(self) -> TrialsSpec:
        if self.min > self.max:
            raise ValueError(f"trials.min = {self.min} is more than trials.max = {self.max}")
        return self

    @property
    def sequential(self) -> bool:
        return self.min < self.max

    def to_yaml(self) -> int | dict[str, Any]:
        """A fixed count as the integer a user writes; otherwise the mapping."""
        if not self.sequential and self.budget_s is None:
            return self.max
        document: dict[str, Any] = {"min": self.min, "max": self.max}
        if self.budget_s is not None:
            document["budget"] = self.budget_s
        return document


class Scenario(Frozen):
    name: str = Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9_.-]*$", max_length=MAX_NAME_CHARS)
    description: str = ""
    server: ServerSpec = Field(default_factory=ServerSpec)
    traffic: TrafficSpec = Field(default_factory=TrafficSpec)
    slo: SloSpec = Field(default_factory=SloSpec)
    trials: Annotated[TrialsSpec, BeforeValidator(_trials_mapping)] = Field(
        default_factory=lambda: TrialsSpec(min=1, max=1),
        description="repeated runs per variant: N, or {min: N, max: M, budget: DURATION} "
                    "(sequential: stop once the compared cells are decided)")
    variants: dict[Annotated[str, Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9_.-]*$",
                                        max_length=MAX_NAME_CHARS)],
                   dict[str, Any]] = Field(
        default_factory=dict,
        description="arms: name -> partial scenario (server/traffic/slo) merged onto the base")
    compare: CompareSpec = Field(default_factory=CompareSpec)
    abort_on: AbortSpec = Field(default_factory=AbortSpec)
    tune: TuneSpec | None = Field(None, description="`vllm-slo tune`: the search space")
    side_by_side: SideBySideSpec | None = Field(
        None, description="run each round's variants at once, on rotating device slots")

    @model_validator(mode="after")
    def _parts_named_are_parts_of_the_mix(self) -> Scenario:
        named = [(f"compare.cells {cell!r}", split_cell(cell)[0], "part cells")
                 for cell in self.compare.cells]
        named += [(f"slo.by_profile.{part}", part, "per-part SLOs")
                  for part in self.slo.by_profile]
        for where, part, what in named:
            if part is not None and part not in self.traffic.mix:
                raise ValueError(
                    f"{where}: {part!r} is not a part of this run's traffic "
                    f"(profile {self.traffic.profile!r}"
                    + (f", mix {', '.join(self.traffic.mix)}" if self.traffic.mix else "")
                    + f"); {what} are for profile: mix")
        return self

    @model_validator(mode="after")
    def _adapters_named_are_loaded(self) -> Scenario:
        lora, loaded = self.traffic.lora, self.server.lora
        for adapter in self.slo.by_adapter:
            if adapter not in lora:
                raise ValueError(f"slo.by_adapter.{adapter}: {adapter!r} is not in "
                                 f"traffic.lora ({', '.join(lora) or 'unset'}); per-adapter "
                                 "SLOs are for a LoRA mix")
        if self.server.url is None:  # a launched server serves what server.lora loads
            missing = [name for name in lora if name != BASE
                       and (loaded is None or name not in loaded.adapters)]
            if missing:
                raise ValueError(f"traffic.lora names {', '.join(missing)}, which "
                                 "server.lora.adapters does not load")
        return self

    @model_validator(mode="after")
    def _side_by_side_places_every_variant(self) -> Scenario:
        if self.side_by_side is None:
            return self
        slots = len(self.side_by_side.devices)
        if self.tune is not None:
            raise ValueError("side_by_side and tune do not mix: a tune runs its trials one "
                             "at a time")
        if len(self.variants) != slots:
            raise ValueError(f"side_by_side.devices has {slots} slots for "
                             f"{len(self.variants)} variant(s): one slot per variant")
        if self.server.url is not None:
            raise ValueError("side_by_side launches a server per variant; attach mode "
                             "(server.url) targets one that already runs")
        for name, overrides in self.variants.items():
            server = overrides.get("server") or {}
            for key in ("devices", "url"):
                if isinstance(server, dict) and server.get(key) is not None:
                    raise ValueError(f"variant {name!r}: server.{key} — side_by_side "
                                     "places every variant on its device slots")
        if self.server.devices is not None:
            raise ValueError("server.devices and side_by_side both place the server: keep "
                             "side_by_side.devices")
        return self

    @model_validator(mode="after")
    def _sequential_trials_compare_variants(self) -> Scenario:
        trials = self.trials
        if trials.sequential and not self.variants:
            raise ValueError(
                f"trials: {{min: {trials.min}, max: {trials.max}}} stops once the variants' "
                "compared cells are decided: it needs variants to compare (or give a fixed "
                "count, trials: N)")
        if trials.sequential and trials.min < 2:
            raise ValueError(f"trials.min = {trials.min}: a comparison needs at least 2 "
                             "trials per variant before its first look (trials.min >= 2)")
        if trials.sequential and trials.max > MAX_SEQUENTIAL_TRIALS:
            raise ValueError(f"trials.max = {trials.max}: a sequential design takes at most "
                             f"{MAX_SEQUENTIAL_TRIALS} trials per variant")
        if trials.budget_s is not None and self.tune is not None:
            raise ValueError("trials.budget is for experiments (vllm-slo run); a tune runs "
                             "tune.trials per candidate")
        return self

    @property
    def min_trials(self) -> int:
        """Trials per variant before the first look (a fixed count: the count)."""
        return self.trials.min

    @property
    def max_trials(self) -> int:
        """Trials per variant at most (a fixed count: the count)."""
        return self.trials.max

    @model_validator(mode="after")
    def _tune_without_variants(self) -> Scenario:
        if self.tune is not None and self.variants:
            raise ValueError("tune and variants do not mix: the tune's candidates are its "
                             "variants (move the variants' server args into tune.grid)")
        return self

    @field_validator("variants")
    @classmethod
    def _variants_touch_only_arms(cls, variants: dict[str, dict[str, Any]]
                                  ) -> dict[str, dict[str, Any]]:
        for name, overrides in variants.items():
            extra = set(overrides) - set(VARIANT_KEYS)
            if extra:
                raise ValueError(
                    f"variant {name!r} may override {', '.join(VARIANT_KEYS)}, "
                    f"not {', '.join(sorted(extra))}")
        return variants

    def base_without_arms(self) -> dict[str, Any]:
        document = self.to_yaml_dict()
        document.pop("variants")
        document.pop("tune", None)
        document.pop("side_by_side", None)
        document["trials"] = self.max_trials  # an arm is one trial's scenario: no design
        return document

    def to_yaml_dict(self) -> dict[str, Any]:
        """The resolved scenario as the user would write it (aliases, durations in seconds);
        `tune`, `side_by_side`, `server.devices` and the LoRA keys only when set."""
        document = self.model_dump(mode="json", by_alias=True)
        document["trials"] = self.trials.to_yaml()
        for key in ("tune", "side_by_side"):
            if document[key] is None:
                del document[key]
        if document["server"]["devices"] is None:
            del document["server"]["devices"]
        if document["server"]["lora"] is None:  # LoRA keys only for a LoRA run
            del document["server"]["lora"]
        if not document["traffic"]["lora"]:
            del document["traffic"]["lora"]
        if not document["slo"]["by_adapter"]:
            del document["slo"]["by_adapter"]
        return document
