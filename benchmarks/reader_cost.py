#!/usr/bin/env python3
"""CPU per streamed chunk of the two response readers, alternated in one process so a noisy,
shared host hits both alike: `blocking` (each stream's greenlet blocks in gevent's `recv`, the
path before the reader pump) and `pump` (loadtests/reader_pump.py: one epoll pass per wakeup).

A writer process (pinned with --writer-cpus) holds the far ends of S socket pairs and streams
vLLM-shaped chunked SSE responses on each: the headers, then one ~250-byte event every
1/--rate s, `--chunks` of them, the terminator; the next response once the reader has sent
its one-byte request. The reader process
(pinned with --reader-cpus) runs one greenlet per stream that reads response after response
with a ResponseParser feeding OutcomeBuilder.event (the Locust users' per-chunk work, without
their per-request rows). The mode changes every --round-s seconds (a stream switches at its
next response); each round's first second is dropped, then CPU seconds / SSE events are
counted. Printed: per mode, the median over rounds of CPU per event (µs), events per read,
CPU share of one core, and the reader pump's ready sockets per wakeup.

    python benchmarks/reader_cost.py --streams 256 512 --reader-cpus 1 --writer-cpus 0
"""

from __future__ import annotations

import argparse
import os
import shutil
import signal
import socket
import statistics
import sys
import time


def writer(fds: list[int], rate: float, chunks: int) -> None:
    """Stream responses on every socket, each at `rate` events/s, phases spread evenly."""
    socks = [socket.socket(fileno=fd) for fd in fds]
    for sock in socks:
        sock.setblocking(False)
    head = (b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream; charset=utf-8\r\n"
            b"transfer-encoding: chunked\r\n\r\n")
    event = (b'data: {"id":"cmpl-860082c80e5d3c17","object":"text_completion","created":'
             b'1795942325,"model":"tiny","choices":[{"index":0,"text":" word","logprobs":null,'
             b'"finish_reason":null,"stop_reason":null,"prompt_token_ids":null,'
             b'"token_ids":null}]}\n\n')  # as vLLM writes them (tests/unit/data)
    last = (b'data: {"id":"cmpl-860082c80e5d3c17","object":"text_completion","created":'
            b'1795942325,"model":"tiny","choices":[{"index":0,"text":" end","logprobs":null,'
            b'"finish_reason":"length","stop_reason":null}]}\n\n')
    usage = (b'data: {"id":"cmpl-1","object":"text_completion","created":1,"model":"tiny",'
             b'"choices":[],"usage":{"prompt_tokens":3,"total_tokens":%d,'
             b'"completion_tokens":%d}}\n\n' % (chunks + 3, chunks))

    def frame(data: bytes) -> bytes:
        return b"%x\r\n%s\r\n" % (len(data), data)

    middle, final = frame(event), frame(last) + frame(usage) + frame(b"data: [DONE]\n\n")
    final += b"0\r\n\r\n"
    sent = [0] * len(socks)
    period = 1.0 / rate
    # every stream has a phase of its own (as the stand-in's per-stream timers): stream k
    # writes at start + k * period / S + n * period
    start = time.monotonic()
    count = len(socks)
    step = period / count
    due_index = 0  # next (stream, round) in time order: index = round * count + k
    while True:
        due = start + due_index * step
        delay = due - time.monotonic()
        if delay > 0:
            time.sleep(delay)
        now = time.monotonic()
        while start + due_index * step <= now:  # everything due by now, in order
            k = due_index % count
            due_index += 1
            n = sent[k]
            if n == 0:  # a response starts once its request (one byte) has come
                try:
                    if not socks[k].recv(64):
                        continue
                except BlockingIOError:
                    continue
                data = head + middle
            elif n < chunks - 1:
                data = middle
            else:
                data, n = final, -1
            socks[k].sendall(data)  # a few hundred bytes into an emptied buffer
            sent[k] = n + 1


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--streams", type=int, nargs="+", default=[256])
    parser.add_argument("--rate", type=float, default=50.0, help="events/s per stream")
    parser.add_argument("--chunks", type=int, default=32, help="events per response")
    parser.add_argument("--round-s", type=float, default=3.0)
    parser.add_argument("--rounds", type=int, default=4, help="rounds per mode")
    parser.add_argument("--modes", nargs="+", choices=("blocking", "pump"),
                        default=["blocking", "pump"], help="readers to alternate")
    parser.add_argument("--reader-cpus", default=None)
    parser.add_argument("--writer-cpus", default=None)
    args = parser.parse_args(argv)
    if args.reader_cpus and shutil.which("taskset"):
        os.sched_setaffinity(0, {int(c) for c in args.reader_cpus.split(",")})
    rows = []
    for streams in args.streams:
        rows += measure(args, streams)
    print(f"| streams | reader | CPU / event µs (median of {args.rounds}) | events / read | "
          "CPU (one core) | ready sockets / pump wakeup |")
    print("|---|---|---|---|---|---|")
    for row in rows:
        print(row)
    return 0


