"""Redaction of the secrets a command line or a server log carries in forms the key rule does
not see: YAML flow mappings in overrides, and known values echoed by the server."""

from __future__ import annotations

from vllm_slo.loadtests.tokens import ServerTokenCounter
from vllm_slo.redaction import redact_secrets, redact_values, spec_secret_values


def test_flow_mapping_overrides_lose_their_secret_values_only() -> None:
    argv = ["vllm-slo", "run", "server.args={api-key: s3cr3t-a, max-num-batched-tokens: 2048}",
            "server.env={HF_TOKEN: s3cr3t-b, VLLM_LOGGING_LEVEL: DEBUG}",
            "traffic.arrival={kind: closed, users: 4}"]
    assert redact_secrets(argv) == [
        "vllm-slo", "run", "server.args={api-key: ***, max-num-batched-tokens: 2048}",
        "server.env={HF_TOKEN: ***, VLLM_LOGGING_LEVEL: DEBUG}",
        "traffic.arrival={kind: closed, users: 4}"]


def test_the_scenario_secret_values_are_found_and_scrubbed() -> None:
    found = spec_secret_values({"api-key": "k-1", "max-num-seqs": "8", "token-budget": "64"},
                               {"HF_TOKEN": "t-2", "HOME": "/root"},
                               "http://user:p-3@127.0.0.1:8000", "a-4")
    assert sorted(found) == ["a-4", "k-1", "p-3", "t-2"]
    log = "$ vllm serve m --api-key k-1\nnon-default args: {'api_key': 'k-1'} HF_TOKEN=t-2\n"
    assert redact_values(log, found) == ("$ vllm serve m --api-key ***\nnon-default args: "
                                         "{'api_key': '***'} HF_TOKEN=***\n")


def test_the_tokenize_counter_names_its_url_without_userinfo() -> None:
    counter = ServerTokenCounter("http://user:p-3@127.0.0.1:9/v1", "m")
    assert "p-3" not in counter.name and "127.0.0.1:9" in counter.name
