"""A wait for a server that is not ready says so while it waits (a GPU start takes minutes,
and an attached URL that nothing answers is waited on up to `ready_timeout`): each word
names how long it has waited, of how long, and the last problem seen."""

from __future__ import annotations

import re

import pytest

from vllm_slo.scenarios.errors import ServerError
from vllm_slo.servers.readiness import wait_until_ready
from vllm_slo.transport.processes import free_loopback_port


def test_a_wait_for_a_silent_port_says_what_it_waits_for_until_it_gives_up() -> None:
    url = f"http://127.0.0.1:{free_loopback_port()}"  # nothing listens: refused at once
    words: list[str] = []
    with pytest.raises(ServerError, match="not ready after 3s: /health answered nothing"):
        wait_until_ready(url, 3.0, poll_s=0.05, on_waiting=words.append, waiting_every_s=0.5)
    assert 2 <= len(words) <= 5, words  # at 0.5, 1.0, ... 2.5 s (fewer if the box stalls)
    for word in words:
        assert re.fullmatch(rf"{re.escape(url)} not ready after \ds of 3s: "
                            r"/health answered nothing", word), word


def test_no_word_before_the_first_interval() -> None:
    url = f"http://127.0.0.1:{free_loopback_port()}"
    words: list[str] = []
    with pytest.raises(ServerError):
        wait_until_ready(url, 0.3, poll_s=0.05, on_waiting=words.append, waiting_every_s=30.0)
    assert words == []
