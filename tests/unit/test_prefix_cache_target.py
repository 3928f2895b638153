"""traffic.prefix_cache: the scenario setting, the shaping of the plan to a hit rate (checked
against a simulation of vLLM's block-hash prefix cache fed the tiny model's real tokens), and
the verification of a run's /metrics counters over the measured window."""

from __future__ import annotations

import random
from collections.abc import Sequence

import pytest
from pydantic import ValidationError

from vllm_slo.analysis.prefix_cache import (
    UNVERIFIED_NAME,
    WARNING_NAME,
    CounterSpan,
    check_prefix_cache,
    window_counters,
)
from vllm_slo.loadtests.plan import build_plan, read_plan, write_plan
from vllm_slo.loadtests.prefix_shaping import (
    NONCE_TOKENS,
    TEMPLATE_TOKENS_PER_MESSAGE,
    expected_hit_rate,
    shared_blocks,
)
from vllm_slo.scenarios.traffic_spec import TrafficSpec
from vllm_slo.serialise import to_json


def traffic(**prefix_cache: object) -> TrafficSpec:
    return TrafficSpec.model_validate({
        "profile": "chat", "seed": 3, "prefix_cache": prefix_cache or "reset",
        "chat": {"system_prompt_tokens": 50, "user_tokens": 60, "turns": 2,
                 "output_tokens": 16}})


# ------------------------------------------------------------------------- the setting
@pytest.mark.parametrize(("given", "phases", "written"), [
    ("reset", "cold", "reset"), ("keep", "keep", "keep"), ("cold", "cold", "reset")])
def test_short_forms_keep_their_meaning_and_are_written_back(given: str, phases: str,
                                                             written: str) -> None:
    spec = TrafficSpec.model_validate({"prefix_cache": given})
    assert spec.prefix_cache.phases == phases and spec.prefix_cache.target_hit_rate is None
    assert spec.prefix_cache.resets == (phases != "keep")
    assert spec.model_dump(by_alias=True)["prefix_cache"] == written


def test_long_form_round_trips_and_warm_needs_a_target() -> None:
    spec = TrafficSpec.model_validate(
        {"prefix_cache": {"target_hit_rate": 0.6, "tolerance": 0.05, "phases": "warm"}})
    dumped = spec.model_dump(by_alias=True)["prefix_cache"]
    assert dumped == {"phases": "warm", "target_hit_rate": 0.6, "tolerance": 0.05}
    assert TrafficSpec.model_validate({"prefix_cache": dumped}).prefix_cache.primes
    with pytest.raises(ValidationError, match="set target_hit_rate too"):
        TrafficSpec.model_validate({"prefix_cache": "warm"})
    for bad in ({"target_hit_rate": 1.0}, {"target_hit_rate": -0.1}, {"tolerance": 0},
                {"target": 0.5}, "flush"):
        with pytest.raises(ValidationError):
            TrafficSpec.model_validate({"prefix_cache": bad})


# ---------------------------------------------------------------------- block arithmetic
def test_shared_blocks_known_values() -> None:
    # t = 0.5: hits = rest; 16-token blocks, 16 other tokens each -> one block each
    shares = shared_blocks([16, 16, 16, 16], 0.5, 16)
    assert shares.blocks == (1, 1, 1, 1) and shares.expected_hit_rate == 0.5
    # t = 0.6: 1.5 x 110 = 165 wanted per request; the running total is tracked
    shares = shared_blocks([110] * 4, 0.6, 16)
    assert shares.blocks == (10, 11, 10, 10)  # 160 336 496 656 against 165 330 495 660
    assert shares.expected_hit_rate == pytest.approx(656 / (656 + 440))
    assert shared_blocks([100] * 3, 0.0, 16).blocks == (0, 0, 0)


