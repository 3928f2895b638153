"""The stand-in in a background thread with its own event loop, for tests in the same process:
:class:`StandinServer` (records every completion request) and :func:`running_standin`."""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections.abc import Iterator

from vllm_slo.servers.standin.app import StandinApp
from vllm_slo.servers.standin.config import HOST, RequestRecord, StandinConfig


class StandinServer:
    """The stand-in on 127.0.0.1 (a free port) in a background thread with its own event loop.

    ``with StandinServer(config) as server: ... server.url ... server.records``
    """

    def __init__(self, config: StandinConfig | None = None) -> None:
        self.config = config or StandinConfig()
        self._records: list[RequestRecord] = []
        self._cond = threading.Condition()
        self._thread: threading.Thread | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stop: asyncio.Event | None = None
        self._error: BaseException | None = None
        self._url: str | None = None

    @property
    def url(self) -> str:
        if self._url is None:
            raise RuntimeError("the stand-in is not running; call start() first")
        return self._url

    @property
    def records(self) -> list[RequestRecord]:
        """A snapshot of the completion requests finished so far, in finishing order."""
        with self._cond:
            return list(self._records)

    def wait_for_records(self, count: int, timeout_s: float = 5.0) -> list[RequestRecord]:
        """Block until at least `count` requests have finished; TimeoutError otherwise."""
        with self._cond:
            if not self._cond.wait_for(lambda: len(self._records) >= count, timeout_s):
                raise TimeoutError(
                    f"{len(self._records)} of {count} stand-in requests finished in {timeout_s}s"
                )
            return list(self._records)

    def _add_record(self, record: RequestRecord) -> None:
        with self._cond:
            self._records.append(record)
            self._cond.notify_all()

    def start(self, timeout_s: float = 10.0) -> str:
        if self._thread is not None:
            raise RuntimeError("the stand-in was already started")
        ready = threading.Event()

        def run() -> None:
            try:
                asyncio.run(self._main(ready))
            except BaseException as exc:  # handed to start()/stop() in the calling thread
                self._error = exc
                ready.set()

        self._thread = threading.Thread(target=run, name="standin", daemon=True)
        self._thread.start()
        if not ready.wait(timeout_s) or self._error is not None:
            error = self._error
            with contextlib.suppress(RuntimeError):
                self.stop()
            raise RuntimeError("the stand-in did not start") from error
        return self.url

    async def _main(self, ready: threading.Event) -> None:
        app = StandinApp(self.config, on_record=self._add_record)
        self._loop = asyncio.get_running_loop()
        self._stop = asyncio.Event()
        port = await app.start(0)
        self._url = f"http://{HOST}:{port}"
        ready.set()
        try:
            await self._stop.wait()
        finally:
            await app.aclose()

    def stop(self, timeout_s: float = 10.0) -> None:
        thread, self._thread = self._thread, None
        if thread is None:
            return
        if self._loop is not None and self._stop is not None:
            with contextlib.suppress(RuntimeError):  # the loop is already closed
                self._loop.call_soon_threadsafe(self._stop.set)
        thread.join(timeout_s)
        if thread.is_alive():
            raise RuntimeError(f"the stand-in did not stop within {timeout_s}s")
        if self._error is not None:
            raise RuntimeError("the stand-in failed") from self._error

    def __enter__(self) -> StandinServer:
        self.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.stop()


@contextlib.contextmanager
def running_standin(config: StandinConfig | None = None) -> Iterator[str]:
    """Run the stand-in in a background thread; yields its base URL ``http://127.0.0.1:PORT``."""
    with StandinServer(config) as server:
        yield server.url
