"""The per-process reader pump (loadtests/reader_pump.py) on gevent's cooperative sockets, in
this process: recorded vLLM responses written in pieces by greenlets come out exactly as the
blocking reader gives them, each event stamped after the write that completed it; many
streams at once; the watchdog and a closed connection."""

from __future__ import annotations

import time
from pathlib import Path

import gevent
import gevent.socket
import pytest

from vllm_slo.loadtests.reader_pump import pump
from vllm_slo.transport.http_stream import (
    HttpStreamClient,
    ResponseParser,
    _NothingReceived,
)

DATA = Path(__file__).parent / "data"


def pieces_of(raw: bytes, size: int) -> list[bytes]:
    return [raw[i : i + size] for i in range(0, len(raw), size)]


def write_slowly(sock, pieces: list[bytes], gap_s: float, written_at: list[float],
                 close: bool = False) -> None:
    for piece in pieces:
        gevent.sleep(gap_s)
        written_at.append(time.perf_counter())
        sock.sendall(piece)
    if close:
        sock.close()


def reference(raw: bytes) -> list[bytes]:
    parser = ResponseParser()
    parser.feed(raw, 0.0)
    return [payload for _, payload in parser.response.events]


def test_a_recorded_stream_read_by_the_pump_matches_the_blocking_reader() -> None:
    raw = (DATA / "vllm_chat_stream.bin").read_bytes()
    ours, theirs = gevent.socket.socketpair()
    written_at: list[float] = []
    writer = gevent.spawn(write_slowly, theirs, pieces_of(raw, 97), 0.002, written_at)
    seen: list[tuple[float, bytes]] = []
    parser = ResponseParser(lambda t, payload: seen.append((t, payload)))
    pump().read(ours, parser)
    writer.join()
    assert parser.done and parser.response.status == 200
    assert [payload for _, payload in seen] == reference(raw)
    assert parser.response.events == []  # handed over, not collected
    # every stamp is taken after the write it belongs to, and soon after (an idle process)
    stamps = [t for t, _ in seen]
    assert stamps == sorted(stamps) and stamps[0] > written_at[0]
    assert parser.response.ended_at_s - written_at[-1] < 0.05
    assert pump().reading == 0
    ours.close()
    theirs.close()


def test_many_streams_at_once() -> None:
    raws = [(DATA / name).read_bytes() for name in
            ("vllm_chat_stream.bin", "vllm_completions_stream.bin", "vllm_too_long_400.bin")]
    pairs = [gevent.socket.socketpair() for _ in range(60)]
    parsers = [ResponseParser() for _ in pairs]
    writers = [gevent.spawn(write_slowly, theirs, pieces_of(raws[k % 3], 40 + k), 0.001, [])
               for k, (_ours, theirs) in enumerate(pairs)]
    readers = [gevent.spawn(pump().read, ours, parser)
               for (ours, _theirs), parser in zip(pairs, parsers, strict=True)]
    gevent.joinall(readers + writers, raise_error=True, timeout=30)
    for k, parser in enumerate(parsers):
        assert parser.done
        if k % 3 == 2:
            assert parser.response.status == 400
            assert b"maximum context length" in parser.response.body
        else:
            assert [p for _, p in parser.response.events] == reference(raws[k % 3])
    assert pump().reading == 0
    for ours, theirs in pairs:
        ours.close()
        theirs.close()