def measure(args: argparse.Namespace, streams: int) -> list[str]:
    pairs = [socket.socketpair() for _ in range(streams)]
    child = os.fork()
    if child == 0:  # the writer
        try:
            if args.writer_cpus:
                os.sched_setaffinity(0, {int(c) for c in args.writer_cpus.split(",")})
            for ours, _theirs in pairs:
                ours.close()
            writer([theirs.detach() for _ours, theirs in pairs], args.rate, args.chunks)
        finally:
            os._exit(0)
    for _ours, theirs in pairs:
        theirs.close()
    try:
        return run_reader(args, streams, [ours.detach() for ours, _theirs in pairs])
    finally:
        os.kill(child, signal.SIGKILL)
        os.waitpid(child, 0)


def run_reader(args: argparse.Namespace, streams: int, fds: list[int]) -> list[str]:
    import gevent
    import gevent.socket

    from vllm_slo.loadtests import reader_pump
    from vllm_slo.loadtests.openai_stream import OutcomeBuilder
    from vllm_slo.transport.http_stream import READ_COUNTERS, ResponseParser, read_blocking

    mode = [args.modes[0]]
    socks = [gevent.socket.socket(fileno=fd) for fd in fds]
    for sock in socks:
        sock.settimeout(None)  # as inside Locust: no timer per wait

    def stream(sock) -> None:
        while True:
            parser = ResponseParser(OutcomeBuilder("completions").event)
            sock.sendall(b"r")  # the request: no response starts before it
            if mode[0] == "pump":
                reader_pump.pump().read(sock, parser)
            else:
                read_blocking(sock, parser)

    workers = [gevent.spawn(stream, sock) for sock in socks]
    results: dict[str, list[tuple[float, float, float, float]]] = {m: [] for m in args.modes}
    for k in range(len(args.modes) * args.rounds):
        mode[0] = args.modes[k % len(args.modes)]
        gevent.sleep(1.0)  # every stream has moved to the mode
        pump = reader_pump.pump()
        before = (time.process_time(), time.perf_counter(), READ_COUNTERS.socket_reads,
                  READ_COUNTERS.sse_events, pump.wakeups, pump.reads)
        gevent.sleep(args.round_s - 1.0)
        cpu = time.process_time() - before[0]
        wall = time.perf_counter() - before[1]
        reads = READ_COUNTERS.socket_reads - before[2]
        events = READ_COUNTERS.sse_events - before[3]
        wakeups = pump.wakeups - before[4]
        ready = (pump.reads - before[5]) / wakeups if wakeups else float("nan")
        if not events:  # the writer was starved the whole round (a shared host)
            continue
        results[mode[0]].append((cpu / events * 1e6, events / reads, cpu / wall, ready))
    gevent.killall(workers)
    rows = []
    for name, values in results.items():
        if not values:
            rows.append(f"| {streams} | {name} | no events read | | | |")
            continue
        per_event, per_read, share, ready = (statistics.median(v) for v in zip(*values,
                                                                                strict=True))
        rows.append(f"| {streams} | {name} | {per_event:.1f} "
                    f"({min(v[0] for v in values):.1f}-{max(v[0] for v in values):.1f}) | "
                    f"{per_read:.2f} | {share:.0%} | "
                    f"{'-' if name == 'blocking' else f'{ready:.2f}'} |")
        print(rows[-1], file=sys.stderr, flush=True)
    return rows


if __name__ == "__main__":
    raise SystemExit(main())
