"""One reader per Locust process for every streamed response (issue 14: the load generator must
never be the bottleneck).

Reading each user's socket in its own greenlet costs, for every ~250-byte SSE chunk, a recv
that fails with EAGAIN, a libev watcher start and stop, two greenlet switches and the real
recv: gevent's socket machinery, not our parsing, filled the core. Here one pump greenlet owns
an epoll object of its own (the unpatched one: Locust's monkey-patching removes `select.epoll`)
and waits cooperatively for *that* descriptor; when it wakes, `epoll.poll(0)` returns every
ready socket at once and the pump, in one tight loop without a greenlet switch, does for each
a raw non-blocking `recv`, stamps `perf_counter()` right after it returned, and feeds the
request's `ResponseParser` (servers/http_stream.py: the same state machine the blocking reader
drives), which hands each SSE payload to the request's `on_event` callback. When a response
ends (complete, closed, or a read/parse error), the pump unregisters the socket and wakes the
user's greenlet.

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

import gevent
from gevent import monkey
from gevent.event import Event
from gevent.hub import get_hub

from vllm_slo.servers.http_stream import RECV_BYTES, ResponseParser

_epoll = monkey.get_original("select", "epoll")
_EPOLLIN = monkey.get_original("select", "EPOLLIN")


class _Reading:
    """One response being read by the pump."""

    __slots__ = ("error", "fd", "finished", "parser", "recv")

    def __init__(self, fd: int, recv, parser: ResponseParser) -> None:
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
        # the pump's one watcher: on the epoll descriptor, holding the loop open only while
        # responses are being read (an idle pump must not keep a finished process alive)
        self._watcher = self._hub.loop.io(self._epoll.fileno(), 1)
        self._watcher.ref = False
        self._greenlet: gevent.Greenlet | None = None
        self.wakeups = 0  # times the pump woke (ready sockets per wakeup = reads / wakeups)
        self.reads = 0

    @property
    def reading(self) -> int:
        """Responses being read now."""
        return len(self._readings)

    def read(self, sock, parser: ResponseParser) -> None:
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
            self._watcher.ref = True
        self._readings[fd] = reading
        if self._greenlet is None or self._greenlet.dead:
            self._greenlet = gevent.spawn(self._run)
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
            self._watcher.ref = False

    def _finish(self, reading: _Reading, error: BaseException | None) -> None:
        self._forget(reading)
        reading.error = error
        reading.finished.set()

    def _run(self) -> None:
        hub, watcher, readings = self._hub, self._watcher, self._readings
        poll = self._epoll.poll
        perf_counter = time.perf_counter
        try:
            while True:
                hub.wait(watcher)
                ready = poll(0)
                self.wakeups += 1
                self.reads += len(ready)
                for fd, _mask in ready:
                    reading = readings.get(fd)
                    if reading is None:  # let go of since the poll (cannot happen: no switch)
                        continue
                    try:
                        data = reading.recv(RECV_BYTES)
                    except BlockingIOError:
                        continue
                    except OSError as exc:
                        self._finish(reading, exc)
                        continue
                    arrived_at_s = perf_counter()
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
        except BaseException as exc:  # the pump itself died: no reading may wait forever
            for reading in list(readings.values()):
                self._finish(reading, ConnectionError(f"reader pump stopped: {exc!r}"))
            raise


_PUMP: ReaderPump | None = None
_PUMP_PID = 0


def pump() -> ReaderPump:
    """This process's pump, made on first use (after Locust forked its workers: an epoll
    object must never be shared across processes)."""
    global _PUMP, _PUMP_PID
    if _PUMP is None or os.getpid() != _PUMP_PID:
        _PUMP, _PUMP_PID = ReaderPump(), os.getpid()
    return _PUMP
