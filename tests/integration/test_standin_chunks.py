"""Known truth for multi-token chunks and reasoning timing: the stand-in sends chunks of a
configured token pattern (with per-chunk usage) and a configured reasoning phase on an exact
schedule; the suite's own client, row builder, samples writer and analysis must give back the
tokens each chunk carried, the per-chunk ITL, the per-token ITL, TTFT, TTFT to the answer and
the reasoning time (within the timer tolerance of the other stand-in tests: a timing miss is
retried with fresh requests, as contention only delays; the file runs in `tox -e ci`'s serial
step, marked `timing`)."""

from __future__ import annotations

import time
from pathlib import Path

import numpy as np
import pytest

from tests.support.timing import timed
from vllm_slo.analysis.run_metrics import RunSeries, run_series, summarize
from vllm_slo.loadtests.openai_stream import RequestOutcome, request_body, send_streamed
from vllm_slo.loadtests.plan import PlannedRequest
from vllm_slo.loadtests.request_rows import request_row
from vllm_slo.reports.samples import read_streams
from vllm_slo.run_folder.samples_format import SampleWriter
from vllm_slo.servers.standin.config import StandinConfig
from vllm_slo.servers.standin.server import running_standin
from vllm_slo.transport.http_stream import HttpStreamClient

pytestmark = [pytest.mark.integration, pytest.mark.timing]

TOL_S = 0.015  # a chunk's arrival after its scheduled write, as the stand-in tests allow
EARLY_S = 0.002
TTFT_S, ITL_S = 0.08, 0.02


def _send(url: str, max_tokens: int, requests: int = 3, **body: object
          ) -> list[RequestOutcome]:
    client = HttpStreamClient(url, 10.0)
    try:
        payload = request_body("chat", "standin", [{"role": "user", "content": "say it"}],
                               max_tokens, True, 0.0, **body)  # type: ignore[arg-type]
        return [send_streamed(client, "chat", payload) for _ in range(requests)]
    finally:
        client.close()


def _series(outcomes: list[RequestOutcome], tmp_path: Path, max_tokens: int) -> RunSeries:
    writer = SampleWriter(tmp_path / "samples" / "samples-test.arrows")
    for number, outcome in enumerate(outcomes):
        planned = PlannedRequest(number, number, 0, ({"role": "user", "content": "x"},), 2,
                                 max_tokens)
        writer.append(request_row(
            request_id=str(number), process_id=1, user_id=0, request=planned,
            endpoint="chat", phase="measure", intended_perf_s=outcome.send_perf_s,
            send_unix_s=time.time() - (time.perf_counter() - outcome.send_perf_s),
            queued=False, outcome=outcome))
    writer.close()
    table = read_streams([writer.path])
    return run_series(table, window_s=10.0)


def test_pattern_chunks_give_exact_tokens_and_both_itls(tmp_path: Path) -> None:
    """Chunks of 1, 3, 2 tokens (cycled) over 12 tokens: sizes 1,3,2,1,3,2; each chunk is sent
    when its last token is made (token i at ttft + i*itl): at ttft + (0, 3, 5, 6, 9, 11) itl,
    chunk gaps of 3, 2, 1, 3, 2 itl, and per token every gap is exactly one itl."""
    config = StandinConfig(ttft_s=TTFT_S, itl_s=ITL_S, chunk_pattern=(1, 3, 2))
    attempts: list[tuple[list[RequestOutcome], RunSeries]] = []

    def measure() -> None:
        with running_standin(config) as url:
            outcomes = _send(url, 12)
        series = _series(outcomes, tmp_path / f"attempt{len(attempts)}", 12)
        attempts.append((outcomes, series))
        for outcome in outcomes:
            assert outcome.ok and outcome.output_tokens == 12
            assert outcome.chunk_tokens == (1, 3, 2, 1, 3, 2)
            arrivals = np.asarray(outcome.content_chunk_perf_s) - outcome.send_perf_s
            scheduled = TTFT_S + np.array([0, 3, 5, 6, 9, 11]) * ITL_S  # each chunk's last token
            assert np.all(arrivals > scheduled - EARLY_S), arrivals - scheduled
            assert np.all(arrivals < scheduled + TOL_S), arrivals - scheduled
        assert series.itl_s.size == 15 and series.itl_token_s.size == 3 * 11
        assert abs(float(np.median(series.itl_token_s)) - ITL_S) < 0.004
        assert abs(float(np.median(series.itl_s)) - 2 * ITL_S) < 0.006  # gaps 3,2,1,3,2 itl
        assert abs(float(series.itl_token_s.mean()) - ITL_S) < 0.004
        tpot = series.tpot_s  # (e2e - ttft) / 11 from the usage count: the same pace
        assert np.all(np.abs(tpot - ITL_S) < 0.004), tpot

    timed(measure)
    facts = summarize(attempts[-1][1]).stream
    assert facts is not None and facts.chunks == 18 and facts.tokens_per_chunk_max == 3
    assert facts.tokens_per_chunk_mean == pytest.approx(2.0)
    assert facts.multi_token_chunk_share == pytest.approx(4 / 6)
    assert facts.chunk_tokens_source == "per-chunk usage"


