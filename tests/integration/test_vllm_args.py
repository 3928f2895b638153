"""`server.args` checked by the installed vLLM's own `vllm serve` parser (real vLLM CPU build)
before anything starts: an unknown flag names its dotted key and vLLM's closest flags, a wrong
value names key and value; in an experiment every variant is checked before the first trial.
Each test checks with an empty cache (VLLM_SLO_CACHE of its own), so vLLM really parses."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.integration.conftest import cli_env, requires_vllm, run_cli
from vllm_slo.scenarios.server_configs import (
    config_path,
    engine_args_to_argv,
    known_configs,
    read_server_config,
)
from vllm_slo.servers.vllm_args import check_serve_args

pytestmark = [pytest.mark.integration, requires_vllm, pytest.mark.vllm_no_traffic]


def test_an_unknown_flag_is_refused_before_anything_starts(tmp_path: Path) -> None:
    result = run_cli(["run", "scenario=chat", "server.args.max-num-seqz=16"], tmp_path / "runs",
                     env={**cli_env(), "VLLM_SLO_CACHE": str(tmp_path / "cache")})
    assert result.returncode == 2, result.output
    assert ("server.args.max-num-seqz: vLLM's `vllm serve` has no flag --max-num-seqz; "
            "did you mean max-num-seqs") in result.output
    assert "nothing was started" in result.output
    assert result.run_dir is None  # no run folder, no server log: nothing was launched
    assert not (tmp_path / "cache" / "models").exists()  # not even the tiny model was made
    # the flags this vLLM knows are kept: the next typo is refused without parsing again
    assert list((tmp_path / "cache" / "vllm-args").glob("*/options.json"))


def test_a_variants_bad_value_is_refused_before_the_first_trial(tmp_path: Path) -> None:
    result = run_cli(["run", "scenario=chat", "trials=2",
                      "variants={a: {}, b: {server: {args: {max-num-seqs: lots}}}}"],
                     tmp_path / "runs",
                     env={**cli_env(), "VLLM_SLO_CACHE": str(tmp_path / "cache")})
    assert result.returncode == 2, result.output
    assert ("variant b: server.args.max-num-seqs = 'lots': vLLM rejects it: argument "
            "--max-num-seqs: invalid int value: 'lots'") in result.output
    assert "variant a" not in result.output  # the good arm passed
    assert result.run_dir is None and "=== trial" not in result.output


def test_every_named_server_config_is_a_vllm_config_file(tmp_path: Path,
                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    """Each file under servers/configs runs with plain `vllm serve MODEL --config FILE`: vLLM's
    own parser reads it (its --config expansion), and the flags the suite passes for it
    (`server.config: NAME`) are accepted too."""
    monkeypatch.setenv("VLLM_SLO_CACHE", str(tmp_path))
    names = known_configs()
    assert {"chunked-prefill-2k", "chunked-prefill-8k", "no-chunked-prefill", "eager",
            "no-prefix-caching"} <= set(names)
    as_files = [("tiny", ["--config", str(config_path(name))]) for name in names]
    as_flags = [("tiny", engine_args_to_argv(read_server_config(name))) for name in names]
    results = check_serve_args(as_files + as_flags)
    assert [(r.ok, r.error) for r in results] == [(True, None)] * len(results)


def test_a_kv_cache_too_small_for_max_model_len_is_diagnosed(tmp_path: Path) -> None:
    """A configuration vLLM's parser accepts but its engine refuses at start-up (4 MiB of KV
    cache cannot hold one 2,048-token request): exit 2, vLLM's root cause (found above the
    tracebacks, not in the log's tail) and the remedy."""
    result = run_cli(["run", "scenario=chat", "server.args.kv-cache-memory-bytes=4M"],
                     tmp_path / "runs")
    assert result.returncode == 2, result.output
    assert "vLLM rejected the server configuration" in result.output
    assert "To serve at least one request with the model's max seq len (2048)" in result.output
    assert ("Diagnosis: the KV cache is too small for one request of max-model-len tokens. "
            "Remedy: lower server.args.max-model-len") in result.output


@pytest.mark.parametrize(("override", "message"), [
    ("server.args.max-num-seqs=0",
     "server.args.max-num-seqs = 0: vLLM rejects it: argument --max-num-seqs: 0 is out of "
     "range: vLLM's SchedulerConfig.max_num_seqs must be >= 1"),
    ("server.args.gpu-memory-utilization=1.5",
     "server.args.gpu-memory-utilization = 1.5: vLLM rejects it: argument "
     "--gpu-memory-utilization: 1.5 is out of range: vLLM's "
     "CacheConfig.gpu_memory_utilization must be <= 1"),
])
def test_a_number_outside_vllms_declared_bounds_is_refused_up_front(
        tmp_path: Path, override: str, message: str) -> None:
    result = run_cli(["run", "scenario=chat", override], tmp_path / "runs",
                     env={**cli_env(), "VLLM_SLO_CACHE": str(tmp_path / "cache")})
    assert result.returncode == 2, result.output
    assert message in result.output
    assert "Traceback" not in result.output and result.run_dir is None
