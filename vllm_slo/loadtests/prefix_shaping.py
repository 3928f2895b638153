"""Shaping the request plan's prompts to a prefix-cache hit rate (`traffic.prefix_cache.
target_hit_rate`).

What vLLM counts (v1 engine, `vllm:prefix_cache_queries_total` / `_hits_total`): each request
it schedules adds its prompt length (tokens, chat template included) to the queries and the
tokens found in the cache to the hits. Only whole blocks of `block-size` tokens are cached and
looked up, each block's hash chaining its predecessors, so a request hits exactly the leading
full blocks it shares with something computed before (never its last token).

So each shaped request starts its first message with `k_i` whole blocks of one shared text
(the first `k_i * B` tokens of it: every request's shared part is a prefix of the longest),
then a per-request marker of NONCE_TOKENS tokens and a blank line, then the profile's own
content. The marker ends the sharing: the profile's own common text (chat's system prompt, a
conversation's history) is no longer a common prefix, so the shared blocks alone decide the
hits. The chat template's tokens before the content (BOS, a role header: fewer than B) make
the shared run `k_i * B + header` tokens long, which still fills exactly `k_i` blocks.

With `rest_i` the request's other tokens, request i hits `k_i * B` of `k_i * B + rest_i`
tokens; `k_i` is chosen so that the running totals track the target (error diffusion:
request n takes the blocks that bring Σ hits closest to t/(1-t) × Σ rest), so any leading part
of the plan — what a closed loop sends in its window — comes out at the target to within one
block over the part. A request whose context has no room for the blocks it wants gets fewer
(counted and warned: the target is then out of reach). Prompts grow by the shared part:
t/(1-t) × their own length (×1.5 at 0.6, ×4 at 0.8).

The hit rate the plan expects holds once every shared block is cached: `phases: warm` sends the
longest shared part once before the traffic (`primers`); in a cold run the first requests miss
it (first use), as do requests sent before an earlier one's prefill finished.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import dataclass

from vllm_slo.loadtests.plan_fitting import Candidate, Message, Tally
from vllm_slo.loadtests.prompts import WordTexts
from vllm_slo.loadtests.tokens import TokenCounter

NONCE_TOKENS = 8  # per-request marker after the shared part (distinct with overwhelming odds)
SEPARATOR = "\n\n"  # between the marker and the profile's content
# chat-template tokens per message the server adds (role tags, BOS/EOS): an estimate used only
# to size the shared part; the check against /metrics measures what really happened
TEMPLATE_TOKENS_PER_MESSAGE = 8
PRIMER_QUESTION = "Reply with one word."


@dataclass(frozen=True, slots=True)
class BlockShares:
    """Shared blocks per request and what the shaping expects of them."""

    blocks: tuple[int, ...]
    capped: int  # requests given fewer blocks than they wanted (no room in the context)
    expected_hit_rate: float | None  # Σ hits / Σ queries once every shared block is cached


def shared_blocks(rest_tokens: Sequence[int], target: float, block_size: int,
                  room_blocks: Sequence[int | None] | None = None) -> BlockShares:
    """Blocks of shared prefix per request (pure). `rest_tokens[i]`: the tokens the server
    counts for request i besides its shared part; `room_blocks[i]`: the most blocks its
    context can take (None: no limit). See the module docstring for the rule."""
    if not 0 <= target < 1:
        raise ValueError(f"target hit rate must be in [0, 1), got {target!r}")
    if block_size < 1:
        raise ValueError(f"block size must be at least 1 token, got {block_size!r}")
    ratio = target / (1.0 - target)
    blocks: list[int] = []
    capped = 0
    rest_total = hits_total = 0
    for index, rest in enumerate(rest_tokens):
        rest_total += rest
        wanted = max(0, round((ratio * rest_total - hits_total) / block_size))
        room = None if room_blocks is None else room_blocks[index]
        given = wanted if room is None else min(wanted, max(0, room))
        capped += given < wanted
        blocks.append(given)
        hits_total += given * block_size
    queries = hits_total + rest_total
    return BlockShares(tuple(blocks), capped,
                       hits_total / queries if queries > 0 else None)


def expected_hit_rate(blocks: Sequence[int], rest_tokens: Sequence[int],
                      block_size: int) -> float | None:
    """Σ k_i B / Σ (k_i B + rest_i): the hit rate with every shared block cached."""
    hits = sum(blocks) * block_size
    queries = hits + sum(rest_tokens)
    return hits / queries if queries > 0 else None


@dataclass(frozen=True, slots=True)
class ShapedPlan:
    candidates: list[Candidate]
    primers: tuple[tuple[dict[str, str], ...], ...]  # sent once before a warm run
    shares: BlockShares
    block_size: int


def shared_text(words: WordTexts, seed: int, n_tokens: int) -> list[str]:
    """The shared text as one-token, space-led pieces: its first n pieces are n tokens, the
    same for every request of the plan."""
    rng = random.Random(f"{seed}:prefix-cache:shared")
    return rng.choices(words.fillers, k=n_tokens)


def _nonce(words: WordTexts, seed: int, index: int) -> str:
    rng = random.Random(f"{seed}:prefix-cache:request:{index}")
    return "".join(rng.choices(words.fillers, k=NONCE_TOKENS))


def shape_candidates(candidates: list[Candidate], target: float, block_size: int,
                     counter: TokenCounter, words: WordTexts, seed: int,
                     max_model_len: int | None, tally: Tally) -> ShapedPlan:
    """The plan's candidates with their shared parts (new first messages; the originals,
    shared between turns, are left as they were), re-counted with the real tokenizer."""
    separator_tokens = counter.count_many([SEPARATOR])[0]
    rest = [c.prompt_tokens + NONCE_TOKENS + separator_tokens
            + TEMPLATE_TOKENS_PER_MESSAGE * len(c.messages) for c in candidates]
    room: list[int | None] = [
        None if max_model_len is None else (max_model_len - c.max_tokens - r) // block_size
        for c, r in zip(candidates, rest, strict=True)]
    shares = shared_blocks(rest, target, block_size, room)
    pieces = shared_text(words, seed, max(shares.blocks, default=0) * block_size)
    shaped: list[Candidate] = []
    firsts: list[Message] = []
    for index, (candidate, blocks) in enumerate(zip(candidates, shares.blocks, strict=True)):
        first = candidate.messages[0]
        prefix = "".join(pieces[: blocks * block_size]) + _nonce(words, seed, index) + SEPARATOR
        new_first = Message(first.role, prefix + first.body, first.suffix, floor=first.floor)
        firsts.append(new_first)
        shaped.append(Candidate(candidate.conversation_id, candidate.turn,
                                [new_first, *candidate.messages[1:]], candidate.max_tokens,
                                candidate.profile, branch=candidate.branch))
    for message, tokens in zip(firsts, counter.count_many([m.content for m in firsts]),
                               strict=True):
        message.tokens = tokens
    if shares.capped:
        tally.warnings.append(
            f"prefix cache: {shares.capped} of {len(candidates)} requests had no room in "
            f"max-model-len {max_model_len} for the shared blocks they needed; the plan "
            f"expects a hit rate of {shares.expected_hit_rate or 0:.3f}, not {target:.3f}")
    return ShapedPlan(shaped, _primers(shaped, shares.blocks, pieces, block_size), shares,
                      block_size)


def _primers(candidates: Sequence[Candidate], blocks: Sequence[int], pieces: Sequence[str],
             block_size: int) -> tuple[tuple[dict[str, str], ...], ...]:
    """One request per first-message role (the template's header before the shared text
    depends on it) carrying the longest shared part that role's requests use."""
    longest: dict[str, int] = {}
    for candidate, k in zip(candidates, blocks, strict=True):
        role = candidate.messages[0].role
        longest[role] = max(longest.get(role, 0), k)
    primers: list[tuple[dict[str, str], ...]] = []
    for role, k in sorted(longest.items()):
        if k == 0:
            continue
        shared = "".join(pieces[: k * block_size]) + " primer"
        if role == "user":
            primers.append(({"role": role, "content": shared + SEPARATOR + PRIMER_QUESTION},))
        else:  # a system (or other) first message: a question follows it
            primers.append(({"role": role, "content": shared},
                            {"role": "user", "content": PRIMER_QUESTION}))
    return tuple(primers)
