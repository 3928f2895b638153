"""One reader per Locust process for every streamed response (issue 14: the load generator must
never be the bottleneck).

Reading each user's socket in its own greenlet costs, for every ~250-byte SSE chunk, a recv
that fails with EAGAIN, a libev watcher start and stop, two greenlet switches and the real
recv: gevent's socket machinery, not our parsing, filled the core. Here the process has one
epoll object of its own (the unpatched one: Locust's monkey-patching removes `select.epoll`)
holding every socket with a response in flight, and one libev io watcher on *that*
descriptor. Whenever it is readable, the hub calls `_drain`: `epoll.poll(0)` returns every
ready socket at once and, in one tight loop without a greenlet switch, each gets a raw
non-blocking `recv`, a `perf_counter()` stamp right after it returned, and its request's
`ResponseParser` fed (vllm_slo/transport/http_stream.py: the same state machine the blocking reader
drives), which hands each SSE payload to the request's `on_event` callback. When a response
ends (complete, closed, or a read/parse error), its socket leaves the epoll set and the
user's greenlet is woken.

Why a hub callback rather than a pump greenlet waiting on the descriptor (the first version):
the greenlet paid a Waiter, a watcher start/stop and two switches per wakeup, and at 256
streams it woke for 1.1 ready sockets on average: per chunk again (measured: reads/wakeups
258k/233k; as a callback 1.6 sockets per wakeup and less CPU per event).

The users keep everything else: connecting, sending (`HttpStreamClient` with
`reader=pump().read`), retrying a stale keep-alive connection, and the per-request watchdog:
a `gevent.Timeout` (or a kill) raised while the user waits unregisters its socket here, and the
client closes it and returns the response so far with the error.

The raw socket is the `_sock` that gevent's cooperative socket wraps (a real, non-blocking
`_socket.socket`); `read` refuses anything else (a blocking socket would stall every stream
of the process).
"""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Callable
from typing import TYPE_CHECKING

from gevent import monkey
from gevent.event import Event
from gevent.hub import get_hub

from vllm_slo.transport.http_stream import RECV_BYTES, ResponseParser

if TYPE_CHECKING:
    import socket

REPOLL_EVERY = 32  # parses of one wakeup between two polls for what arrived meanwhile
# re-polls stop once a wakeup has queued this many reads: at saturation, chunks arrive as fast
# as they are parsed and one callback would otherwise never return, starving every greenlet
# (users could not send, watchdogs and timers could not fire) until the streams ran dry
REPOLL_MAX_READS = 512
_epoll = monkey.get_original("select", "epoll")
_EPOLLIN = monkey.get_original("select", "EPOLLIN")


class _Reading:
    """One response being read by the pump."""

    __slots__ = ("error", "fd", "finished", "parser", "recv")

    def __init__(self, fd: int, recv: Callable[[int], bytes], parser: ResponseParser) -> None:
        self.fd = fd
        self.recv = recv
        self.parser = parser
        self.finished = Event()
        self.error: BaseException | None = None


