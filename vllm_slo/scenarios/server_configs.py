"""Named server configs: `servers/<name>.yaml`, in vLLM's own `--config` YAML format
(`vllm serve` flag names without dashes as keys: `max-num-batched-tokens: 8192`), so each also
runs as plain `vllm serve MODEL --config servers/<name>.yaml`. A scenario references
one by name or by path (`server: {config: chunked-prefill-8k}`); its own `server.args` override
the file's keys.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import yaml

from vllm_slo.resources import user_folder

# the named vLLM configs: <repo>/servers/NAME.yaml, installed vllm_slo/_data/servers
CONFIG_DIR = user_folder("servers")
RESERVED_KEYS = ("host", "port", "served-model-name", "model")  # the suite sets these


def known_configs() -> list[str]:
    return sorted(path.stem for path in CONFIG_DIR.glob("*.yaml"))


def config_path(reference: str) -> Path:
    """A config's file: a name in CONFIG_DIR, or a path (it has a '/' or ends in .yaml),
    made absolute from the working folder."""
    if "/" in reference or reference.endswith((".yaml", ".yml")):
        return Path(reference).expanduser().resolve()
    return CONFIG_DIR / f"{reference}.yaml"


def read_server_config(reference: str) -> dict[str, Any]:
    """The flags of a named config or config file; ValueError (naming the file, the key and
    what is allowed) for a missing file, YAML that is not a mapping of flag names to values,
    or a key the suite sets itself."""
    path = config_path(reference)
    if not path.is_file():
        known = ", ".join(known_configs()) or "none"
        raise ValueError(f"no server config {reference!r} ({path} does not exist); named "
                         f"configs: {known}, or give a path to a vLLM --config YAML file")
    try:
        document = yaml.safe_load(path.read_text())
    except yaml.YAMLError as exc:
        raise ValueError(f"{path}: not valid YAML: {exc}") from None
    if document is None:
        return {}
    if not isinstance(document, dict):
        raise ValueError(f"{path}: expected a mapping of vllm serve flag names to values "
                         f"(vLLM's --config format), got {type(document).__name__}")
    flags: dict[str, Any] = {}
    for key, value in document.items():
        name = str(key).replace("_", "-")
        if name in RESERVED_KEYS:
            raise ValueError(f"{path}: {key!r} is set by the suite (server.model, "
                             f"server.served_model_name; host and port are its own)")
        flags[name] = value
    return flags


def engine_args_to_argv(args: dict[str, Any]) -> list[str]:
    """{'max-model-len': 2048, 'enable-chunked-prefill': False} ->
    ['--max-model-len', '2048', '--no-enable-chunked-prefill'] (None drops a flag)."""
    argv: list[str] = []
    for name, value in args.items():
        flag = f"--{name}"
        if value is None:
            continue
        if value is True:
            argv.append(flag)
        elif value is False:
            argv.append(f"--no-{name}")
        elif isinstance(value, list):
            argv.extend([flag, *(str(item) for item in value)])
        elif isinstance(value, dict):
            argv.extend([flag, json.dumps(value, separators=(",", ":"))])
        else:
            argv.extend([flag, str(value)])
    return argv
