"""`slo:` and `abort_on:` — what a run is judged by and when it stops early: the SLO rules keyed
by the metric registry (the whole run's, each part's of a mix, each LoRA adapter's) and the
error rate that aborts a run, each rule checked by its grammar (`slo.py`)."""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable, Mapping
from typing import Annotated, Any, TypeVar

from pydantic import (
    AfterValidator,
    Field,
    ModelWrapValidatorHandler,
    PrivateAttr,
    SerializerFunctionWrapHandler,
    TypeAdapter,
    model_serializer,
    model_validator,
)

from vllm_slo.scenarios.lora import AdapterName
from vllm_slo.scenarios.metrics import BUILT_IN_METRICS, METRICS, MetricKind
from vllm_slo.scenarios.model_base import Frozen, validate_registered_keys
from vllm_slo.scenarios.slo import SloRule, parse_abort_error_rate, parse_rule
from vllm_slo.scenarios.traffic_spec import MixPart


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
    by_profile: dict[MixPart, SloRules] = Field(
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