class ReaderPump:
    """The pump of one process (see the module docstring); `pump()` returns it."""

    def __init__(self) -> None:
        self._epoll = _epoll()
        self._readings: dict[int, _Reading] = {}
        self._hub = get_hub()
        # the pump's one watcher, on the epoll descriptor: started while responses are being
        # read (an idle pump must not keep a finished process alive), its callback `_drain`
        self._watcher = self._hub.loop.io(self._epoll.fileno(), 1)
        self.wakeups = 0  # times the pump woke (ready sockets per wakeup = reads / wakeups)
        self.reads = 0
        # parses between two polls within a wakeup (VLLM_SLO_PUMP_REPOLL=0: poll once per
        # wakeup, as before, for comparisons: benchmarks/client_capacity.py)
        self.repoll_every = int(os.environ.get("VLLM_SLO_PUMP_REPOLL", REPOLL_EVERY)) or 10**9
        self.repoll_max_reads = REPOLL_MAX_READS

    @property
    def reading(self) -> int:
        """Responses being read now."""
        return len(self._readings)

    def read(self, sock: socket.socket, parser: ResponseParser) -> None:
        """`HttpStreamClient` reader: block this greenlet until the pump has driven `parser` to
        the end of its response; raises what reading raised (OSError, ValueError, the parser's
        own), or whatever interrupted the wait (the request's watchdog, a kill) after taking
        the socket out of the pump."""
        raw = getattr(sock, "_sock", None)
        if raw is None or raw.gettimeout() != 0.0:
            raise TypeError("the reader pump needs gevent's cooperative sockets (Locust "
                            f"monkey-patches socket); got {type(sock).__name__}")
        fd = raw.fileno()
        reading = _Reading(fd, raw.recv, parser)
        self._epoll.register(fd, _EPOLLIN)
        if not self._readings:
            self._watcher.start(self._drain)
        self._readings[fd] = reading
        try:
            reading.finished.wait()
        finally:
            if self._readings.get(fd) is reading:  # interrupted: the pump lets go of it
                self._forget(reading)
        if reading.error is not None:
            raise reading.error

    def _forget(self, reading: _Reading) -> None:
        del self._readings[reading.fd]
        with contextlib.suppress(OSError):  # already closed
            self._epoll.unregister(reading.fd)
        if not self._readings:
            self._watcher.stop()

    def _finish(self, reading: _Reading, error: BaseException | None) -> None:
        self._forget(reading)
        reading.error = error
        reading.finished.set()

    def _receive(self, ready: list[tuple[int, int]], pending: set[int],
                 received: list[tuple[_Reading, bytes, float]]) -> None:
        """Read each ready socket once, stamping each read right after it returned, and queue
        the bytes for parsing. A socket whose earlier read is still queued is left for the
        next wakeup (epoll is level-triggered): one queued read per socket keeps its bytes in
        order and an error after them behind them."""
        readings = self._readings
        perf_counter = time.perf_counter
        self.reads += len(ready)
        for fd, _mask in ready:
            reading = readings.get(fd)
            if reading is None or fd in pending:  # let go of since the poll; or queued
                continue
            try:
                data = reading.recv(RECV_BYTES)
            except BlockingIOError:
                continue
            except OSError as exc:
                self._finish(reading, exc)
                continue
            received.append((reading, data, perf_counter()))
            pending.add(fd)

    def _drain(self) -> None:
        """The watcher's callback, run by the hub whenever a registered socket is readable:
        read every ready socket once, then feed the parsers. It never blocks (a parser and
        `on_event` are pure; gevent refuses a blocking call here), and an error belongs to its
        reading.

        Reads first, parsing after: a read's stamp is when its bytes left the kernel, so
        parsing one socket's bytes before reading the next would stamp the next late by that
        parse. And while the queue is parsed, every REPOLL_EVERY parses the pump polls again
        and reads (stamps) what arrived meanwhile: a wave of hundreds of chunks takes
        milliseconds to parse (~20 us each), and a chunk that landed during it would
        otherwise wait, unstamped, for the whole wave and the next wakeup. Up to
        REPOLL_MAX_READS reads per wakeup: then the callback returns to the hub."""
        readings = self._readings
        received: list[tuple[_Reading, bytes, float]] = []
        pending: set[int] = set()
        self.wakeups += 1
        self._receive(self._epoll.poll(0), pending, received)
        position = 0
        while position < len(received):
            if (position and position % self.repoll_every == 0
                    and len(received) < self.repoll_max_reads):
                self._receive(self._epoll.poll(0), pending, received)
            reading, data, arrived_at_s = received[position]
            position += 1
            pending.discard(reading.fd)
            if readings.get(reading.fd) is not reading:  # ended since its read
                continue
            try:
                if data:
                    if not reading.parser.feed(data, arrived_at_s):
                        continue
                else:
                    reading.parser.closed(arrived_at_s)
            except Exception as exc:  # bad framing, nothing received, on_event's own
                self._finish(reading, exc)
                continue
            self._finish(reading, None)


_PUMP: ReaderPump | None = None
_PUMP_PID = 0


def pump() -> ReaderPump:
    """This process's pump, made on first use (after Locust forked its workers: an epoll
    object must never be shared across processes)."""
    global _PUMP, _PUMP_PID
    if _PUMP is None or os.getpid() != _PUMP_PID:
        _PUMP, _PUMP_PID = ReaderPump(), os.getpid()
    return _PUMP