@pytest.mark.parametrize("field", ["reasoning", "reasoning_content"])
def test_reasoning_then_answer_is_timed_apart(tmp_path: Path, field: str) -> None:
    """5 reasoning tokens then 5 answer tokens, one a chunk: TTFT is the first reasoning
    token's (ttft), TTFT to the answer the 6th token's (ttft + 5 itl), reasoning time 5 itl,
    reasoning tokens 5 by per-chunk usage."""
    config = StandinConfig(ttft_s=TTFT_S, itl_s=ITL_S, reasoning_tokens=5,
                           reasoning_field=field)
    attempts: list[RunSeries] = []

    def measure() -> None:
        with running_standin(config) as url:
            outcomes = _send(url, 10, reasoning=True)
        series = _series(outcomes, tmp_path / f"attempt{len(attempts)}", 10)
        attempts.append(series)
        for outcome in outcomes:
            assert outcome.ok and outcome.reasoning_chunks == 5 and outcome.reasoning_tokens == 5
            assert outcome.chunk_tokens == (1,) * 10
            assert outcome.first_answer_perf_s is not None
            ttft = outcome.content_chunk_perf_s[0] - outcome.send_perf_s
            answer = outcome.first_answer_perf_s - outcome.send_perf_s
            assert TTFT_S - EARLY_S <= ttft <= TTFT_S + TOL_S
            assert TTFT_S + 5 * ITL_S - EARLY_S <= answer <= TTFT_S + 5 * ITL_S + TOL_S
        assert series.ttft_answer_s.size == 3 and series.reasoning_time_s.size == 3
        assert np.all(np.abs(series.reasoning_time_s - 5 * ITL_S) < TOL_S), \
            series.reasoning_time_s
        assert np.all(series.ttft_answer_s - series.ttft_s > 5 * ITL_S - TOL_S)

    timed(measure)
    facts = summarize(attempts[-1]).stream
    assert facts is not None and facts.reasoning_requests == 3
    assert facts.reasoning_without_answer == 0 and facts.reasoning_tokens_mean == 5.0


def test_reasoning_without_an_answer_is_a_success_counted_apart(tmp_path: Path) -> None:
    """max_tokens inside the reasoning: every token is reasoning, no answer. The request is ok
    (it streamed), has no TTFT to the answer, and the summary counts and names it."""
    config = StandinConfig(ttft_s=TTFT_S, itl_s=ITL_S, reasoning_tokens=20)
    with running_standin(config) as url:
        outcomes = _send(url, 6, requests=2)
    assert all(o.ok and o.first_answer_perf_s is None and o.reasoning_chunks == 6
               for o in outcomes)
    series = _series(outcomes, tmp_path, 6)
    assert series.ttft_s.size == 2 and series.ttft_answer_s.size == 0
    summary = summarize(series)
    assert summary.stream is not None and summary.stream.reasoning_without_answer == 2
    assert any("never answered" in w for w in summary.warnings)
    assert np.isnan(series.measured_latency_s["ttft_answer"]).all()  # misses a goodput SLO


def test_without_per_chunk_usage_tokens_are_unknown_not_guessed(tmp_path: Path) -> None:
    """A server that ignores continuous_usage_stats: the chunk counts are unknown (null),
    itl_token is empty and the summary says why; itl (per chunk) is unaffected."""
    config = StandinConfig(ttft_s=TTFT_S, itl_s=ITL_S, tokens_per_chunk=3)
    with running_standin(config) as url:
        outcomes = _send(url, 7, requests=2,
                         extra_body={"stream_options": {"include_usage": True}})
    assert all(o.ok and o.chunk_tokens is None and o.output_tokens == 7 for o in outcomes)
    series = _series(outcomes, tmp_path, 7)
    assert series.itl_token_s.size == 0 and series.itl_s.size == 2 * 2
    summary = summarize(series)
    assert summary.stream is not None and summary.stream.requests_without_chunk_tokens == 2
    assert summary.stream.chunk_tokens_source == "unknown (no per-chunk usage)"
