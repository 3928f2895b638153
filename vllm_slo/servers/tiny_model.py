"""The tiny random-weight Llama the suite serves when no real model is given.

Built locally, once, and cached: a byte-level BPE tokenizer trained on generated text, a chat
template, and seeded random weights (transformers + tokenizers; nothing is downloaded).
`ensure_tiny_model()` runs the build in a subprocess so that the suite's own process never
imports torch or transformers.

    python -m servers.tiny_model OUT_DIR     # build into OUT_DIR (prints a JSON summary)
"""

from __future__ import annotations

import json
import os
import random
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

from vllm_slo.scenarios.errors import ServerError

if TYPE_CHECKING:
    from tokenizers import Tokenizer

TINY_MODEL_VERSION = "tiny-llama-v2"  # bump when the recipe below changes
SERVED_NAME = "tiny"
CHAT_TEMPLATE = (
    "{{ bos_token }}{% for message in messages %}"
    "<|{{ message['role'] }}|>\n{{ message['content'] }}{{ eos_token }}\n"
    "{% endfor %}{% if add_generation_prompt %}<|assistant|>\n{% endif %}"
)
SPECIAL_TOKENS = ("<|pad|>", "<|bos|>", "<|eos|>", "<|unk|>", "<|system|>", "<|user|>",
                  "<|assistant|>")
SHAPE = {"vocab": 8192, "hidden": 256, "layers": 4, "heads": 4, "kv_heads": 2,
         "intermediate": 512, "max_positions": 4096}
_WORDS = (
    "the of and to in is that for it as was with be by on not this are or from at which but "
    "have an they you were there been one all we their has would when if so no will can more "
    "about up out them into could time only what some other than then its also two after new "
    "latency throughput token request server model load test report percentile streaming "
    "prompt output input batch queue cache prefill decode schedule answer question summary"
).split()


def cache_root() -> Path:
    return Path(os.environ.get("VLLM_SLO_CACHE", Path.home() / ".cache" / "vllm-slo"))


def tiny_model_dir() -> Path:
    return cache_root() / "models" / TINY_MODEL_VERSION