def test_running_totals_stay_within_half_a_block_of_the_target() -> None:
    rng = random.Random(5)
    rest = [rng.randint(20, 900) for _ in range(500)]
    for target in (0.1, 0.3, 0.6, 0.8, 0.95):
        shares = shared_blocks(rest, target, 128)
        hits = 0
        for n, blocks in enumerate(shares.blocks, start=1):
            hits += blocks * 128
            assert abs(hits - target / (1 - target) * sum(rest[:n])) <= 64
        assert shares.expected_hit_rate == pytest.approx(target, abs=0.002)
        assert shares.capped == 0
        # any leading part of the plan is shaped the same (a closed loop sends a prefix)
        assert shared_blocks(rest[:37], target, 128).blocks == shares.blocks[:37]


def test_no_room_caps_the_blocks_and_says_so() -> None:
    # a later request with room makes up for an earlier one without
    shares = shared_blocks([100, 100, 100], 0.8, 16, room_blocks=[40, 2, None])
    assert shares.blocks == (25, 2, 48) and shares.capped == 1
    assert shares.expected_hit_rate == pytest.approx(0.8)
    shares = shared_blocks([100, 100, 100], 0.8, 16, room_blocks=[40, 40, 2])
    assert shares.blocks[2] == 2 and shares.capped == 1
    assert shares.expected_hit_rate == pytest.approx(832 / (832 + 300))  # not 0.8
    assert expected_hit_rate(shares.blocks, [100, 100, 100], 16) == shares.expected_hit_rate
    with pytest.raises(ValueError, match=r"\[0, 1\)"):
        shared_blocks([1], 1.0, 16)


# ------------------------------------------------ the shaped plan against a simulated cache
HEADER = [10**6, 10**6 + 1, 10**6 + 2]  # a chat template's tokens before the first content


