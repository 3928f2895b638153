"""Known-timing stand-in for vLLM's OpenAI-compatible server. A TEST INSTRUMENT, never a vLLM.

It exists to prove that what the suite measures equals what happened (every chunk is sent at a
scheduled, recorded moment) and to inject faults. It mimics the wire format of real vLLM
(`vllm serve`, as observed from vLLM's CPU build): the same endpoints, the same
SSE chunk sequence (chat: a role chunk, one chunk per token, the last with
``finish_reason: "length"``, a ``choices: []`` usage chunk when ``stream_options.include_usage``,
then ``data: [DONE]``), the same error shapes. Standard library only (asyncio), loopback only.

Modules, each imported by its own path (this package exports nothing):

* ``config``: :class:`~config.StandinConfig` (every knob, validated) and
  :class:`~config.RequestRecord` (what was done for one completion request, with times).
* ``faults``: the fault kinds, the ``x-standin-fault`` header, which request gets which fault.
* ``http``: minimal HTTP/1.1: reading requests, writing responses (each write timed).
* ``openai``: the OpenAI/vLLM surface: request validation, error shape, SSE framing,
  ``/v1/models``, ``/tokenize``.
* ``engine``: the timing model (FIFO queue, token schedule) and the completion responses.
* ``prometheus``: the ``/metrics`` text.
* ``app``: :class:`~app.StandinApp`, the asyncio server (connections, routing, faults).
* ``server``: :class:`~server.StandinServer` (background thread, records every completion
  request) and :func:`~server.running_standin` (yields the base URL), for tests.
* ``cli`` / ``__main__``::

    python -m vllm_slo.servers.standin --port 0 --ttft 0.05 --itl 0.01
    # prints "STANDIN READY http://127.0.0.1:PORT" once listening; serves until SIGTERM/SIGINT
"""
