"""Importing any module of `scenarios`, `servers` or `reports` (the installed
`vllm_slo.<package>` modules, subpackages included) never loads locust, gevent, vLLM, torch or
transformers: Locust monkey-patches the standard library on import and vLLM runs as
`vllm serve`. Checked in a fresh interpreter, so what was imported is what the import did.
The static direction of imports between packages is tests/unit/test_layers.py."""

from __future__ import annotations

import subprocess
import sys

import pytest

from tests.integration.conftest import cli_env

pytestmark = pytest.mark.integration
FORBIDDEN = ("locust", "gevent", "vllm", "torch", "transformers")


def modules_of(package: str) -> list[str]:
    """Every module of an installed package, walked through the import system."""
    code = ("import importlib, pkgutil\n"
            f"package = importlib.import_module({package!r})\n"
            "for m in pkgutil.walk_packages(package.__path__, package.__name__ + '.'):\n"
            "    print(m.name)\n")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                            env=cli_env(), timeout=120, check=True)
    return [name for name in result.stdout.split() if not name.endswith("__main__")]


@pytest.mark.parametrize("package", ["vllm_slo.scenarios", "vllm_slo.servers",
                                     "vllm_slo.reports"])
def test_package_never_imports_locust_gevent_or_vllm(package: str) -> None:
    modules = modules_of(package)
    assert len(modules) >= 4, modules
    code = (
        "import importlib, sys\n"
        f"for name in {modules!r}: importlib.import_module(name)\n"
        f"bad = sorted(m for m in sys.modules if m.split('.')[0] in {FORBIDDEN!r})\n"
        "print(' '.join(bad))\n")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                            env=cli_env(), timeout=120)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "", f"{package} imported: {result.stdout}"
