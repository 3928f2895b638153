"""The pre-sampled request plan (chat and long-doc; ShareGPT in test_sharegpt.py): determinism,
the prefix property, length distributions against the config, overlong trim/reject, Parquet
round trip. Token counts use the tiny model's real tokenizer."""

from __future__ import annotations

import random
import statistics
from collections.abc import Sequence

import pyarrow.parquet as pq
import pytest

from vllm_slo.loadtests.plan import (
    PlannedRequest,
    RequestPlan,
    build_plan,
    canonical_bytes,
    read_plan,
    write_plan,
)
from vllm_slo.loadtests.profiles.long_doc import LONG_DOC_MARGIN_TOKENS
from vllm_slo.loadtests.prompts import (
    DOC_SEPARATOR,
    INSTRUCTIONS,
    WordTexts,
    flatten_for_completions,
)
from vllm_slo.loadtests.tokens import TokenCounter, local_token_counter
from vllm_slo.scenarios.traffic_spec import TrafficSpec


def traffic(profile: str = "chat", seed: int = 7, **sections: object) -> TrafficSpec:
    return TrafficSpec.model_validate({"profile": profile, "seed": seed, **sections})


def prompt_bytes(plan: RequestPlan) -> bytes:
    return b"".join(canonical_bytes(plan.requests))


def counts(counter: TokenCounter, texts: Sequence[str]) -> list[int]:
    return counter.count_many(list(texts))


# ------------------------------------------------------------------------- determinism
@pytest.mark.parametrize("profile", ["chat", "long-doc"])
def test_same_inputs_give_identical_plans_and_other_seeds_differ(
        tiny_counter, tiny_tokenizer_file, profile: str) -> None:
    first = build_plan(traffic(profile), tiny_counter, 4096, 40)
    # an independent build: a fresh counter loaded from the file, nothing shared
    second = build_plan(traffic(profile), local_token_counter(tiny_tokenizer_file), 4096, 40)
    assert first.sha256 == second.sha256
    assert prompt_bytes(first) == prompt_bytes(second)
    assert first.requests == second.requests
    other = build_plan(traffic(profile, seed=8), tiny_counter, 4096, 40)
    assert other.sha256 != first.sha256
    assert prompt_bytes(other) != prompt_bytes(first)


@pytest.mark.parametrize(("profile", "n"), [("chat", 7), ("chat", 50), ("long-doc", 13)])
def test_n_request_plan_is_a_prefix_of_the_2n_plan(tiny_counter, profile: str, n: int) -> None:
    short = build_plan(traffic(profile), tiny_counter, 4096, n)
    long = build_plan(traffic(profile), tiny_counter, 4096, 2 * n)
    assert len(short.requests) == n and len(long.requests) == 2 * n
    assert long.requests[:n] == short.requests
    assert prompt_bytes(long).startswith(prompt_bytes(short))


def test_sha256_covers_messages_and_max_tokens(tiny_counter) -> None:
    plan = build_plan(traffic("chat"), tiny_counter, None, 6)
    other = build_plan(traffic("chat", chat={"output_tokens": 65}), tiny_counter, None, 6)
    assert plan.sha256 != other.sha256
    assert len(plan.sha256) == 64