def simulate_vllm_prefix_cache(prompts: Sequence[Sequence[int]], block: int,
                               primers: Sequence[Sequence[int]] = ()) -> tuple[int, int]:
    """vLLM v1's accounting, one request at a time: blocks hashed as a chain, a request hits
    its leading cached full blocks (never its last token), queries = its prompt length; every
    full block it computed is cached afterwards (no eviction)."""
    cache: set[tuple[int, ...]] = set()

    def chain(tokens: Sequence[int]) -> list[tuple[int, ...]]:
        return [tuple(tokens[: (i + 1) * block]) for i in range(len(tokens) // block)]

    for tokens in primers:
        cache.update(chain(tokens))
    hits = queries = 0
    for tokens in prompts:
        queries += len(tokens)
        hashes = chain(tokens[: len(tokens) - 1])
        hit_blocks = next((i for i, h in enumerate(hashes) if h not in cache), len(hashes))
        hits += hit_blocks * block
        cache.update(chain(tokens))
    return hits, queries


def templated(messages: Sequence[dict[str, str]], tokenizer) -> list[int]:
    """A stand-in chat template: HEADER, then each content with two role tokens around it."""
    ids = list(HEADER)
    for index, message in enumerate(messages):
        if index:
            ids += [7, 8]
        ids += tokenizer.encode(message["content"], add_special_tokens=False).ids
    return ids


@pytest.mark.parametrize("target", [0.3, 0.6, 0.8])
def test_shaped_plan_hits_its_target_in_a_simulated_cache(tiny_counter, tiny_tokenizer_file,
                                                          target: float) -> None:
    from tokenizers import Tokenizer

    tokenizer = Tokenizer.from_file(str(tiny_tokenizer_file))
    plan = build_plan(traffic(target_hit_rate=target, phases="warm"), tiny_counter, 4096, 120,
                      block_size=32)
    assert plan.prefix_cache is not None and plan.prefix_cache["capped"] == 0
    expected = plan.prefix_cache["expected_hit_rate"]
    assert isinstance(expected, float) and expected == pytest.approx(target, abs=0.01)
    prompts = [templated(r.messages, tokenizer) for r in plan.requests]
    for request, prompt in zip(plan.requests, prompts, strict=True):  # counts are real
        assert request.prompt_tokens == len(prompt) - len(HEADER) - 2 * (len(request.messages)
                                                                         - 1)
    primers = [templated(p, tokenizer) for p in plan.primers]
    assert len(primers) == 1  # chat: every first message is the system prompt
    warm_hits, queries = simulate_vllm_prefix_cache(prompts, 32, primers)
    # the template estimate (8 per message) is not this template's, so a small difference
    assert warm_hits / queries == pytest.approx(target, abs=0.03)
    cold_hits, _ = simulate_vllm_prefix_cache(prompts, 32)
    assert cold_hits < warm_hits  # first use misses
    # the profile's own sharing is cut: chat's system prompt and history hit nothing more
    assert warm_hits == sum(_shared_hits(plan, 32))


def _shared_hits(plan, block: int) -> list[int]:
    """Tokens each request shares with the primer (whole blocks), from the texts."""
    primer = plan.primers[0][0]["content"].removesuffix(" primer")
    out = []
    for request in plan.requests:
        content = request.messages[0]["content"]
        words = 0
        for mine, theirs in zip(content.split(" ")[1:], primer.split(" ")[1:], strict=False):
            if mine != theirs:
                break
            words += 1
        out.append((words + len(HEADER)) // block * block)
    return out


def test_completions_prompts_share_the_same_blocks(tiny_counter, tiny_tokenizer_file) -> None:
    """endpoint: completions sends the history flattened to `role: content` lines (BOS and
    `system:` before the shared text): the same blocks hit."""
    from tokenizers import Tokenizer

    from vllm_slo.loadtests.prompts import flatten_for_completions

    tokenizer = Tokenizer.from_file(str(tiny_tokenizer_file))
    plan = build_plan(traffic(target_hit_rate=0.6, phases="warm"), tiny_counter, 4096, 80,
                      block_size=32)

    def encode(messages) -> list[int]:
        return [1, *tokenizer.encode(flatten_for_completions(messages),
                                     add_special_tokens=False).ids]

    hits, queries = simulate_vllm_prefix_cache([encode(r.messages) for r in plan.requests], 32,
                                               [encode(p) for p in plan.primers])
    assert hits / queries == pytest.approx(0.6, abs=0.03)


def test_plan_without_a_target_is_unchanged_and_a_target_needs_the_block_size(
        tiny_counter) -> None:
    plain = build_plan(traffic(), tiny_counter, 4096, 20)
    assert plain.prefix_cache is None and plain.primers == ()
    with pytest.raises(ValueError, match="block size"):
        build_plan(traffic(target_hit_rate=0.5), tiny_counter, 4096, 20)


def test_short_context_caps_and_warns(tiny_counter) -> None:
    plan = build_plan(traffic(target_hit_rate=0.9), tiny_counter, 1024, 30, block_size=32)
    assert plan.prefix_cache is not None and plan.prefix_cache["capped"] > 0
    assert any("no room in max-model-len 1024" in w for w in plan.warnings)
    assert all(r.prompt_tokens + r.max_tokens + TEMPLATE_TOKENS_PER_MESSAGE * len(r.messages)
               <= 1024
               for r in plan.requests)


def test_shaped_plan_round_trips_through_parquet(tiny_counter, tmp_path) -> None:
    plan = build_plan(traffic(target_hit_rate=0.6, phases="warm"), tiny_counter, 4096, 10,
                      block_size=128)
    write_plan(plan, tmp_path / "requests.parquet")
    again = read_plan(tmp_path / "requests.parquet")
    assert again.primers == plan.primers and again.prefix_cache == plan.prefix_cache
    assert again.sha256 == plan.sha256
    markers = {r.messages[0]["content"].split("\n\n")[0][-NONCE_TOKENS * 3:]
               for r in plan.requests}
    assert len(markers) == len(plan.requests)  # every request's marker differs


# ------------------------------------------------------------------------- verification
def scrape(unix_s: float, queries: float, hits: float, engine: str = "0") -> dict:
    return {"unix_s": unix_s, "values": {
        f'vllm:prefix_cache_queries_total{{engine="{engine}"}}': queries,
        f'vllm:prefix_cache_hits_total{{engine="{engine}"}}': hits}}


def test_window_counters_use_only_scrapes_inside_the_window() -> None:
    records = [scrape(98, 0, 0), scrape(101, 1000, 100),  # warm-up traffic before 101
               scrape(103, 2000, 700), scrape(105, 3000, 1300),
               scrape(112, 9000, 9000)]  # after the window
    span = window_counters(records, 100.0, 110.0)
    assert span == CounterSpan(hits_tokens=1200.0, queries_tokens=2000.0, span_s=4.0)
    assert span.hit_rate == 0.6
    assert window_counters(records, 100.0, 102.0) is None  # one scrape inside
    assert window_counters([{"unix_s": 1, "values": {}}, {"unix_s": 2, "values": {}}],
                           0, 10) is None  # no such counters
    restarted = [scrape(1, 500, 100), scrape(3, 900, 300), scrape(5, 50, 40),
                 scrape(7, 150, 100)]
    span = window_counters(restarted, 0, 10)  # the interval with the reset is dropped
    assert span is not None and (span.hits_tokens, span.queries_tokens) == (260.0, 500.0)


@pytest.mark.parametrize(("achieved_hits", "verdict"), [
    (600, "met"), (690, "met"), (710, "missed"), (450, "missed")])
def test_verdict_against_tolerance(achieved_hits: int, verdict: str) -> None:
    check = check_prefix_cache(CounterSpan(achieved_hits, 1000, 10.0), 0.6, 0.1, "warm", 0.61)
    assert check.verdict == verdict and check.missed == (verdict == "missed")
    warning = check.warning()
    if verdict == "met":
        assert warning is None
    else:
        assert warning is not None and warning.startswith(WARNING_NAME)
        assert f"{achieved_hits / 1000:.3f}" in warning
    assert to_json(check)["achieved_hit_rate"] == achieved_hits / 1000


def test_unverified_without_counters_or_queries() -> None:
    for span in (None, CounterSpan(0, 0, 4.0)):
        check = check_prefix_cache(span, 0.3, 0.1, "cold", None)
        assert check.verdict == "unverified" and not check.missed
        assert (check.warning() or "").startswith(UNVERIFIED_NAME)


# ------------------------------------------------------------------------- the report
def test_report_rows_schema_and_terminal_line_show_target_achieved_and_verdict() -> None:
    import json
    from pathlib import Path
    from types import SimpleNamespace

    import jsonschema

    from vllm_slo.analysis.summary import TrafficFacts
    from vllm_slo.reports.render.html import load_rows
    from vllm_slo.reports.render.text import prefix_cache_line

    missed = check_prefix_cache(CounterSpan(8215, 10000, 4.0), 0.97, 0.02, "warm", 0.824)
    traffic = TrafficFacts(
        profile="chat", endpoint="chat", arrival="closed", intended_rate_per_s=None,
        sent_per_s=5.0, send_lag_p50_s=None, send_lag_p99_s=None, client_send_lag_p99_s=None,
        queued_for_slot=0, reused_prompts=0, plan=None, prefix_cache_reset="reset",
        prefix_cache_hit_rate=0.83, client_cpu=None, prefix_cache=missed)
    rows = dict(load_rows(traffic, 10))
    assert rows["prefix-cache hit rate target"] == "97.0% ± 2.0% (phases warm, plan expected 82.4%)"
    assert rows["prefix-cache hit rate (measured window)"] == (
        "82.2% (8,215 of 10,000 tokens, 4 s): MISSED")
    line = prefix_cache_line(SimpleNamespace(traffic=traffic))  # type: ignore[arg-type]
    assert line == ("prefix cache: hit rate 0.822 over the window, target 0.97 ± 0.02 (plan "
                    "expected 0.824, phases warm): MISSED")
    unverified = check_prefix_cache(None, 0.3, 0.1, "cold", None)
    for check in (missed, unverified):
        schema = json.loads((Path(__file__).parents[2] / "reports" / "schema"
                             / "summary.schema.json").read_text())
        jsonschema.Draft202012Validator(
            schema["properties"]["traffic"]["properties"]["prefix_cache"]).validate(
                to_json(check))
    plain = TrafficFacts(**{**{f: getattr(traffic, f) for f in TrafficFacts.__slots__},
                            "prefix_cache": None})
    assert "prefix_cache" not in to_json(plain)
    assert prefix_cache_line(SimpleNamespace(traffic=plain)) is None  # type: ignore[arg-type]
