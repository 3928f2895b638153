"""`server:` — how to get the server under test: launch `vllm serve` with these flags (verbatim,
`server.args`, over a named config file's) or attach to a running one by URL; where it runs
(`devices`, `core_split`) and the LoRA adapters it loads."""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Annotated, Any, Literal, TypeVar
from urllib.parse import urlsplit, urlunsplit

from pydantic import AfterValidator, Field, field_validator, model_validator

from vllm_slo.scenarios.lora import LORA_FLAGS, LoraSpec
from vllm_slo.scenarios.model_base import Frozen, Seconds
from vllm_slo.scenarios.server_configs import CONFIG_DIR, config_path, read_server_config

# what server.devices sets: GPUs on a GPU, the OpenMP threads' cores on vLLM's CPU build
DEVICE_ENV_VARS = ("CUDA_VISIBLE_DEVICES", "VLLM_CPU_OMP_THREADS_BIND")
EngineArgValue = str | int | float | bool | None | list[str | int | float] | dict[str, Any]
_FlagArgs = TypeVar("_FlagArgs", bound=Mapping[str, object])  # keyed by vLLM flag names
# `vllm serve` flags the suite sets on a launched server, and what to write instead
_OWN_ADDRESS = ("the suite starts the server on 127.0.0.1 at a free port of its own; to "
                "measure a server at an address of your choosing, start it yourself and "
                "attach with server.url")
SUITE_FLAG_HINTS = {"host": _OWN_ADDRESS, "port": _OWN_ADDRESS,
                    "model": "use server.model",
                    "served-model-name": "use server.served_model_name"}
# an OpenAI base URL (`.../v1`) or an endpoint's URL where the server's root belongs
_API_PATH = re.compile(r"/v1(/.*)?$")


def suite_flag_problem(key: str) -> str | None:
    """Pure: why `server.args.<key>` may not be set (a flag the suite sets itself), with
    what to write instead; None for any other flag."""
    name = key.replace("_", "-")
    hint = SUITE_FLAG_HINTS.get(name)
    return None if hint is None else f"server.args.{key}: set by the suite; {hint}"


def root_url_problem(url: str) -> str | None:
    """Pure: why `url` is not a server's root — it ends in `/v1` (OpenAI's base URL) or names
    an endpoint (`/v1/chat/completions`): the suite adds `/health`, `/v1/models`,
    `/v1/chat/completions` itself, so every request would miss. None for a root URL."""
    parts = urlsplit(url)
    found = _API_PATH.search(parts.path.rstrip("/"))
    if found is None:
        return None
    root = urlunsplit(parts._replace(path=parts.path[:found.start()], query="", fragment=""))
    return (f"url {url!r} ends in {found.group(0)!r}: give the server's root, {root!r} (the "
            "suite adds /health, /v1/models and /v1/chat/completions itself)")


def check_flag_name(args: _FlagArgs) -> _FlagArgs:
    """Keys of `vllm serve` flags are written without dashes (`max-model-len`)."""
    for key in args:
        if key.startswith("-") or not key.replace("-", "").replace("_", "").isalnum():
            raise ValueError(
                f"engine arg names are vLLM flag names without leading dashes, "
                f"e.g. 'max-model-len'; got {key!r}"
            )
    return args


