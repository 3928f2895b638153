"""The one lookup for the files users read and edit, which live in the repository's top-level
folders, not in the package:

    scenarios/   the shipped scenario YAMLs            (vllm-slo run scenario=NAME)
    servers/     the named vLLM configs (vLLM's --config format: server.config=NAME)
    loadtests/   the locustfiles Locust runs, and their data (the ShareGPT sample)
    reports/     the report templates, styles, vendored Plotly and the JSON schemas

In a checkout (the package's parent holds pyproject.toml) they are read where they are, so an
edit shows at once; an installed wheel carries copies as package data under
`vllm_slo/_data/<folder>` (pyproject.toml maps each folder there).
"""

from __future__ import annotations

from pathlib import Path
from typing import Literal

Folder = Literal["scenarios", "servers", "loadtests", "reports"]
PACKAGE_DIR = Path(__file__).resolve().parent
INSTALLED_DATA_DIR = PACKAGE_DIR / "_data"


def checkout_root() -> Path | None:
    """The repository the package runs from, or None when it is installed."""
    root = PACKAGE_DIR.parent
    return root if (root / "pyproject.toml").is_file() and (root / "scenarios").is_dir() \
        else None


def user_folder(name: Folder) -> Path:
    """Where the folder `name` is: the checkout's top-level one, else the installed copy."""
    root = checkout_root()
    return root / name if root is not None else INSTALLED_DATA_DIR / name
