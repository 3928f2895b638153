#!/usr/bin/env python3
"""Write a Llama-2-7B-shaped model directory with no weights, for
`vllm serve DIR --load-format dummy`.

The directory holds only what vLLM reads when the weights are dummy (random, made on the GPU):

- ``config.json``: Llama-2-7B's shape (hidden 4096, 32 layers, 32 attention heads and 32 KV
  heads, intermediate 11008, vocab 32000, max_position_embeddings 4096, rope theta 1e4,
  untied embeddings), dtype bfloat16;
- ``generation_config.json``: bos/eos ids and max length only, no sampling defaults (Llama-2's
  own file sets temperature 0.6 / top_p 0.9, which vLLM's ``--generation-config auto`` would
  apply to every request that does not set them; a load test should choose those itself);
- ``tokenizer.json`` + ``tokenizer_config.json``: a byte-level BPE tokenizer trained here in a few
  seconds on deterministic pseudo-words to exactly ``vocab_size`` tokens (``<unk>`` 0, ``<s>`` 1,
  ``</s>`` 2, as in Llama-2), with a chat template; nothing comes from a hub. Like the 1.1 B
  recipe model's tokenizer (the GPU recipe's make_model.py, not in this repository) it adds no
  BOS by itself.

Nothing of 13.5 GB is written: the directory is ~2 MB. The parameter count is computed from the
shape (6,738,415,616 for Llama-2-7B, its published size) and printed as one JSON line, with the
shape, for provenance.

    python3 benchmarks/make_7b_shape_model.py /tmp/model7b           # needs `tokenizers`
    python3 benchmarks/make_7b_shape_model.py /tmp/model7b --layers 2 # a smaller depth, same widths

Needs the ``tokenizers`` package (the lent GPU machine's image has it); no vLLM, no torch, no
transformers.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import random
import sys
import time
from collections.abc import Iterator, Sequence

CHAT_TEMPLATE = (
    "{{ bos_token }}"
    "{% for message in messages %}"
    "<|{{ message['role'] }}|>\n{{ message['content'] }}{{ eos_token }}\n"
    "{% endfor %}"
    "{% if add_generation_prompt %}<|assistant|>\n{% endif %}"
)
SPECIAL_TOKENS = ("<unk>", "<s>", "</s>")  # ids 0, 1, 2 as in Llama-2
BOS_ID, EOS_ID = 1, 2


@dataclasses.dataclass(frozen=True)
class LlamaShape:
    """The architecture numbers that fix a dense Llama's size."""

    hidden_size: int = 4096
    num_hidden_layers: int = 32
    num_attention_heads: int = 32
    num_key_value_heads: int = 32
    intermediate_size: int = 11008
    vocab_size: int = 32000
    max_position_embeddings: int = 4096
    rope_theta: float = 10000.0
    rms_norm_eps: float = 1e-5
    tie_word_embeddings: bool = False

    def parameter_count(self) -> int:
        """Parameters of LlamaForCausalLM with this shape (no biases)."""
        head_dim = self.hidden_size // self.num_attention_heads
        kv_width = self.num_key_value_heads * head_dim
        attention = (
            2 * self.hidden_size * self.hidden_size + 2 * self.hidden_size * kv_width
        )  # q, o, k, v
        mlp = 3 * self.hidden_size * self.intermediate_size  # gate, up, down
        norms = 2 * self.hidden_size
        embeddings = self.vocab_size * self.hidden_size
        head = 0 if self.tie_word_embeddings else embeddings
        return (
            self.num_hidden_layers * (attention + mlp + norms)
            + self.hidden_size
            + embeddings
            + head
        )

    def kv_cache_bytes_per_token(self, dtype_bytes: int = 2) -> int:
        """K and V of every layer for one token."""
        head_dim = self.hidden_size // self.num_attention_heads
        return 2 * self.num_hidden_layers * self.num_key_value_heads * head_dim * dtype_bytes

    def config(self) -> dict[str, object]:
        """config.json as Llama-2-7b-hf writes it, in bfloat16."""
        return {
            "architectures": ["LlamaForCausalLM"],
            "model_type": "llama",
            "attention_bias": False,
            "attention_dropout": 0.0,
            "bos_token_id": BOS_ID,
            "eos_token_id": EOS_ID,
            "hidden_act": "silu",
            "hidden_size": self.hidden_size,
            "initializer_range": 0.02,
            "intermediate_size": self.intermediate_size,
            "max_position_embeddings": self.max_position_embeddings,
            "mlp_bias": False,
            "num_attention_heads": self.num_attention_heads,
            "num_hidden_layers": self.num_hidden_layers,
            "num_key_value_heads": self.num_key_value_heads,
            "pretraining_tp": 1,
            "rms_norm_eps": self.rms_norm_eps,
            "rope_theta": self.rope_theta,
            "tie_word_embeddings": self.tie_word_embeddings,
            "torch_dtype": "bfloat16",
            "use_cache": True,
            "vocab_size": self.vocab_size,
        }