# ------------------------------------------------------------------------- chat
def test_chat_lengths_match_the_config(tiny_counter) -> None:
    spec = {"system_prompt_tokens": 200, "user_tokens": 40, "turns": 3, "output_tokens": 64}
    plan = build_plan(traffic("chat", chat=spec), tiny_counter, 2048, 3000)
    requests = plan.requests
    assert len(requests) == 3000 and plan.trimmed == plan.rejected == 0
    assert plan.warnings == () and plan.filtered == {}
    assert plan.tokenizer == tiny_counter.name
    # every request: the same system prompt, exactly 200 tokens (shared prefix)
    systems = {r.messages[0]["content"] for r in requests}
    assert len(systems) == 1 and all(r.messages[0]["role"] == "system" for r in requests)
    assert counts(tiny_counter, list(systems)) == [200]
    assert {r.max_tokens for r in requests} == {64}
    # conversation-major, turn k = system + k (user, answer) pairs + user; histories nest
    for position, request in enumerate(requests):
        assert request.index == position
        assert (request.conversation_id, request.turn) == divmod(position, 3)
        assert [m["role"] for m in request.messages] == (
            ["system"] + ["user", "assistant"] * request.turn + ["user"])
        if request.turn:
            assert request.messages[:-2] == requests[position - 1].messages
    last_turns = [r for r in requests if r.turn == 2]
    users = counts(tiny_counter, [m["content"] for r in last_turns for m in r.messages
                                  if m["role"] == "user"])
    answers = counts(tiny_counter, [m["content"] for r in last_turns for m in r.messages
                                    if m["role"] == "assistant"])
    # user turns uniform in [0.5, 1.5] x 40: mean within 5%, range inside [20, 60]
    assert abs(statistics.fmean(users) - 40) <= 0.05 * 40
    assert min(users) >= 20 and max(users) <= 60
    assert min(users) <= 22 and max(users) >= 58  # the whole range is used
    quartiles = statistics.quantiles(users, n=4)
    assert abs(quartiles[0] - 30) <= 2 and abs(quartiles[2] - 50) <= 2
    # stand-in answers: exactly output_tokens each
    assert set(answers) == {64}
    # prompt_tokens = the counter's tokens of all contents (no template), exactly
    contents = [m["content"] for r in requests[:300] for m in r.messages]
    measured = iter(counts(tiny_counter, contents))
    for request in requests[:300]:
        assert request.prompt_tokens == sum(next(measured) for _ in request.messages)


def test_chat_without_system_prompt_and_single_turn(tiny_counter) -> None:
    plan = build_plan(traffic("chat", chat={"system_prompt_tokens": 0, "turns": 1}),
                      tiny_counter, None, 20)
    assert all([m["role"] for m in r.messages] == ["user"] for r in plan.requests)
    assert [r.conversation_id for r in plan.requests] == list(range(20))


def test_chat_overlong_trims_history_not_the_system_prompt(tiny_counter) -> None:
    spec = {"system_prompt_tokens": 200, "user_tokens": 40, "turns": 3, "output_tokens": 64}
    untouched = build_plan(traffic("chat", chat=spec), tiny_counter, None, 90)
    plan = build_plan(traffic("chat", chat=spec), tiny_counter, 420, 90)
    over = [r for r in untouched.requests if r.prompt_tokens + r.max_tokens > 420]
    assert over and plan.trimmed == len(over) and plan.rejected == 0
    assert any("trimmed" in w for w in plan.warnings)
    system = untouched.requests[0].messages[0]
    for before, after in zip(untouched.requests, plan.requests, strict=True):
        assert after.prompt_tokens + after.max_tokens <= 420
        assert after.messages[0] == system
        assert after.prompt_tokens == sum(counts(tiny_counter,
                                                 [m["content"] for m in after.messages]))
        assert (after == before) == (before.prompt_tokens + before.max_tokens <= 420)
    rejecting = build_plan(traffic("chat", chat=spec, overlong="reject"), tiny_counter, 420, 90)
    assert rejecting.trimmed == 0 and rejecting.rejected > 0
    assert all(r.prompt_tokens + r.max_tokens <= 420 for r in rejecting.requests)
    assert len(rejecting.requests) == 90  # later conversations replace the dropped requests


def test_nothing_fits_is_a_clear_error(tiny_counter) -> None:
    with pytest.raises(ValueError, match="do not fit max-model-len 60"):
        build_plan(traffic("chat", chat={"output_tokens": 64}), tiny_counter, 60, 10)


# ------------------------------------------------------------------------- long-doc
def doc_tokens(counter: TokenCounter, requests: Sequence[PlannedRequest]) -> list[int]:
    docs = []
    for request in requests:
        (message,) = request.messages
        document, instruction = message["content"].rsplit(DOC_SEPARATOR, 1)
        assert instruction in INSTRUCTIONS
        docs.append(document)
    return counts(counter, docs)


