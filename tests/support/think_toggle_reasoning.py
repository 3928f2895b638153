"""A vLLM reasoning-parser plugin for the suite's tiny model (vLLM CPU tests of reasoning
timing): `--reasoning-parser-plugin <this file> --reasoning-parser vllm_slo_think_toggle`.

Like vLLM's `deepseek_v3` parser: a request that asks to think
(`chat_template_kwargs: {enable_thinking: true}`, the suite's `traffic.reasoning`) gets the
DeepSeek-R1 rule — output is reasoning from its first token until the end marker, content
after it — and every other request is parsed as plain content (vLLM's identity parser), so
the other tests on a shared server see no difference. The tiny tokenizer has no `<think>`
tokens; the markers are its special tokens `<|system|>` (start) and `<|unk|>` (end: never in
a prompt, where vLLM would take it for a reasoning already ended), which stream as no text
and which the tiny model never prefers on its own (their embeddings are zero): a request
makes the end marker likely with `logit_bias` on its id, 3 (7 with temperature 1 and a seed
ends the reasoning after about 12 tokens; greedy decoding repeats the marker for good).

Runs inside `vllm serve` (it imports vllm); the suite itself never imports it.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from vllm.reasoning import ReasoningParser, ReasoningParserManager
from vllm.reasoning.deepseek_r1_reasoning_parser import DeepSeekR1ReasoningParser
from vllm.reasoning.deepseek_v3_reasoning_parser import DeepSeekV3ReasoningParser
from vllm.reasoning.identity_reasoning_parser import IdentityReasoningParser

START, END = "<|system|>", "<|unk|>"


class _UntaggedThinking(DeepSeekR1ReasoningParser):
    """R1's rule with the tiny tokenizer's markers; reasoning tokens are those before the end
    marker (R1 models think from the first token: the start tag is in the prompt)."""

    @property
    def start_token(self) -> str:
        return START

    @property
    def end_token(self) -> str:
        return END

    def count_reasoning_tokens(self, token_ids: Sequence[int]) -> int:
        ids = list(token_ids)
        end = ids.index(self.end_token_id) if self.end_token_id in ids else len(ids)
        return sum(1 for t in ids[:end] if t != self.start_token_id)


@ReasoningParserManager.register_module("vllm_slo_think_toggle")
class ThinkToggleReasoningParser(DeepSeekV3ReasoningParser):
    def __init__(self, tokenizer: Any, *args: Any, **kwargs: Any) -> None:
        ReasoningParser.__init__(self, tokenizer, *args, **kwargs)
        chat_kwargs = kwargs.get("chat_template_kwargs") or {}
        thinking = bool(chat_kwargs.get("enable_thinking") or chat_kwargs.get("thinking"))
        self._parser = (_UntaggedThinking(tokenizer, *args, **kwargs) if thinking
                        else IdentityReasoningParser(tokenizer, *args, **kwargs))