def pseudo_text(lines: int = 60000, seed: int = 0) -> Iterator[str]:
    """Deterministic sentences of pseudo-words: enough distinct merges for a 32k BPE vocab."""
    rnd = random.Random(seed)
    consonants, vowels = "bcdfghjklmnprstvwz", "aeiou"
    syllables = [c + v for c in consonants for v in vowels]
    syllables += [c + v + end for c in consonants[:9] for v in vowels for end in "nrst"]
    words = ["".join(rnd.choice(syllables) for _ in range(rnd.randint(1, 4))) for _ in range(60000)]
    words += [
        "the",
        "a",
        "of",
        "and",
        "to",
        "in",
        "is",
        "you",
        "that",
        "it",
        "user",
        "assistant",
        "system",
    ]
    endings = [".", ",", "?", "!", ":", ";", " -", "'s", "0", "1", "2", "42", "2026"]
    for _ in range(lines):
        sentence = " ".join(rnd.choice(words) for _ in range(rnd.randint(5, 25)))
        if rnd.random() < 0.5:
            sentence = sentence.capitalize()
        yield sentence + rnd.choice(endings)


def write_tokenizer(out_dir: str, vocab_size: int, max_length: int) -> int:
    """Train a byte-level BPE tokenizer to vocab_size tokens; write it; return its length."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers

    tokenizer = Tokenizer(models.BPE(unk_token=None))
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    tokenizer.post_processor = processors.ByteLevel(trim_offsets=False)
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        min_frequency=1,
        special_tokens=list(SPECIAL_TOKENS),
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tokenizer.train_from_iterator(pseudo_text(), trainer=trainer)
    size = tokenizer.get_vocab_size(with_added_tokens=True)
    if size != vocab_size:
        raise SystemExit(
            f"tokenizer has {size} tokens, not {vocab_size}: the pseudo-text is too small"
        )
    for token_id, token in enumerate(SPECIAL_TOKENS):
        assert tokenizer.token_to_id(token) == token_id, token
    tokenizer.save(os.path.join(out_dir, "tokenizer.json"))
    special = {
        "content": "",
        "lstrip": False,
        "normalized": False,
        "rstrip": False,
        "single_word": False,
        "special": True,
    }
    tokenizer_config = {
        "tokenizer_class": "PreTrainedTokenizerFast",
        "bos_token": "<s>",
        "eos_token": "</s>",
        "unk_token": "<unk>",
        "added_tokens_decoder": {
            str(i): {**special, "content": t} for i, t in enumerate(SPECIAL_TOKENS)
        },
        "clean_up_tokenization_spaces": False,
        "model_max_length": max_length,
        "chat_template": CHAT_TEMPLATE,
    }
    with open(os.path.join(out_dir, "tokenizer_config.json"), "w") as handle:
        json.dump(tokenizer_config, handle, indent=2)
    return size


def write_model_dir(out_dir: str, shape: LlamaShape) -> dict[str, object]:
    """Write config, generation config and tokenizer; return the provenance record."""
    os.makedirs(out_dir, exist_ok=True)
    started = time.perf_counter()
    with open(os.path.join(out_dir, "config.json"), "w") as handle:
        json.dump(shape.config(), handle, indent=2)
    generation = {
        "bos_token_id": BOS_ID,
        "eos_token_id": EOS_ID,
        "max_length": shape.max_position_embeddings,
    }
    with open(os.path.join(out_dir, "generation_config.json"), "w") as handle:
        json.dump(generation, handle, indent=2)
    tokens = write_tokenizer(out_dir, shape.vocab_size, shape.max_position_embeddings)
    return {
        "model_dir": out_dir,
        "architecture": "LlamaForCausalLM",
        "shape": dataclasses.asdict(shape),
        "model_parameters": shape.parameter_count(),
        "weights_bytes_bf16": 2 * shape.parameter_count(),
        "kv_cache_bytes_per_token_bf16": shape.kv_cache_bytes_per_token(),
        "tokenizer_tokens": tokens,
        "files": sorted(os.listdir(out_dir)),
        "written_s": round(time.perf_counter() - started, 1),
        "load_with": "vllm serve DIR --load-format dummy --dtype bfloat16",
    }


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("out_dir", help="directory to write (created if missing)")
    defaults = LlamaShape()
    parser.add_argument(
        "--layers", type=int, default=defaults.num_hidden_layers, help="num_hidden_layers"
    )
    parser.add_argument(
        "--max-position-embeddings", type=int, default=defaults.max_position_embeddings
    )
    args = parser.parse_args(argv)
    shape = dataclasses.replace(
        defaults,
        num_hidden_layers=args.layers,
        max_position_embeddings=args.max_position_embeddings,
    )
    record = write_model_dir(args.out_dir, shape)
    print(json.dumps(record), flush=True)
    print(
        f"model_parameters: {record['model_parameters']:,} "
        f"({record['model_parameters'] / 1e9:.2f} B)",
        flush=True,
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
