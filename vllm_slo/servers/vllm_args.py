"""`server.args` checked by the installed vLLM's own `vllm serve` parser before anything starts:
a typo or a wrong type costs a parse (a few seconds: vLLM's import), not a server start-up (a
minute on CPU, more on a GPU) — and in an experiment, every variant is checked before the
first trial.

The check runs vLLM in a child process (`python -m vllm_slo.servers.vllm_cli
--check-serve-args`: the suite never imports vLLM itself); results are cached per vLLM version
and command line under the suite's cache folder, so a scenario run again is checked at once.
A rejection names the dotted key (`server.args.max-num-seqz`), the value, vLLM's own words and,
for an unknown flag, the closest flags this vLLM has.
"""

from __future__ import annotations

import difflib
import hashlib
import json
import os
import re
import subprocess
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from vllm_slo.scenarios.errors import ServerConfigError
from vllm_slo.scenarios.server_configs import read_server_config
from vllm_slo.scenarios.server_spec import ServerSpec
from vllm_slo.servers.tiny_model import cache_root
from vllm_slo.servers.vllm_cli import CHECK_FLAG, CHECK_REVISION, RESULTS_MARK, vllm_version
from vllm_slo.servers.vllm_server import plan_launch, vllm_installed

CHECK_TIMEOUT_S = 300.0
_UNRECOGNIZED = re.compile(r"unrecognized arguments: (.*)")
_ARGUMENT = re.compile(r"argument (--[\w.-]+)")


@dataclass(frozen=True, slots=True)
class ArgsCheck:
    """vLLM's answer for one `vllm serve` command line."""

    ok: bool
    error: str | None
    options: tuple[str, ...]  # every option string this vLLM's `vllm serve` knows


def flag_key(flag: str) -> str:
    """`--max_num_seqs=8` -> `max-num-seqs` (dashes, no value); a `--no-NAME` keeps its `no-`
    (the caller knows whether NAME: false wrote it)."""
    return flag.lstrip("-").split("=", 1)[0].replace("_", "-")


def _args_key(key: str) -> str:
    return f"server.args.{key}"


def rejection_message(args: dict[str, Any], check: ArgsCheck,
                      where: Callable[[str], str] = _args_key) -> str:
    """Pure: one clear message for a rejected command line: where the flag was set (`where`:
    a flag name -> `server.args.NAME` by default, or the config file that set it), the value,
    vLLM's words, close matches for an unknown flag."""
    assert check.error is not None
    unknown = _UNRECOGNIZED.search(check.error)
    if unknown:
        flags = [word for word in unknown.group(1).split() if word.startswith("--")]
        parts = []
        for flag in flags or [unknown.group(1)]:
            name = flag_key(flag)
            key = name if name in args else name.removeprefix("no-")
            known = sorted({flag_key(option) for option in check.options
                            if option.startswith("--")})
            close = difflib.get_close_matches(key, known, n=3, cutoff=0.6)
            hint = f"; did you mean {', '.join(close)}?" if close else ""
            parts.append(f"{where(key)}: vLLM's `vllm serve` has no flag --{key}{hint}")
        return "\n".join(parts)
    named = _ARGUMENT.search(check.error)
    if named:
        name = flag_key(named.group(1))
        key = name if name in args else name.removeprefix("no-")
        if key in args:
            return f"{where(key)} = {args[key]!r}: vLLM rejects it: {check.error}"
    return f"server.args: vLLM rejects this configuration: {check.error}"


def _cache_dir() -> Path:
    return cache_root().resolve() / "vllm-args" / f"{vllm_version()}-check{CHECK_REVISION}"


def _cache_path(command: list[str]) -> Path:
    digest = hashlib.sha256(json.dumps(command).encode()).hexdigest()[:24]
    return _cache_dir() / f"{digest}.json"


def unknown_flags(flags: Sequence[str], options: Sequence[str]) -> list[str]:
    """Pure: the flags argparse would not recognise among `options`: neither an option, nor
    (FlexibleArgumentParser) a dotted `--json-arg.key` of one, nor a unique prefix of one
    (argparse's abbreviations)."""
    known = set(options)
    unknown = []
    for flag in flags:
        if not flag.startswith("--"):
            continue  # a value
        name = flag.split("=", 1)[0].replace("_", "-")
        base = name.split(".", 1)[0]
        if name in known or base in known:
            continue
        if sum(option.startswith(name) for option in known) == 1:
            continue
        unknown.append(name)
    return unknown