def ensure_tiny_model(timeout_s: float = 600.0) -> Path:
    """Return the cached tiny model folder, building it first if needed (about 10 s)."""
    target = tiny_model_dir().resolve()  # VLLM_SLO_CACHE may be relative to the user's folder
    if (target / ".complete").is_file():
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=".build-", dir=target.parent))
    try:
        result = subprocess.run(
            [sys.executable, "-m", "vllm_slo.servers.tiny_model", str(staging)],
            capture_output=True, text=True, timeout=timeout_s,
            env={**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"},
            cwd=staging,
        )
        if result.returncode != 0:
            raise ServerError(
                "building the tiny model failed (needs transformers, tokenizers and torch; "
                f"install the 'cpu' or 'model' extra):\n{result.stderr[-3000:]}"
            )
        (staging / ".complete").write_text(result.stdout)
        try:
            staging.rename(target)
        except OSError:  # another process finished first
            if not (target / ".complete").is_file():
                raise
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return target


def _training_text(n_lines: int, seed: int) -> list[str]:
    rng = random.Random(seed)
    syllables = [c + v for c in ("", "b", "d", "f", "g", "k", "l", "m", "n", "p", "r", "s", "t",
                                 "v", "z", "ch", "sh", "th", "st", "tr")
                 for v in ("a", "e", "i", "o", "u", "ai", "ou", "ee", "an", "er", "in", "on")]
    pseudo = sorted({"".join(rng.choice(syllables) for _ in range(rng.randint(1, 4)))
                     for _ in range(40_000)})
    vocabulary = list(_WORDS) * 20 + pseudo
    lines = []
    for _ in range(n_lines):
        roll = rng.random()
        if roll < 0.8:
            words = [rng.choice(vocabulary) for _ in range(rng.randint(5, 30))]
            lines.append(" ".join(words) + rng.choice([".", "?", "!", ",", ""]))
        else:
            lines.append(" ".join(str(rng.randint(0, 10 ** rng.randint(1, 6)))
                                  for _ in range(rng.randint(2, 10))))
    return lines


def train_tokenizer(seed: int = 0) -> Tokenizer:
    """The tiny model's byte-level BPE tokenizer, trained locally (about 2 s), as a raw
    `tokenizers.Tokenizer`. Needs only `tokenizers` (no torch/transformers), so unit tests can
    count tokens exactly as the served model does without building the model; `build()` saves
    this very tokenizer."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers

    core = Tokenizer(models.BPE(unk_token=None))
    core.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    core.decoder = decoders.ByteLevel()
    core.post_processor = processors.ByteLevel(trim_offsets=False)
    core.train_from_iterator(_training_text(60_000, seed), trainer=trainers.BpeTrainer(
        vocab_size=SHAPE["vocab"], min_frequency=2, special_tokens=list(SPECIAL_TOKENS),
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False))
    return core


class _Decoder(Protocol):
    """What `silent_token_ids` needs of a tokenizer (transformers' `PreTrainedTokenizerFast`)."""

    def __len__(self) -> int: ...

    def decode(self, token_ids: list[int], skip_special_tokens: bool = ...) -> str: ...


def silent_token_ids(tokenizer: _Decoder) -> list[int]:
    """Tokens that stream as no text: special tokens (skipped when decoding) and byte-level
    pieces that are not valid UTF-8 on their own (held back by incremental detokenizers). A
    random model that greedily repeats one of them answers "200 but no content tokens" every
    time for the same prompt, so the tiny model is built never to prefer them."""
    silent: list[int] = []
    for token_id in range(len(tokenizer)):
        text = tokenizer.decode([token_id], skip_special_tokens=True)
        if not text or "\ufffd" in text:
            silent.append(token_id)
    return silent


def build(out_dir: Path, seed: int = 0) -> dict[str, object]:
    """Build tokenizer + random Llama into out_dir. Imports torch/transformers (subprocess only)."""
    import torch
    from transformers import AutoModelForCausalLM, LlamaConfig, PreTrainedTokenizerFast

    started = time.perf_counter()
    core = train_tokenizer(seed)
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=core, bos_token="<|bos|>", eos_token="<|eos|>", pad_token="<|pad|>",
        unk_token="<|unk|>", additional_special_tokens=list(SPECIAL_TOKENS[4:]),
        clean_up_tokenization_spaces=False, model_max_length=1 << 20)
    tokenizer.chat_template = CHAT_TEMPLATE

    config = LlamaConfig(
        vocab_size=len(tokenizer),  # exact, so the model never emits undecodable ids
        hidden_size=SHAPE["hidden"], num_hidden_layers=SHAPE["layers"],
        num_attention_heads=SHAPE["heads"], num_key_value_heads=SHAPE["kv_heads"],
        intermediate_size=SHAPE["intermediate"], max_position_embeddings=SHAPE["max_positions"],
        head_dim=SHAPE["hidden"] // SHAPE["heads"], rms_norm_eps=1e-6, tie_word_embeddings=True,
        bos_token_id=tokenizer.bos_token_id, eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id, hidden_act="silu", attention_bias=False,
        mlp_bias=False)
    if isinstance(getattr(config, "rope_parameters", None), dict):  # transformers >= 5
        config.rope_parameters = {"rope_type": "default", "rope_theta": 10000.0}
    torch.manual_seed(seed)
    model = AutoModelForCausalLM.from_config(config)
    silent = silent_token_ids(tokenizer)
    with torch.no_grad():  # tied weights: a zero row gives logit 0, never the greedy argmax
        model.get_input_embeddings().weight[silent] = 0.0
    model = model.to(torch.bfloat16).eval()
    model.save_pretrained(out_dir, safe_serialization=True)
    tokenizer.save_pretrained(out_dir)
    # A tokenizer_config.json that transformers 4.x and 5.x both read, chat template inline.
    special = {"bos_token": "<|bos|>", "eos_token": "<|eos|>", "pad_token": "<|pad|>",
               "unk_token": "<|unk|>", "additional_special_tokens": list(SPECIAL_TOKENS[4:])}
    (out_dir / "tokenizer_config.json").write_text(json.dumps({
        "tokenizer_class": "PreTrainedTokenizerFast", **special,
        "clean_up_tokenization_spaces": False, "model_max_length": 1 << 20,
        "chat_template": CHAT_TEMPLATE}, indent=2) + "\n")
    (out_dir / "special_tokens_map.json").write_text(json.dumps(special, indent=2) + "\n")
    return {"version": TINY_MODEL_VERSION, "vocab_size": len(tokenizer),
            "silent_tokens": len(silent),
            "parameters": sum(p.numel() for p in model.parameters()),
            "build_s": round(time.perf_counter() - started, 2)}


if __name__ == "__main__":
    target_dir = Path(sys.argv[1])
    target_dir.mkdir(parents=True, exist_ok=True)
    print(json.dumps(build(target_dir)))
