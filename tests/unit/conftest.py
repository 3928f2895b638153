"""Shared unit-test fixtures."""

from __future__ import annotations

import pytest

from vllm_slo.loadtests.tokens import TokenCounter, local_token_counter
from vllm_slo.servers.tiny_model import train_tokenizer


@pytest.fixture(scope="session")
def tiny_tokenizer_file(tmp_path_factory: pytest.TempPathFactory):
    """The tiny model's real tokenizer, trained once per session (~4 s, no torch)."""
    file = tmp_path_factory.getbasetemp() / "tiny-tokenizer.json"
    if not file.is_file():
        train_tokenizer().save(str(file))
    return file


@pytest.fixture(scope="session")
def tiny_counter(tiny_tokenizer_file) -> TokenCounter:
    return local_token_counter(tiny_tokenizer_file)
