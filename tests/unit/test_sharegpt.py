"""ShareGPT replay plans: the public file layout, all turns with their real history, the
filters counted by reason, malformed data, bad files, seeded order and cycling, and the shipped
generated sample. Token counts use the tiny model's real tokenizer."""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest

from vllm_slo.loadtests import make_sharegpt_sample
from vllm_slo.loadtests.plan import build_plan, canonical_bytes
from vllm_slo.loadtests.profiles.sharegpt import FILTER_REASONS
from vllm_slo.loadtests.prompts import DEFAULT_SHAREGPT_PATH, WordTexts
from vllm_slo.loadtests.tokens import TokenCounter, local_token_counter
from vllm_slo.scenarios.profile_specs import ShareGptSpec
from vllm_slo.scenarios.traffic_spec import TrafficSpec
from vllm_slo.servers.tiny_model import train_tokenizer


@pytest.fixture(scope="session")
def tiny_counter(tmp_path_factory: pytest.TempPathFactory) -> TokenCounter:
    """The tiny model's real tokenizer, trained once per session (the file is shared with the
    other token tests through the session's base temp folder)."""
    file = tmp_path_factory.getbasetemp() / "tiny-tokenizer.json"
    if not file.is_file():
        train_tokenizer().save(str(file))
    return local_token_counter(file)


def sharegpt(path: Path | None = None, seed: int = 7, **limits: object) -> TrafficSpec:
    section = {"path": str(path) if path else None, **limits}
    return TrafficSpec.model_validate({"profile": "sharegpt", "seed": seed,
                                       "sharegpt": section})


def write(path: Path, data: object) -> Path:
    path.write_text(json.dumps(data), encoding="utf-8")
    return path


def turn(speaker: str, value: object) -> dict:
    return {"from": speaker, "value": value}


def within_filters(request, spec) -> bool:
    prompt, output = request.prompt_tokens, request.max_tokens
    return (spec.min_prompt_tokens <= prompt <= spec.max_prompt_tokens
            and output >= spec.min_output_tokens
            and (spec.max_output_tokens is None or output <= spec.max_output_tokens)
            and prompt + output <= spec.max_total_tokens)


# ------------------------------------------------------------------------- replay
def test_every_human_turn_is_replayed_with_its_real_history(tiny_counter, tmp_path) -> None:
    texts = ["You are terse and helpful today.", "What is the capital of France, and why?",
             "Paris is the capital of France because the court settled there.",
             "And the capital of Germany, please?",
             "Berlin has been the capital of Germany since reunification in 1990."]
    path = write(tmp_path / "one.json", [{"id": "x1", "lang": "en", "conversations": [
        turn("system", texts[0]), turn("human", texts[1]), turn("gpt", texts[2]),
        turn("human", texts[3]), turn("gpt", texts[4])]}])
    plan = build_plan(sharegpt(path), tiny_counter, 2048, 2)
    tokens = tiny_counter.count_many(texts)
    first, second = plan.requests
    roles = ["system", "user", "assistant", "user", "assistant"]
    messages = [{"role": r, "content": t} for r, t in zip(roles, texts, strict=True)]
    assert first.messages == tuple(messages[:2])
    assert second.messages == tuple(messages[:4])
    assert (first.turn, second.turn) == (0, 1)
    assert first.conversation_id == second.conversation_id
    assert first.prompt_tokens == tokens[0] + tokens[1]
    assert second.prompt_tokens == sum(tokens[:4])
    assert (first.max_tokens, second.max_tokens) == (tokens[2], tokens[4])
    assert plan.filtered == dict.fromkeys(FILTER_REASONS, 0) and plan.warnings == ()
    only_first = build_plan(sharegpt(path, all_turns=False), tiny_counter, 2048, 1)
    assert only_first.requests == (first,)


def test_speaker_names_of_the_public_file_map_to_chat_roles(tiny_counter, tmp_path) -> None:
    path = write(tmp_path / "speakers.json", [
        {"id": "b", "conversations": [turn("user", "Tell me a story about a dragon, please."),
                                      turn("chatgpt", "Once there was a dragon who loved tea.")]},
        {"id": "c", "conversations": [turn("Human", "Give me a list of three colours today."),
                                      turn("bing", "Red, green and blue are three colours.")]}])
    plan = build_plan(sharegpt(path), tiny_counter, None, 2)
    assert sorted(m["role"] for r in plan.requests for m in r.messages) == ["user", "user"]
    assert plan.filtered["malformed"] == 0


