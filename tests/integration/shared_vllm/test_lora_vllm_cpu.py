"""A LoRA mix end to end against one real vLLM (CPU build) server that loaded two tiny random
adapters (shared_vllm/conftest.py): each adapter answers a prompt differently from the base
model (so it was applied), `traffic.lora` splits the conversations by weight, each row carries
the name its request was sent to, and summary.json, the SLO verdicts and the terminal report
are per adapter."""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from collections import Counter
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from tests.integration.conftest import requires_vllm, run_cli
from tests.integration.shared_vllm.conftest import LORA_ADAPTERS
from vllm_slo.servers.vllm_server import VllmServer

pytestmark = [pytest.mark.integration, requires_vllm]


def _answer(base_url: str, model: str) -> tuple[int, str]:
    body = json.dumps({"model": model, "max_tokens": 12, "temperature": 0,
                       "messages": [{"role": "user", "content": "the latency of the server"}]})
    request = urllib.request.Request(f"{base_url}/v1/chat/completions", body.encode(),
                                     {"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=60) as response:
            return response.status, json.loads(response.read())["choices"][0]["message"][
                "content"]
    except urllib.error.HTTPError as error:
        return error.code, ""


def test_each_adapter_is_served_and_changes_the_answer(shared_vllm: VllmServer) -> None:
    url = shared_vllm.base_url
    with urllib.request.urlopen(f"{url}/v1/models", timeout=30) as response:
        served = {model["id"] for model in json.loads(response.read())["data"]}
    assert served == {"tiny", *LORA_ADAPTERS}
    answers = {model: _answer(url, model) for model in ("tiny", *LORA_ADAPTERS)}
    assert all(status == 200 and text for status, text in answers.values()), answers
    assert len({text for _, text in answers.values()}) == 3, answers  # greedy, yet different
    assert _answer(url, "tiny") == answers["tiny"]  # deterministic: the difference is the adapter
    assert _answer(url, "not-loaded")[0] == 404  # the model field is what selects it


def test_a_lora_mix_run_reports_each_adapter(shared_vllm: VllmServer, tmp_path: Path) -> None:
    result = run_cli([
        "run", "scenario=chat", f"server.url={shared_vllm.base_url}",
        "traffic.duration=5s", "traffic.warmup=1s", "traffic.chat.turns=2",
        "traffic.chat.output_tokens=16", "traffic.arrival={kind: closed, users: 6}",
        "traffic.lora={base: 2, sql: 1, chat: 1}",
        'slo={ttft: ["p50 < 30s"], by_adapter: {sql: {ttft: ["p50 < 30s"]}, '
        'base: {error_rate: "< 50%"}}}'], tmp_path)
    assert result.run_dir is not None, result.output
    assert result.returncode in (0, 3), result.output  # a 30 s TTFT is never failed here
    rows = pq.read_table(result.run_dir / "samples.parquet").to_pydict()
    assert rows["ok"] and all(rows["ok"]), {e for e in rows["error"] if e}
    names = Counter(rows["adapter"])
    assert set(names) == {"base", *LORA_ADAPTERS}, names
    by_conversation: dict[int, set[str]] = {}
    for conversation, adapter in zip(rows["conversation_id"], rows["adapter"], strict=True):
        by_conversation.setdefault(conversation, set()).add(adapter)
    assert all(len(adapters) == 1 for adapters in by_conversation.values())
    summary = json.loads((result.run_dir / "summary.json").read_text())
    measured = Counter(a for a, phase in zip(rows["adapter"], rows["phase"], strict=True)
                       if phase == "measure")
    assert {name: part["requests"]["measured"] for name, part in summary["by_adapter"].items()
            } == dict(measured)
    # each adapter's rule judged on that adapter's requests only (a few dozen here: its
    # verdict may be INCONCLUSIVE on a busy box, never FAIL against 30 s)
    judged = {slo["adapter"]: slo for slo in summary["slos"] if "adapter" in slo}
    assert list(judged) == ["sql", "base"]
    assert judged["sql"]["observed"]["n"] == measured["sql"]
    assert judged["base"]["observed"]["n"] == measured["base"]  # base's error rate
    assert all(slo["verdict"] != "FAIL" for slo in judged.values()), judged
    launch = summary["scenario"]["traffic"]["lora"]
    assert launch == {"base": 2, "sql": 1, "chat": 1}
    assert "adapter sql:" in result.output and "adapter:sql: ttft p50 < 30s" in result.output


def test_an_adapter_the_server_does_not_serve_is_refused(shared_vllm: VllmServer,
                                                        tmp_path: Path) -> None:
    result = run_cli(["run", "scenario=chat", f"server.url={shared_vllm.base_url}",
                      "traffic.duration=2s", "traffic.warmup=0s",
                      "traffic.lora={base: 1, sql: 1, code: 1}"], tmp_path)
    assert result.returncode == 2, result.output
    assert "does not serve code" in result.output