class ServerSpec(Frozen):
    """How to get a server: launch `vllm serve` (default) or attach to a running one by URL."""

    model: str = Field("tiny", description="'tiny' (generated locally), a local path or model id")
    url: str | None = Field(None, description="attach mode: target this running server")
    served_model_name: str | None = None
    args: Annotated[dict[str, EngineArgValue], AfterValidator(check_flag_name)] = Field(
        default_factory=dict, description="`vllm serve` flags, verbatim (true/false -> --x/--no-x)"
    )
    config: str | None = Field(
        None, description="a named server config (servers/NAME.yaml) or a path to a "
        "YAML file in vLLM's --config format; `args` override its keys")
    env: dict[str, str] = Field(default_factory=dict)
    command: list[str] | None = Field(
        None,
        description="launcher prefix replacing `python -m vllm_slo.servers.vllm_cli`, e.g. [vllm]"
    )
    platform: Literal["auto", "cpu", "gpu"] = "auto"
    ready_timeout_s: Seconds = Field(600.0, alias="ready_timeout", gt=0)
    api_key_env: str | None = Field(None, description="name of the env var holding the API key")
    instance: str | None = Field(
        None, description="a label for the server instance (attach mode: which running server, "
                          "e.g. on-instance-1); recorded per trial in provenance.json")
    devices: tuple[Annotated[int, Field(ge=0)], ...] | None = Field(
        None, min_length=1,
        description="where the launched server runs: GPU indices (CUDA_VISIBLE_DEVICES) on a "
                    "GPU, CPU core ids on vLLM's CPU build (its whole process group confined "
                    "there, its OpenMP threads bound: VLLM_CPU_OMP_THREADS_BIND)")
    core_split: Literal["auto", "off"] = Field(
        "auto", description="vLLM's CPU build on a host of at most 4 cores: auto gives the "
                            "server the first half of the cores and Locust the rest; off pins "
                            "nothing")
    lora: LoraSpec | None = Field(
        None, description="LoRA adapters the launched server loads (--enable-lora "
                          "--lora-modules ...); traffic.lora splits requests across them")

    @model_validator(mode="after")
    def _lora_flags_in_one_place(self) -> ServerSpec:
        if self.lora is None:
            return self
        if self.url is not None:
            raise ValueError("server.lora loads adapters into a launched server; an attached "
                             "one (server.url) serves its own: name them in traffic.lora")
        named = [flag for flag in LORA_FLAGS if flag in self.args]
        if named:
            raise ValueError(f"server.lora sets {', '.join(named)}: remove it from "
                             "server.args (or drop server.lora)")
        return self

    @field_validator("core_split", mode="before")
    @classmethod
    def _yaml_off_is_off(cls, value: object) -> object:
        """YAML reads a bare `off` as false (and `on` as true)."""
        return {False: "off", True: "auto"}.get(value, value) if isinstance(value, bool) \
            else value

    @model_validator(mode="after")
    def _devices_are_placeable(self) -> ServerSpec:
        if self.devices is None:
            return self
        if len(set(self.devices)) != len(self.devices):
            raise ValueError(f"server.devices lists a device twice: {list(self.devices)}")
        if self.url is not None:
            raise ValueError("server.devices places a launched server; attach mode "
                             "(server.url) targets one that already runs")
        named = sorted(set(self.env) & set(DEVICE_ENV_VARS))
        if named:
            raise ValueError(f"server.devices sets {', '.join(named)}: remove it from "
                             "server.env (or drop server.devices)")
        return self

    @field_validator("config")
    @classmethod
    def _config_is_readable(cls, reference: str | None) -> str | None:
        """A config file must exist and hold flags; a path is kept absolute (the run folder's
        copy of the scenario must find it from anywhere)."""
        if reference is None:
            return None
        check_flag_name(read_server_config(reference))
        path = config_path(reference)
        return reference if path.parent == CONFIG_DIR else str(path)

    @property
    def engine_args(self) -> dict[str, EngineArgValue]:
        """The `vllm serve` flags: the config file's, overridden by `args`."""
        file_flags = read_server_config(self.config) if self.config is not None else {}
        return {**file_flags, **self.args}

    @model_validator(mode="after")
    def _url_is_http(self) -> ServerSpec:
        if self.url is not None and not self.url.startswith(("http://", "https://")):
            raise ValueError(f"url must start with http:// or https://, got {self.url!r}")
        problem = None if self.url is None else root_url_problem(self.url)
        if problem is not None:
            raise ValueError(problem)
        return self

