"""The minimal Locust SSE client the suite is compared with (benchmarks/client_capacity.py):
Locust's own FastHttpUser (geventhttpclient) streaming /v1/completions, a perf_counter stamp
per read, nothing else. Writes one JSON line per request to $FASTHTTP_LOG at exit:
{"id", "send", "chunks": [perf_counter of each content-bearing event], "ok"}.

    FASTHTTP_LOG=out.jsonl FASTHTTP_MAX_TOKENS=256 locust -f benchmarks/fasthttp_locustfile.py \
        --headless -u 256 -r 256 -t 20s --host http://127.0.0.1:PORT
"""

from __future__ import annotations

import atexit
import itertools
import json
import os
import time

from locust import FastHttpUser, constant, task

LOG: list[str] = []
COUNTER = itertools.count()
BODY = json.dumps({
    "model": os.environ.get("FASTHTTP_MODEL", "standin"), "prompt": "hello " * 32,
    "max_tokens": int(os.environ.get("FASTHTTP_MAX_TOKENS", "256")), "stream": True,
    "ignore_eos": True, "stream_options": {"include_usage": True},
})


@atexit.register
def _write() -> None:
    path = os.environ.get("FASTHTTP_LOG")
    if path and LOG:
        with open(path, "a") as out:
            out.write("\n".join(LOG) + "\n")


class StreamingUser(FastHttpUser):
    wait_time = constant(0)
    network_timeout = 600.0
    connection_timeout = 60.0

    @task
    def complete(self) -> None:
        request_id = f"fh-{os.getpid()}-{next(COUNTER)}"
        chunks: list[float] = []
        send = time.perf_counter()
        ok = False
        with self.client.request("POST", "/v1/completions", data=BODY, stream=True,
                                 headers={"Content-Type": "application/json",
                                          "X-Request-Id": request_id},
                                 catch_response=True) as response:
            # geventhttpclient's readline returns as soon as a line is buffered (its read(n)
            # and Locust's iter_content/iter_lines wait for n bytes: no use for timing)
            stream = response._response
            while True:
                line = stream.readline(b"\n")
                if not line:
                    break
                now = time.perf_counter()
                if line.startswith(b"data: [DONE]"):
                    ok = True
                elif b'"text":"' in line and b'"text":""' not in line:
                    chunks.append(now)
            response.success()
        LOG.append(json.dumps({"id": request_id, "send": send, "chunks": chunks, "ok": ok}))
