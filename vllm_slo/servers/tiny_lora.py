"""Tiny random LoRA adapters for a local Llama-architecture model (the tiny model, or any
local folder with a config.json): PEFT format (`adapter_config.json` +
`adapter_model.safetensors`), seeded by the adapter's name, built locally and cached like the
tiny model (nothing is downloaded). `ensure_tiny_loras()` builds every missing one in one
subprocess (torch imported once: about 2.5 s for any number of tiny adapters), so that the
suite's own process never imports torch.

The weights are random on purpose: `lora_B` is not zero (PEFT initialises it to zero, which
would make the adapter a no-op), so an adapter's greedy answer differs from the base model's
and a test can tell the adapter was applied.

    python -m vllm_slo.servers.tiny_lora MODEL_DIR RANK OUT_DIR=NAME ...   # prints JSON lines
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from vllm_slo.scenarios.errors import ServerError
from vllm_slo.servers.tiny_model import cache_root

TINY_LORA_VERSION = "tiny-lora-v1"  # bump when the recipe below changes
TINY_LORA_SOURCE = "tiny"  # server.lora.adapters NAME: tiny -> a generated adapter
TARGET_MODULES = ("q_proj", "k_proj", "v_proj", "o_proj")
LORA_ALPHA_PER_RANK = 2  # lora_alpha = 2 x rank (PEFT's common choice): scaling 2
B_STD = 0.05  # lora_B's spread: large enough that greedy answers change, small enough to stay
#               a perturbation of the base model


def module_shapes(config: dict[str, Any]) -> dict[str, tuple[int, int]]:
    """Pure: (in_features, out_features) of each targeted projection of a Llama-style
    config.json (grouped-query attention: k/v project to kv_heads x head_dim)."""
    hidden = int(config["hidden_size"])
    heads = int(config["num_attention_heads"])
    head_dim = int(config.get("head_dim") or hidden // heads)
    kv_heads = int(config.get("num_key_value_heads") or heads)
    return {"q_proj": (hidden, heads * head_dim), "k_proj": (hidden, kv_heads * head_dim),
            "v_proj": (hidden, kv_heads * head_dim), "o_proj": (heads * head_dim, hidden)}


def adapter_config(rank: int, base_model: str) -> dict[str, Any]:
    """Pure: the adapter_config.json PEFT and vLLM read."""
    return {"peft_type": "LORA", "task_type": "CAUSAL_LM", "r": rank,
            "lora_alpha": LORA_ALPHA_PER_RANK * rank, "lora_dropout": 0.0, "bias": "none",
            "target_modules": list(TARGET_MODULES), "fan_in_fan_out": False,
            "modules_to_save": None, "use_rslora": False, "use_dora": False,
            "base_model_name_or_path": base_model, "inference_mode": True}


def name_seed(name: str) -> int:
    """Pure: the adapter's seed, from its name (two adapters named apart differ)."""
    return int.from_bytes(hashlib.sha256(name.encode()).digest()[:4], "big")


def tiny_lora_dir(model_dir: Path, name: str, rank: int) -> Path:
    """Where the adapter `name` of rank `rank` for the model in `model_dir` is cached: keyed
    by the model's config.json content, so a rebuilt model gets new adapters."""
    fingerprint = hashlib.sha256((model_dir / "config.json").read_bytes()).hexdigest()[:12]
    safe = "".join(c if c.isalnum() or c in "-_." else "_" for c in name)
    return (cache_root() / "loras" / TINY_LORA_VERSION
            / f"{fingerprint}-{safe}-{name_seed(name):08x}-r{rank}")


def ensure_tiny_loras(model_dir: Path, names: list[str], rank: int,
                      timeout_s: float = 300.0) -> dict[str, Path]:
    """Each adapter's cached folder, the missing ones built first in one subprocess.
    `model_dir` is a local model folder with a config.json."""
    if not (model_dir / "config.json").is_file():
        raise ServerError(f"server.lora.adapters: {TINY_LORA_SOURCE!r} generates an adapter "
                          f"from the model's config.json, and {model_dir} has none (give "
                          "server.model as a local folder, or the adapter as a path)")
    targets = {name: tiny_lora_dir(model_dir, name, rank).resolve() for name in names}
    missing = {name: target for name, target in targets.items()
               if not (target / ".complete").is_file()}
    if not missing:
        return targets
    parent = next(iter(missing.values())).parent
    parent.mkdir(parents=True, exist_ok=True)
    staging = {name: Path(tempfile.mkdtemp(prefix=".build-", dir=parent)) for name in missing}
    try:
        result = subprocess.run(
            [sys.executable, "-m", "vllm_slo.servers.tiny_lora", str(model_dir), str(rank),
             *(f"{folder}={name}" for name, folder in staging.items())],
            capture_output=True, text=True, timeout=timeout_s, cwd=parent,
            env={**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"})
        if result.returncode != 0:
            raise ServerError(f"building the tiny LoRA adapters {', '.join(missing)} failed "
                              "(needs torch and safetensors: the 'cpu' or 'model' extra):\n"
                              f"{result.stderr[-3000:]}")
        for name, folder in staging.items():
            (folder / ".complete").write_text("built\n")
            try:
                folder.rename(missing[name])
            except OSError:  # another process finished first
                if not (missing[name] / ".complete").is_file():
                    raise
    finally:
        for folder in staging.values():
            shutil.rmtree(folder, ignore_errors=True)
    return targets


def build(out_dir: Path, model_dir: Path, name: str, rank: int) -> dict[str, object]:
    """Write the adapter into out_dir. Imports torch (subprocess only)."""
    import torch
    from safetensors.torch import save_file  # type: ignore[import-not-found, unused-ignore]

    config = json.loads((model_dir / "config.json").read_text())
    generator = torch.Generator().manual_seed(name_seed(name))
    tensors = {}
    for layer in range(int(config["num_hidden_layers"])):
        for module, (fan_in, fan_out) in module_shapes(config).items():
            key = f"base_model.model.model.layers.{layer}.self_attn.{module}"
            tensors[f"{key}.lora_A.weight"] = (
                torch.randn(rank, fan_in, generator=generator) / fan_in ** 0.5)
            tensors[f"{key}.lora_B.weight"] = (
                torch.randn(fan_out, rank, generator=generator) * B_STD)
    save_file({k: v.to(torch.float16).contiguous() for k, v in tensors.items()},
              str(out_dir / "adapter_model.safetensors"))
    (out_dir / "adapter_config.json").write_text(
        json.dumps(adapter_config(rank, str(model_dir)), indent=2) + "\n")
    return {"version": TINY_LORA_VERSION, "name": name, "rank": rank,
            "tensors": len(tensors), "parameters": sum(t.numel() for t in tensors.values())}


if __name__ == "__main__":
    for pair in sys.argv[3:]:
        out, adapter = pair.rsplit("=", 1)
        print(json.dumps(build(Path(out), Path(sys.argv[1]), adapter, int(sys.argv[2]))))