def test_the_watchdog_takes_the_socket_out_of_the_pump() -> None:
    raw = (DATA / "vllm_chat_stream.bin").read_bytes()
    ours, theirs = gevent.socket.socketpair()
    theirs.sendall(raw[: len(raw) // 2])  # then nothing: a stalled server
    seen: list[bytes] = []
    parser = ResponseParser(lambda _t, payload: seen.append(payload))
    with pytest.raises(TimeoutError, match="watchdog"), gevent.Timeout(0.2, TimeoutError(
            "watchdog")):
        pump().read(ours, parser)
    assert pump().reading == 0 and seen and parser.response.status == 200
    theirs.sendall(raw[len(raw) // 2 :])  # a late byte wakes nothing (unregistered)
    gevent.sleep(0.01)
    assert not parser.done
    ours.close()
    theirs.close()


def test_a_connection_closed_before_a_byte_raises_as_the_blocking_reader_does() -> None:
    ours, theirs = gevent.socket.socketpair()
    theirs.close()
    with pytest.raises(_NothingReceived):
        pump().read(ours, ResponseParser())
    assert pump().reading == 0
    ours.close()


def test_the_client_reads_through_the_pump_and_keeps_its_connection() -> None:
    raw = (DATA / "vllm_completions_stream.bin").read_bytes()
    raw = raw.replace(b"connection: close\r\n", b"")  # keep-alive
    ours, theirs = gevent.socket.socketpair()
    client = HttpStreamClient("http://127.0.0.1:1", reader=pump().read)
    client._sock = ours
    for _ in range(2):  # two requests on one connection
        writer = gevent.spawn(write_slowly, theirs, pieces_of(raw, 300), 0.001, [])
        response = client.request("POST", "/v1/completions", b"{}")
        writer.join()
        assert response.status == 200 and response.events[-1][1] == b"[DONE]"
        assert client._sock is ours
        assert theirs.recv(65536).startswith(b"POST /v1/completions HTTP/1.1\r\n")
    client.close()
    theirs.close()


def test_a_blocking_socket_is_refused() -> None:
    import socket

    ours, theirs = socket.socketpair()
    with pytest.raises(TypeError, match="cooperative"):
        pump().read(ours, ResponseParser())
    ours.close()
    theirs.close()


@pytest.mark.parametrize(("repoll_every", "max_reads", "within"),
                         [(32, 512, True), (10**9, 512, False), (32, 40, False)])
def test_bytes_that_arrive_while_a_wave_is_parsed_are_stamped_within_it(
        repoll_every: int, max_reads: int, within: bool) -> None:
    """40 responses are ready at one wakeup; the first one parsed makes a 41st arrive. With
    the re-poll (every 32 parses) the 41st is read and stamped before the wave's first reads
    are all parsed; without it, only at the next wakeup, after them (what the re-poll
    removes); nor when the wakeup has queued its most reads already (40 here: the callback
    must return to the hub at saturation)."""
    raw = (DATA / "vllm_completions_stream.bin").read_bytes()
    wave = [gevent.socket.socketpair() for _ in range(40)]
    late_ours, late_theirs = gevent.socket.socketpair()
    first_parsed_at: dict[int, float] = {}  # per wave stream: its first payload's parse
    late_stamps: list[float] = []

    def on_event(k: int):
        def handed_over(t: float, payload: bytes) -> None:
            if k == 0 and not first_parsed_at:
                late_theirs._sock.send(raw)  # lands while the rest of the wave is parsed
            first_parsed_at.setdefault(k, time.perf_counter())
        return handed_over

    parsers = [ResponseParser(on_event(k)) for k in range(len(wave))]
    late = ResponseParser(lambda t, payload: late_stamps.append(t))
    the_pump = pump()
    before = the_pump.repoll_every, the_pump.repoll_max_reads
    the_pump.repoll_every, the_pump.repoll_max_reads = repoll_every, max_reads
    try:
        readers = [gevent.spawn(the_pump.read, ours, parser)
                   for (ours, _theirs), parser in zip(wave, parsers, strict=True)]
        readers.append(gevent.spawn(the_pump.read, late_ours, late))
        while the_pump.reading < len(readers):  # every socket in the pump, none readable
            gevent.sleep(0)
        for _ours, theirs in wave:  # all written without a switch: one wakeup sees them all
            theirs._sock.send(raw)
        gevent.joinall(readers, raise_error=True, timeout=30)
    finally:
        the_pump.repoll_every, the_pump.repoll_max_reads = before
    assert all(parser.done for parser in parsers) and late.done
    assert [p for _, p in late.response.events] == [] and late_stamps
    wave_parsed_at = max(first_parsed_at.values())  # the first wakeup's last parse
    if within:
        assert late_stamps[0] < wave_parsed_at
    else:
        assert late_stamps[0] > wave_parsed_at
    for ours, theirs in [*wave, (late_ours, late_theirs)]:
        ours.close()
        theirs.close()
