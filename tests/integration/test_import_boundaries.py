"""reports/, scenarios/ and servers/ never import locust, gevent or vllm (Locust monkey-patches
the standard library on import; vLLM runs as `vllm serve`). Checked in a fresh interpreter."""

from __future__ import annotations

import pkgutil
import subprocess
import sys

import pytest

from tests.integration.conftest import REPO, cli_env

pytestmark = pytest.mark.integration
FORBIDDEN = ("locust", "gevent", "vllm", "torch", "transformers")


def modules_of(package: str) -> list[str]:
    return [f"{package}.{m.name}" for m in pkgutil.iter_modules([str(REPO / package)])
            if m.name != "__main__"]


@pytest.mark.parametrize("package", ["scenarios", "servers", "reports"])
def test_package_never_imports_locust_gevent_or_vllm(package: str) -> None:
    modules = modules_of(package)
    assert modules
    code = (
        "import importlib, sys\n"
        f"for name in {modules!r}: importlib.import_module(name)\n"
        f"bad = sorted(m for m in sys.modules if m.split('.')[0] in {FORBIDDEN!r})\n"
        "print(' '.join(bad))\n")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                            env=cli_env(), cwd=REPO, timeout=120)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "", f"{package} imported: {result.stdout}"


def test_only_locustfiles_import_locust() -> None:
    offenders = [path.relative_to(REPO) for package in ("scenarios", "servers", "reports",
                                                       "loadtests")
                 for path in (REPO / package).glob("*.py")
                 if not path.name.startswith("locustfile")
                 and any(line.lstrip().startswith(("import locust", "from locust",
                                                   "import gevent", "from gevent"))
                         for line in path.read_text().splitlines())]
    assert offenders == []