def check_serve_args(requests: list[tuple[str, list[str]]], python: str = sys.executable
                     ) -> list[ArgsCheck]:
    """Each (model, flags) command line checked by vLLM's parser (cached; one child process
    for all the uncached ones)."""
    results: dict[int, ArgsCheck] = {}
    missing = []
    try:  # the flags this vLLM knows, from any earlier check: an unknown one is refused at once
        options: tuple[str, ...] | None = tuple(json.loads(
            (_cache_dir() / "options.json").read_text()))
    except (OSError, ValueError):
        options = None
    for index, (model, flags) in enumerate(requests):
        path = _cache_path([model, *flags])
        try:
            cached = json.loads(path.read_text())
            results[index] = ArgsCheck(cached["ok"], cached["error"], tuple(cached["options"]))
            continue
        except (OSError, ValueError, KeyError):
            pass
        unknown = unknown_flags(flags, options) if options else []
        if unknown:
            results[index] = ArgsCheck(
                False, f"unrecognized arguments: {' '.join(unknown)}", options or ())
        else:
            missing.append(index)
    if missing:
        payload = json.dumps([{"model": requests[i][0], "args": requests[i][1]}
                              for i in missing])
        env = {**os.environ, "VLLM_LOGGING_LEVEL": "ERROR", "VLLM_NO_USAGE_STATS": "1"}
        workdir = cache_root().resolve()  # not a checkout's root: its vllm_slo/ would shadow
        workdir.mkdir(parents=True, exist_ok=True)
        try:
            done = subprocess.run([python, "-m", "vllm_slo.servers.vllm_cli", CHECK_FLAG],
                                  input=payload, capture_output=True, text=True, env=env,
                                  timeout=CHECK_TIMEOUT_S, cwd=workdir, check=False)
        except (OSError, subprocess.TimeoutExpired) as exc:
            raise ServerConfigError(f"could not check server.args with the installed vLLM: "
                                    f"{exc}") from exc
        line = next((text for text in done.stdout.splitlines()
                     if text.startswith(RESULTS_MARK)), None)
        if line is None:
            tail = "\n".join((done.stderr or done.stdout).splitlines()[-15:])
            raise ServerConfigError(
                f"could not check server.args with the installed vLLM (exit "
                f"{done.returncode}):\n{tail}")
        for index, answer in zip(missing, json.loads(line[len(RESULTS_MARK):]), strict=True):
            results[index] = ArgsCheck(answer["ok"], answer["error"], tuple(answer["options"]))
            path = _cache_path([requests[index][0], *requests[index][1]])
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(json.dumps(answer))
            (path.parent / "options.json").write_text(json.dumps(answer["options"]))
    return [results[i] for i in range(len(requests))]


def flag_source(spec: ServerSpec) -> Callable[[str], str]:
    """Where a flag of `spec.engine_args` was set: `server.args.NAME`, or for a flag only the
    config file holds, `server.config FILE: NAME`."""
    own = {flag_key(str(key)) for key in spec.args}
    from_file = ({flag_key(str(key)) for key in read_server_config(spec.config)}
                 if spec.config is not None else set())

    def where(key: str) -> str:
        if key in from_file and key not in own:
            return f"server.config {spec.config}: {key}"
        return _args_key(key)

    return where


def validate_server_args(specs: Sequence[tuple[str, ServerSpec]], platform: str) -> None:
    """Every launched server's command line (`vllm serve` with the suite's flags and platform
    defaults) checked by the installed vLLM before anything starts; `specs` are (label,
    spec) pairs (a variant's name, or "" for a plain run). Attached servers and a custom
    `server.command` (its own vLLM, its own checks) are skipped, and so is everything when
    vLLM is not installed here (the launch says so). Raises ServerConfigError listing every
    rejection."""
    checked = [(label, spec) for label, spec in specs
               if spec.url is None and spec.command is None]
    if not checked or not vllm_installed():
        return
    requests = []
    for _, spec in checked:
        argv = plan_launch(spec, platform, spec.model, 0).argv
        at = argv.index("serve")
        requests.append((argv[at + 1], list(argv[at + 2:])))
    problems = []
    for (label, spec), check in zip(checked, check_serve_args(requests), strict=True):
        if not check.ok:
            where = f"variant {label}: " if label else ""
            problems.append(where + rejection_message(spec.engine_args, check,
                                                      flag_source(spec)))
    if problems:
        raise ServerConfigError("\n".join(problems) + "\n(checked with the installed vLLM's "
                                "own `vllm serve` parser; nothing was started)")
