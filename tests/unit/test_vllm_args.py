"""The pure parts of the `server.args` check (servers/vllm_args.py): which flags argparse would
not know, the message for a rejection, and the options cache answering an unknown flag without
running vLLM."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from vllm_slo.scenarios.errors import ServerConfigError
from vllm_slo.servers import vllm_args
from vllm_slo.servers.vllm_args import ArgsCheck, check_serve_args, rejection_message, unknown_flags

OPTIONS = ("--max-num-seqs", "--max-num-batched-tokens", "--enable-chunked-prefill",
           "--no-enable-chunked-prefill", "--block-size", "--compilation-config", "-O")


def test_unknown_flags_follow_argparse() -> None:
    flags = ["--max-num-seqs", "16", "--max-num-seq", "8",  # a unique prefix: argparse takes it
             "--max-num", "4",  # a prefix of two options: ambiguous, not "known"
             "--compilation-config.level", "3",  # FlexibleArgumentParser's dotted JSON keys
             "--max_num_batched_tokens", "512",  # underscores are dashes
             "--no-enable-chunked-prefill", "--blok-size", "16"]
    assert unknown_flags(flags, OPTIONS) == ["--max-num", "--blok-size"]


def test_rejection_names_the_key_and_close_matches() -> None:
    unknown = ArgsCheck(False, "unrecognized arguments: --blok-size 16", OPTIONS)
    assert rejection_message({"blok-size": 16}, unknown) == (
        "server.args.blok-size: vLLM's `vllm serve` has no flag --blok-size; did you mean "
        "block-size?")
    negated = ArgsCheck(False, "unrecognized arguments: --no-enable-chunkd-prefill", OPTIONS)
    assert rejection_message({"enable-chunkd-prefill": False}, negated).startswith(
        "server.args.enable-chunkd-prefill: vLLM's `vllm serve` has no flag "
        "--enable-chunkd-prefill; did you mean enable-chunked-prefill")
    bad_value = ArgsCheck(False, "argument --max-num-seqs: invalid int value: 'lots'", OPTIONS)
    assert rejection_message({"max-num-seqs": "lots"}, bad_value) == (
        "server.args.max-num-seqs = 'lots': vLLM rejects it: argument --max-num-seqs: invalid "
        "int value: 'lots'")
    other = ArgsCheck(False, "ValueError: chunked prefill needs max-num-batched-tokens", OPTIONS)
    assert rejection_message({}, other) == (
        "server.args: vLLM rejects this configuration: ValueError: chunked prefill needs "
        "max-num-batched-tokens")


def test_known_options_refuse_a_typo_without_running_vllm(tmp_path: Path,
                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("VLLM_SLO_CACHE", str(tmp_path))
    monkeypatch.setattr(vllm_args, "_cache_dir", lambda: tmp_path / "vllm-args" / "0.0")
    (tmp_path / "vllm-args" / "0.0").mkdir(parents=True)
    (tmp_path / "vllm-args" / "0.0" / "options.json").write_text(json.dumps(OPTIONS))
    [result] = check_serve_args([("model", ["--blok-size", "16"])], python="/nonexistent")
    assert not result.ok and result.error == "unrecognized arguments: --blok-size"
    with pytest.raises(ServerConfigError, match="could not check"):  # this one needs vLLM
        check_serve_args([("model", ["--block-size", "16"])], python="/nonexistent")


def test_a_flag_from_a_config_file_is_named_by_its_file(tmp_path: Path) -> None:
    """A rejected flag that only the config file set is reported there, not as server.args;
    one that `args` set (or overrode) keeps its dotted key."""
    from vllm_slo.scenarios.server_spec import ServerSpec
    from vllm_slo.servers.vllm_args import flag_source

    config = tmp_path / "mine.yaml"
    config.write_text("max-num-seqs: lots\nblock-size: 16\n")
    spec = ServerSpec(model="tiny", config=str(config), args={"block-size": 32})
    where = flag_source(spec)
    bad_value = ArgsCheck(False, "argument --max-num-seqs: invalid int value: 'lots'", OPTIONS)
    assert rejection_message(spec.engine_args, bad_value, where) == (
        f"server.config {config}: max-num-seqs = 'lots': vLLM rejects it: argument "
        "--max-num-seqs: invalid int value: 'lots'")
    assert where("block-size") == "server.args.block-size"
    assert flag_source(ServerSpec(model="tiny"))("block-size") == "server.args.block-size"