def test_long_doc_lengths_are_uniform_between_the_bounds(tiny_counter) -> None:
    plan = build_plan(traffic("long-doc"), tiny_counter, 4096, 400)
    low, high = 2000, 4096 - 256 - LONG_DOC_MARGIN_TOKENS
    docs = doc_tokens(tiny_counter, plan.requests)
    assert min(docs) >= low and max(docs) <= high
    # uniform: mean within 5% of the midpoint; quartiles within 5% of the range of theirs;
    # the empirical CDF within 0.1 of the uniform one everywhere (KS, n = 400)
    assert abs(statistics.fmean(docs) - (low + high) / 2) <= 0.05 * (low + high) / 2
    for got, q in zip(statistics.quantiles(docs, n=4), (0.25, 0.5, 0.75), strict=True):
        assert abs(got - (low + q * (high - low))) <= 0.05 * (high - low)
    ordered = sorted(docs)
    ks = max(abs((i + 1) / len(ordered) - (x - low) / (high - low))
             for i, x in enumerate(ordered))
    assert ks < 0.1
    assert {r.max_tokens for r in plan.requests} == {256}
    assert all(r.prompt_tokens + r.max_tokens <= 4096 for r in plan.requests)
    assert plan.trimmed == plan.rejected == 0 and plan.warnings == ()
    # the document's tokens as built are exact: doc + instruction = the measured prompt
    instructions = [r.messages[0]["content"].rsplit(DOC_SEPARATOR, 1)[1] for r in plan.requests]
    suffix = counts(tiny_counter, [DOC_SEPARATOR + text for text in instructions])
    assert [r.prompt_tokens for r in plan.requests] == [d + s for d, s in zip(docs, suffix,
                                                                               strict=True)]
    assert counts(tiny_counter, [r.messages[0]["content"] for r in plan.requests]) == [
        r.prompt_tokens for r in plan.requests]
    assert {r.conversation_id for r in plan.requests} == set(range(400))
    kinds = {text in INSTRUCTIONS[:4] for text in instructions}
    assert kinds == {True, False}  # summaries and questions both appear


def test_long_doc_max_below_min_uses_max_and_warns(tiny_counter) -> None:
    plan = build_plan(traffic("long-doc"), tiny_counter, 2048, 5)
    high = 2048 - 256 - LONG_DOC_MARGIN_TOKENS
    assert set(doc_tokens(tiny_counter, plan.requests)) == {high}
    assert any("below min_doc_tokens" in w for w in plan.warnings)


def test_long_doc_needs_a_bound(tiny_counter) -> None:
    with pytest.raises(ValueError, match="max_doc_tokens"):
        build_plan(traffic("long-doc"), tiny_counter, None, 3)
    plan = build_plan(traffic("long-doc", **{"long-doc": {"min_doc_tokens": 50,
                                                          "max_doc_tokens": 80}}),
                      tiny_counter, None, 30)
    assert all(50 <= d <= 80 for d in doc_tokens(tiny_counter, plan.requests))


def test_long_doc_overlong_trim_and_reject_counts(tiny_counter) -> None:
    section = {"long-doc": {"min_doc_tokens": 1000, "max_doc_tokens": 3000,
                            "output_tokens": 256}}
    raw = build_plan(traffic("long-doc", **section), tiny_counter, None, 60)
    over = [r.prompt_tokens + r.max_tokens > 2048 for r in raw.requests]
    assert 0 < sum(over) < 60
    trimmed = build_plan(traffic("long-doc", **section), tiny_counter, 2048, 60)
    assert trimmed.trimmed == sum(over) and trimmed.rejected == 0
    for before, after, was_over in zip(raw.requests, trimmed.requests, over, strict=True):
        assert after.prompt_tokens + after.max_tokens <= 2048
        if was_over:
            # the document is cut, the instruction kept; close to the budget
            assert after.prompt_tokens >= 2048 - 256 - 8
            document, instruction = after.messages[0]["content"].rsplit(DOC_SEPARATOR, 1)
            assert before.messages[0]["content"].startswith(document)
            assert before.messages[0]["content"].endswith(DOC_SEPARATOR + instruction)
            assert counts(tiny_counter, [after.messages[0]["content"]]) == [after.prompt_tokens]
        else:
            assert after == before
    rejected = build_plan(traffic("long-doc", overlong="reject", **section), tiny_counter,
                          2048, 60)
    assert rejected.trimmed == 0 and len(rejected.requests) == 60
    assert any("dropped" in w for w in rejected.warnings)
    # the same conversations, the overlong ones dropped (and counted) and later ones added
    more = build_plan(traffic("long-doc", **section), tiny_counter, None, 200).requests
    over = [r.prompt_tokens + r.max_tokens > 2048 for r in more]
    kept_ids = [r.conversation_id for r in rejected.requests]
    assert kept_ids == [c for c, was_over in enumerate(over) if not was_over][:60]
    assert rejected.requests == tuple(
        PlannedRequest(i, r.conversation_id, 0, r.messages, r.prompt_tokens, r.max_tokens,
                       "long-doc")
        for i, r in enumerate(more[c] for c in kept_ids))
    assert rejected.rejected == sum(over[: kept_ids[-1] + 1])