def test_filters_are_counted_by_reason(tiny_counter, tmp_path) -> None:
    words = WordTexts(tiny_counter)
    rng = random.Random(3)

    def text(n: int) -> str:
        return words.text(rng, n)

    data = [
        {"id": "short_prompt", "conversations": [turn("human", text(3)), turn("gpt", text(50))]},
        {"id": "short_output", "conversations": [turn("human", text(10)), turn("gpt", text(3))]},
        {"id": "long_prompt", "conversations": [turn("human", text(1025)),
                                                turn("gpt", text(20))]},
        {"id": "long_total", "conversations": [turn("human", text(1000)),
                                               turn("gpt", text(1049))]},
        {"id": "long_output", "conversations": [turn("human", text(10)), turn("gpt", text(1101))]},
        {"id": "no_reply", "conversations": [turn("human", text(10)), turn("gpt", text(20)),
                                             turn("human", text(10))]},
        {"id": "edges_kept", "conversations": [turn("human", text(4)), turn("gpt", text(4)),
                                               turn("human", text(1014)),
                                               turn("gpt", text(500))]},
        {"id": "missing"},
        {"id": "bad_value", "conversations": [turn("human", 7), turn("gpt", text(5))]},
        {"id": "bad_speaker", "conversations": [turn("narrator", text(5))]},
        {"id": "empty", "conversations": []},
        "not an object",
    ]
    path = write(tmp_path / "filters.json", data)
    traffic = sharegpt(path, max_output_tokens=1100)
    plan = build_plan(traffic, tiny_counter, None, 6)  # > one pass: every entry is seen
    assert plan.filtered == {"malformed": 5, "no_reply": 1, "prompt_too_short": 1,
                             "prompt_too_long": 1, "output_too_short": 1, "output_too_long": 1,
                             "total_too_long": 1}
    kept = sorted((r.prompt_tokens, r.max_tokens) for r in plan.requests[:3])
    assert kept == [(4, 4), (10, 20), (4 + 4 + 1014, 500)]  # limits are inclusive
    assert all(within_filters(r, traffic.settings(ShareGptSpec)) for r in plan.requests)


def test_overlong_sharegpt_prompts_are_trimmed_or_rejected(tiny_counter) -> None:
    untouched = build_plan(sharegpt(), tiny_counter, None, 120)
    over = [r.prompt_tokens + r.max_tokens > 900 for r in untouched.requests]
    trimmed = build_plan(sharegpt(), tiny_counter, 900, 120)
    assert sum(over) > 0 and trimmed.trimmed == sum(over) and trimmed.rejected == 0
    for before, after, was_over in zip(untouched.requests, trimmed.requests, over, strict=True):
        assert after.prompt_tokens + after.max_tokens <= 900
        assert after.max_tokens == before.max_tokens
        assert (after == before) != was_over
        assert after.prompt_tokens == sum(tiny_counter.count_many(
            [m["content"] for m in after.messages]))
    rejecting = TrafficSpec.model_validate({"profile": "sharegpt", "seed": 7,
                                            "overlong": "reject"})
    rejected = build_plan(rejecting, tiny_counter, 900, 120)
    assert rejected.rejected >= sum(over) and rejected.trimmed == 0
    assert all(r.prompt_tokens + r.max_tokens <= 900 for r in rejected.requests)


# ------------------------------------------------------------------------- order, cycling
def test_seeded_order_prefix_property_and_cycling(tiny_counter) -> None:
    plan = build_plan(sharegpt(), tiny_counter, 2048, 40)
    again = build_plan(sharegpt(), tiny_counter, 2048, 40)
    other = build_plan(sharegpt(seed=8), tiny_counter, 2048, 40)
    assert plan.sha256 == again.sha256 and plan.requests == again.requests
    assert other.sha256 != plan.sha256
    double = build_plan(sharegpt(), tiny_counter, 2048, 80)
    assert double.requests[:40] == plan.requests
    # conversation-major: a conversation's turns are consecutive and in order
    blocks: list[list[int]] = []
    for i, request in enumerate(double.requests):
        if i == 0 or double.requests[i - 1].conversation_id != request.conversation_id:
            blocks.append([])
        blocks[-1].append(request.turn)
    assert len(blocks) == len({r.conversation_id for r in double.requests})
    assert all(turns == sorted(set(turns)) for turns in blocks)
    # more requests than the file gives after filters: go round again, warn, keep the prefix
    big = build_plan(sharegpt(), tiny_counter, 2048, 700)
    assert len(big.requests) == 700 and big.requests[:80] == double.requests
    assert any("goes through it" in w for w in big.warnings)
    available = int(big.warnings[-1].split(" gives ")[1].split()[0])
    first_pass = {b"".join(canonical_bytes([r])) for r in big.requests[:available]}
    second_pass = {b"".join(canonical_bytes([r])) for r in big.requests[available:2 * available]}
    assert first_pass == second_pass  # the same requests, reshuffled
    assert [r.index for r in big.requests] == list(range(700))


