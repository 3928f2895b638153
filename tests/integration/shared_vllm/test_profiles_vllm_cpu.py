"""Each traffic profile end to end against one real vLLM (CPU build) server, attached by URL:
the requests sent match the plan and the plan matches the configuration (token lengths by the
model's own tokenizer, here through vLLM's /tokenize), and the same seed sends the same bytes."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest

from tests.integration.conftest import requires_vllm, run_cli
from tests.integration.shared_vllm.conftest import MAX_MODEL_LEN
from vllm_slo.servers.vllm_server import VllmServer

pytestmark = [pytest.mark.integration, requires_vllm]

TEMPLATE_SLACK_TOKENS = 16  # chat template tokens per message (role tags, bos/eos)


@pytest.fixture(scope="module")
def server(shared_vllm: VllmServer) -> str:
    return shared_vllm.base_url


def attach(server: str, scenario: str, tmp_path: Path, *extra: str):
    # a key is given once (a repeated override is refused): the test's own values win
    given = {item.split("=", 1)[0] for item in extra}
    defaults = [d for d in ("traffic.duration=6s", "traffic.warmup=1s")
                if d.split("=", 1)[0] not in given]
    result = run_cli(["run", f"scenario={scenario}", f"server.url={server}", *defaults,
                      *extra], tmp_path)
    assert result.run_dir is not None, result.output
    return result


def rows(result) -> dict[str, list]:
    return pq.read_table(result.run_dir / "samples.parquet").to_pydict()


def test_long_doc(server: str, tmp_path: Path) -> None:
    result = attach(server, "long-doc", tmp_path, "traffic.long-doc.output_tokens=32",
                    "traffic.arrival.rate=1")
    assert result.returncode in (0, 1, 3), result.output
    table = rows(result)
    assert table["ok"] and all(table["ok"]), {e for e in table["error"] if e}
    planned = np.asarray(table["prompt_tokens_planned"])
    served = np.asarray(table["prompt_tokens"])
    assert np.all(served >= planned)
    assert np.all(served <= planned + 2 * TEMPLATE_SLACK_TOKENS)  # system-less: 1 message
    # documents between min_doc_tokens and max-model-len - output - 64, plus the instruction
    assert planned.min() >= 2000 and served.max() + 32 <= MAX_MODEL_LEN
    assert set(table["output_tokens"]) == {32}
    summary = result.json("summary.json")
    assert summary["traffic"]["prefix_cache_reset"] == "reset"
    assert summary["traffic"]["plan"]["tokenizer"].startswith("server /tokenize")
    assert summary["traffic"]["intended_rate_per_s"] == 1


def test_sharegpt_replays_all_turns_with_recorded_lengths(server: str, tmp_path: Path) -> None:
    result = attach(server, "sharegpt", tmp_path, "traffic.arrival.rate=4")
    table = rows(result)
    assert all(table["ok"]), {e for e in table["error"] if e}
    assert max(table["turn"]) >= 1  # later turns carry their real history
    assert len(set(table["max_tokens"])) > 5  # output lengths from the recorded answers
    assert table["output_tokens"] == table["max_tokens"]  # ignore_eos: exact lengths
    plan = result.json("summary.json")["traffic"]["plan"]
    assert sum(plan["filtered"].values()) > 0  # the shipped sample holds filtered entries
    provenance = result.json("provenance.json")
    assert provenance["plan"]["requests"] >= len(table["request_id"])


def test_same_seed_sends_the_same_bytes(server: str, tmp_path: Path) -> None:
    args = ("traffic.chat.turns=2", "traffic.duration=2s", "traffic.warmup=0s")
    first = attach(server, "chat", tmp_path / "a", *args)
    second = attach(server, "chat", tmp_path / "b", *args)
    third = attach(server, "chat", tmp_path / "c", *args, "traffic.seed=8")
    plans = [pq.read_table(r.run_dir / "requests.parquet") for r in (first, second, third)]
    columns = [c for c in plans[0].column_names if c != "index"]
    assert plans[0].select(columns).equals(plans[1].select(columns))
    assert not plans[0].select(columns).equals(plans[2].select(columns))
    hashes = [r.json("provenance.json")["plan"]["sha256"] for r in (first, second, third)]
    assert hashes[0] == hashes[1] != hashes[2]


def test_mix_sends_both_parts_and_reports_each(server: str, tmp_path: Path) -> None:
    """chat-long-doc-mix against real vLLM: every row carries its part, each part's requests
    have that part's lengths, and summary.json summarises the parts on their own rows."""
    result = attach(server, "chat-long-doc-mix", tmp_path, "traffic.arrival.rate=3",
                    "traffic.mix={chat: 1, long-doc: 1}")
    assert result.returncode in (0, 1, 3), result.output
    table = rows(result)
    assert table["ok"] and all(table["ok"]), {e for e in table["error"] if e}
    parts = np.asarray(table["profile"])
    planned = np.asarray(table["prompt_tokens_planned"])
    outputs = np.asarray(table["output_tokens"])
    assert set(parts) == {"chat", "long-doc"}
    assert planned[parts == "long-doc"].min() >= 1500
    assert planned[parts == "chat"].max() < 1500
    assert set(outputs[parts == "chat"]) == {32} and set(outputs[parts == "long-doc"]) == {64}
    summary = result.json("summary.json")
    measured = np.asarray(table["phase"]) == "measure"
    for part in ("chat", "long-doc"):
        entry = summary["by_profile"][part]
        assert entry["requests"]["measured"] == int(np.sum(measured & (parts == part)))
    assert sum(e["requests"]["measured"] for e in summary["by_profile"].values()) == \
        summary["requests"]["measured"]
    assert "By profile" in (result.run_dir / "report.html").read_text()
    # slo.by_profile: long-doc's TTFT rule was judged on the long-doc requests alone
    ok_measured = measured & np.asarray(table["ok"], dtype=bool)
    judged = {slo["profile"]: slo for slo in summary["slos"] if slo["profile"]}
    assert sorted(judged) == ["chat", "long-doc"]
    assert judged["long-doc"]["observed"]["n"] == int(np.sum(ok_measured & (parts == "long-doc")))
    assert "long-doc: ttft p90 < 8s" in result.output