# ------------------------------------------------------------------------- text building
class _WordCounter:
    """A deliberately non-additive counter: words, plus one per 7 'e' in the whole text."""

    name = "fake"

    def count_many(self, texts: Sequence[str]) -> list[int]:
        return [len(t.split()) + t.count("e") // 7 for t in texts]


def test_generated_texts_hit_their_targets_with_the_real_tokenizer(tiny_counter) -> None:
    words = WordTexts(tiny_counter)
    rng = random.Random(1)
    targets = [1, 2, 3, 7, 40, 200, 1000, 3777]
    texts = [words.text(rng, n) for n in targets]
    assert counts(tiny_counter, texts) == targets
    assert words.text(rng, 0) == ""


def test_non_additive_tokenizers_are_fixed_up_or_warned() -> None:
    plan = build_plan(traffic("chat"), _WordCounter(), None, 30)
    fake = _WordCounter()
    for request in plan.requests:
        assert request.prompt_tokens == sum(fake.count_many([m["content"]
                                                             for m in request.messages]))
    systems = fake.count_many([plan.requests[0].messages[0]["content"]])
    assert systems == [200] or any("missed their token target" in w for w in plan.warnings)


# ------------------------------------------------------------------------- files
@pytest.mark.parametrize("profile", ["chat", "long-doc"])
def test_write_and_read_round_trip(tiny_counter, tmp_path, profile: str) -> None:
    plan = build_plan(traffic(profile), tiny_counter, 2048, 25)
    path = tmp_path / "plan" / "requests.parquet"
    write_plan(plan, path)
    again = read_plan(path)
    assert again == plan
    assert prompt_bytes(again) == prompt_bytes(plan)
    table = pq.read_table(path)
    assert table.column_names == ["index", "conversation_id", "turn", "messages",
                                  "prompt_tokens", "max_tokens", "profile", "arrival_s",
                                  "branch"]
    assert set(table.column("profile").to_pylist()) == {plan.profile}
    # a plan written before the branch column reads as one without sub-agents
    older = tmp_path / "older.parquet"
    pq.write_table(table.drop_columns(["branch"]), older)
    assert read_plan(older) == plan


def test_read_plan_detects_altered_requests(tiny_counter, tmp_path) -> None:
    plan = build_plan(traffic("chat"), tiny_counter, None, 5)
    path = tmp_path / "requests.parquet"
    write_plan(plan, path)
    table = pq.read_table(path)
    import pyarrow as pa

    altered = table.set_column(5, "max_tokens", pa.array([1] * 5, pa.int64()))
    pq.write_table(altered.replace_schema_metadata(table.schema.metadata), path)
    with pytest.raises(ValueError, match="sha256"):
        read_plan(path)
    (tmp_path / "other.parquet").write_bytes(b"not parquet")
    with pytest.raises(ValueError, match=r"other\.parquet"):
        read_plan(tmp_path / "other.parquet")


def test_flatten_for_completions() -> None:
    messages = ({"role": "system", "content": "S"}, {"role": "user", "content": "U"})
    assert flatten_for_completions(messages) == "system: S\nuser: U\nassistant:"
