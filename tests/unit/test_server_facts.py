"""What a vLLM server says about itself (vllm_slo/servers/server_facts.py), from real vLLM CPU 0.32
start-up lines and a real /metrics scrape (tests/unit/data/vllm_cpu_*), GPU wording as the
H200 runs printed it, and the diagnosis of a failed start-up (a real KV-cache-too-small log)."""

from __future__ import annotations

import json
from pathlib import Path

from vllm_slo.servers.server_facts import (
    ServerFacts,
    describe,
    diagnose_runtime_failure,
    diagnose_start_failure,
    effective_engine_args,
    facts_from_log,
    server_facts,
)

DATA = Path(__file__).resolve().parent / "data"


def test_facts_of_a_real_cpu_start() -> None:
    log = (DATA / "vllm_cpu_start.log").read_text()
    metrics = json.loads((DATA / "vllm_cpu_cache_config_info.json").read_text())
    facts = server_facts(log, metrics)
    assert facts == ServerFacts(
        vllm_version="0.32.0",
        non_default_args=facts.non_default_args,
        enable_chunked_prefill=True, enable_prefix_caching=True, enforce_eager=True,
        max_seq_len=2048, max_num_batched_tokens=2048, kv_cache_device="CPU",
        kv_cache_tokens=524_288,
        kv_cache_blocks=4096, block_size=128, max_concurrency=256.0,
        max_concurrency_at_tokens=2048, engine_init_s=2.98)
    assert facts.non_default_args is not None
    assert facts.non_default_args["max_num_batched_tokens"] == 2048
    assert facts.non_default_args["block_size"] == 128
    assert describe(facts) == (
        "server facts: CPU KV cache 524,288 tokens (4,096 blocks of 128), max concurrency 256x "
        "at 2,048 tokens, chunked prefill on (2,048 tokens a step), prefix caching on, eager")


def test_gpu_wording_and_nothing_known() -> None:
    log = ("INFO 12-01 [kv_cache_utils.py:1087] GPU KV cache size: 4,121,344 tokens\n"
           "INFO 12-01 [kv_cache_utils.py:1091] Maximum concurrency for 4,096 tokens per "
           "request: 1006.19x\n")
    facts = server_facts(log, None)
    assert (facts.kv_cache_device, facts.kv_cache_tokens) == ("GPU", 4_121_344)
    assert (facts.max_concurrency, facts.max_concurrency_at_tokens) == (1006.19, 4096)
    assert facts.kv_cache_blocks is None  # no block size said: no guess
    assert facts_from_log("") == {} and describe(server_facts("", {})) == ""


def test_the_step_budget_is_the_schedulers_own_line_defaults_included() -> None:
    """vLLM 0.26.0 on the H200 with max-model-len alone (h200-tune's c01, 2026-12-04): the
    command line sets no max-num-batched-tokens, and the scheduler says the default it took,
    8,192; a later start in the same log wins; the command line's value when the scheduler
    says nothing (chunked prefill off)."""
    line = ("(APIServer pid=1072) INFO 12-04 03:06:33 [scheduler.py:252] Chunked prefill is "
            "enabled with max_num_batched_tokens=8192.\n")
    args = ("INFO [api_utils.py:286] non-default args: {'model': '/tmp/model7b', "
            "'max_model_len': 4096, 'load_format': 'dummy'}\n")
    assert facts_from_log(args + line)["max_num_batched_tokens"] == 8192
    again = line.replace("8192", "4096")
    assert facts_from_log(args + line + again)["max_num_batched_tokens"] == 4096
    unchunked = ("INFO non-default args: {'max_model_len': 4096, 'max_num_batched_tokens': "
                 "4096, 'enable_chunked_prefill': False}\n")
    assert facts_from_log(unchunked)["max_num_batched_tokens"] == 4096
    assert "max_num_batched_tokens" not in facts_from_log(args)
    assert describe(ServerFacts(enable_chunked_prefill=False, max_num_batched_tokens=4096)) == \
        "server facts: chunked prefill off (4,096 tokens a step)"


def test_a_kv_cache_too_small_start_is_diagnosed_with_its_remedy() -> None:
    diagnosis = diagnose_start_failure((DATA / "vllm_cpu_kv_too_small.log").read_text())
    assert diagnosis is not None
    assert diagnosis.startswith("Diagnosis: the KV cache is too small for one request of "
                                "max-model-len tokens. Remedy: lower server.args.max-model-len")
    assert "kv-cache-memory-bytes up on the CPU build" in diagnosis
    assert "To serve at least one request with the model's max seq len (2048)" in diagnosis


def test_other_known_failures_and_an_unknown_one() -> None:
    cases = {
        "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB":
            "the GPU ran out of memory",
        "ValueError: No available memory for the cache blocks. Try increasing "
        "`gpu_memory_utilization`": "no memory was left for the KV cache",
        "ValueError: max_num_batched_tokens (2048) is smaller than max_model_len (8192).":
            "max-num-batched-tokens cannot hold one prompt",
        "OSError: [Errno 98] error while attempting to bind on address ('127.0.0.1', 8000): "
        "address already in use": "the server's port was taken",
    }
    for line, cause in cases.items():
        diagnosis = diagnose_start_failure(f"INFO starting\n{line}\nRuntimeError: failed\n")
        assert diagnosis is not None and cause in diagnosis, (line, diagnosis)
        assert line[:60] in diagnosis  # vLLM's own words are quoted
    assert diagnose_start_failure("RuntimeError: Engine core initialization failed.") is None


def test_a_seeded_split_prefill_death_on_vllm_cpu_is_diagnosed_after_start_only() -> None:
    # lines vLLM CPU 0.32.0 wrote when a seeded request's prefill was split (2026-12-04)
    log = (
        "(Worker pid=29717) ERROR 12-04 16:42:22 [multiproc_executor.py:1063]     "
        "gen.set_offset(gen.get_offset() - 4)\n"
        "(Worker pid=29717) ERROR 12-04 16:42:22 [multiproc_executor.py:1063] RuntimeError: "
        "CPU Generator does not use offset\n"
        "(APIServer pid=29695) ERROR 12-04 16:42:22 [vllm_error.py:54] "
        "vllm.v1.engine.exceptions.EngineDeadError: EngineCore encountered an issue. See "
        "stack trace (above) for the root cause.\n")
    diagnosis = diagnose_runtime_failure(log)
    assert diagnosis is not None
    assert diagnosis.startswith("Diagnosis: vLLM's CPU build died discarding a token it had "
                                "sampled for a request that sets `seed`")
    assert "Remedy: drop `seed` from traffic.extra_body" in diagnosis
    assert "RuntimeError: CPU Generator does not use offset" in diagnosis  # vLLM's words
    assert diagnose_start_failure(log) is None  # not a start-up failure
    assert diagnose_runtime_failure("torch.OutOfMemoryError: CUDA out of memory.") is None


def test_effective_engine_args_name_the_flags_a_server_stated() -> None:
    facts = {"vllm_version": "0.26.0", "max_num_batched_tokens": 8192, "block_size": 16,
             "max_seq_len": 4096, "enable_chunked_prefill": True,
             "enable_prefix_caching": False, "enforce_eager": None, "kv_cache_tokens": 1}
    assert effective_engine_args(facts) == {
        "max-num-batched-tokens": 8192, "block-size": 16, "max-model-len": 4096,
        "enable-chunked-prefill": True, "enable-prefix-caching": False}
    assert effective_engine_args({}) == {}
