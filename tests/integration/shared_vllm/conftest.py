"""One real vLLM (CPU build) server for the tests of this package, which attach to it by URL
(each traffic profile, `vllm bench serve` and its import, a LoRA mix): one start instead of one per
module (~35 s each on a 2-core CI box). Package-scoped: it stops when this package's tests
are done, before the rest of the integration tier runs."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from vllm_slo.scenarios.server_spec import ServerSpec
from vllm_slo.servers.vllm_server import VllmServer, launch_vllm

MAX_MODEL_LEN = 4096
# two tiny random LoRA adapters for the LoRA-mix test (test_lora_vllm_cpu.py). Measured on
# the 2-core box, starts alternated: ready after 40.7/31.1/26.1 s without, 31.6/31.1/30.2 s
# with them (no difference above the noise), plus 2.5 s once to build both on a fresh cache
LORA_ADAPTERS = ("sql", "chat")


# a reasoning parser that thinks only when a request asks (enable_thinking) and parses every
# other request as plain content, so the other tests here see no change
# (tests/support/think_toggle_reasoning.py; test_reasoning_vllm_cpu.py)
THINK_PLUGIN = Path(__file__).resolve().parents[2] / "support" / "think_toggle_reasoning.py"
REASONING_ARGS = {"reasoning-parser-plugin": str(THINK_PLUGIN),
                  "reasoning-parser": "vllm_slo_think_toggle"}


@pytest.fixture(scope="package")
def shared_vllm(tmp_path_factory: pytest.TempPathFactory) -> Iterator[VllmServer]:
    spec = ServerSpec.model_validate({
        "args": {"max-model-len": MAX_MODEL_LEN, "max-num-batched-tokens": 2048,
                 "block-size": 128, **REASONING_ARGS},
        "lora": {"adapters": {name: "tiny" for name in LORA_ADAPTERS}}})
    log = tmp_path_factory.mktemp("shared-server") / "server.log"
    with launch_vllm(spec, "cpu", log, {"VLLM_SERVER_DEV_MODE": "1"}) as vllm:
        yield vllm