# ------------------------------------------------------------------------- bad files
@pytest.mark.parametrize(("content", "message"), [
    (None, "no such ShareGPT file"),
    ("{oops", "not valid JSON"),
    (json.dumps({"conversations": []}), "got a JSON dict"),
    ("[]", "holds no conversations"),
    (json.dumps([{"id": "x"}, {"conversations": [{"from": "robot", "value": "x"}]}]),
     "no request passes the filters \\(malformed 2\\)"),
])
def test_bad_files_are_clear_value_errors(tiny_counter, tmp_path, content, message) -> None:
    path = tmp_path / "data.json"
    if content is not None:
        path.write_text(content)
    with pytest.raises(ValueError, match=message) as raised:
        build_plan(sharegpt(path), tiny_counter, 2048, 5)
    assert str(path) in str(raised.value)


def test_inconsistent_limits_are_rejected(tiny_counter) -> None:
    with pytest.raises(ValueError, match="max_prompt_tokens 3 is below min_prompt_tokens 4"):
        build_plan(sharegpt(max_prompt_tokens=3), tiny_counter, 2048, 5)


# ------------------------------------------------------------------------- one parse
def test_the_check_and_every_plan_parse_the_file_once(tiny_counter, tmp_path,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    """The check before the server starts and each trial's plan take one parse of the file;
    a file changed in between is parsed again."""
    from vllm_slo.loadtests import prompts
    from vllm_slo.preflight import check_traffic_inputs

    parses: list[int] = []
    real_load = json.load

    def counted(handle, **kwargs):
        parses.append(1)
        return real_load(handle, **kwargs)

    monkeypatch.setattr(prompts.json, "load", counted)
    prompts._parsed_sharegpt.cache_clear()
    entry = {"conversations": [turn("human", "What is the capital of France, and why?"),
                               turn("gpt", "Paris, where the court settled long ago.")]}
    path = write(tmp_path / "data.json", [entry])
    traffic = sharegpt(path, min_prompt_tokens=1, min_output_tokens=1)
    check_traffic_inputs(traffic)
    first = build_plan(traffic, tiny_counter, 2048, 3)
    second = build_plan(traffic, tiny_counter, 2048, 3)
    assert len(parses) == 1
    assert first.sha256 == second.sha256
    other = {"conversations": [turn("human", "And the capital of Germany, please?"),
                               turn("gpt", "Berlin, since the reunification of the country.")]}
    write(path, [entry, other])
    changed = build_plan(traffic, tiny_counter, 2048, 3)
    assert len(parses) == 2
    assert {r.messages[-1]["content"] for r in changed.requests} == {
        "What is the capital of France, and why?", "And the capital of Germany, please?"}


# ------------------------------------------------------------------------- shipped sample
def test_shipped_sample_is_the_generators_output() -> None:
    shipped = DEFAULT_SHAREGPT_PATH.read_bytes()
    assert shipped.decode() == make_sharegpt_sample.render(make_sharegpt_sample.generate())
    assert len(shipped) < 1_000_000
    data = json.loads(shipped)
    assert len(data) == make_sharegpt_sample.N_CONVERSATIONS
    usable = [e for e in data if isinstance(e.get("conversations"), list)]
    speakers = [t["from"] for e in usable for t in e["conversations"]]
    assert {"human", "gpt", "system"} <= set(speakers)
    humans = [sum(t["from"] == "human" for t in e["conversations"]) for e in usable]
    assert max(humans) >= 4 and sum(h >= 2 for h in humans) >= 30


def test_default_sample_plan_respects_the_filters(tiny_counter) -> None:
    traffic = sharegpt()
    plan = build_plan(traffic, tiny_counter, 2048, 1000)  # > one pass: every entry is seen
    assert len(plan.requests) == 1000
    assert all(within_filters(r, traffic.settings(ShareGptSpec)) for r in plan.requests)
    filtered = plan.filtered
    assert filtered["malformed"] == 4  # empty, missing, null value, unknown speaker
    for reason in ("no_reply", "prompt_too_short", "prompt_too_long", "output_too_short",
                   "total_too_long"):
        assert filtered[reason] >= 1, reason
    assert filtered["output_too_long"] == 0  # no max_output_tokens by default
    assert plan.trimmed == plan.rejected == 0
    assert max(r.turn for r in plan.requests) >= 3  # later turns, not only the first
    assert any(r.messages[0]["role"] == "system" for r in plan.requests)
    assert len({r.prompt_tokens for r in plan.requests}) > 100  # varied lengths
