"""vLLM's own latency histograms against the client's numbers (pure; the caller reads the
files). Issue 10: a large disagreement is flagged in the measurement-health panel.

vLLM exports `vllm:time_to_first_token_seconds` (from the request's arrival in the API server
to its first token) and `vllm:inter_token_latency_seconds` (one observation per token after
the first) as histograms; the scrape keeps their `_sum` and `_count`. Their increments between
the run's first and last scrape are the server's view of every request of the run. The
client's view of the same requests is every row that got a first token, warm-up included:

- TTFT: mean of (first content chunk − the request's actual send): `ttft_s − send_lag_s`, so
  an open-loop request's wait for its send is not counted against the server;
- ITL per token: Σ (last chunk − first chunk) / Σ (output tokens − 1). Per token, not per
  chunk: vLLM observes each token, and a chunk may carry several (coalesced under load).

Compared only when the two counts agree (|server − client| ≤ max(2, 1%)); otherwise the server
also served someone else, restarted, or was scraped too late, and no verdict is given.

**Flagged** (`flags` non-empty) when the client's TTFT mean exceeds the server's by more than
max(20 ms, 20%) (transport, HTTP handling and the client's own delays above that are not the
server's latency), or falls below it by more than max(5 ms, 5%) (impossible for one request:
the clocks or the definitions disagree), or the per-token ITL means differ by more than 10%.
Measured on vLLM CPU 0.32 (chat, 116 requests, 2 cores shared with the client): TTFT 434.2 ms
client vs 423.2 ms server (+11.0 ms, +2.6%), ITL 27.93 vs 27.94 ms per token (−0.02%).
Flags are warnings: they do not change the exit code.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np
import pyarrow as pa

from vllm_slo.analysis.chunk_times import list_values
from vllm_slo.analysis.client_health import float_column
from vllm_slo.analysis.server_metrics import metric_per_scrape, valid_scrapes
from vllm_slo.serialise import derive

TTFT_HISTOGRAM = "vllm:time_to_first_token_seconds"
ITL_HISTOGRAM = "vllm:inter_token_latency_seconds"
COUNT_SLACK = 2  # requests; or COUNT_SLACK_SHARE of them, whichever is more
COUNT_SLACK_SHARE = 0.01
TTFT_EXCESS_S, TTFT_EXCESS_SHARE = 0.020, 0.20
TTFT_DEFICIT_S, TTFT_DEFICIT_SHARE = 0.005, 0.05
ITL_RELATIVE = 0.10


@dataclass(frozen=True, slots=True, kw_only=True)
class LatencyCrosscheck:
    """Server (vLLM's histograms) against client (the rows), whole run."""

    server_requests: int  # TTFT observations between the first and last scrape
    client_requests: int  # rows with a first token
    server_ttft_mean_s: float | None
    client_ttft_mean_s: float | None
    server_itl_mean_s: float | None  # per token
    client_itl_mean_s: float | None  # per token
    ttft_excess_s: float | None = field(init=False)  # client - server TTFT mean
    itl_ratio: float | None = field(init=False)  # client / server ITL mean per token
    compared: bool  # the counts agree: the two views are of the same requests
    flags: tuple[str, ...]

    def __post_init__(self) -> None:
        server_ttft, client_ttft = self.server_ttft_mean_s, self.client_ttft_mean_s
        server_itl, client_itl = self.server_itl_mean_s, self.client_itl_mean_s
        derive(self, ttft_excess_s=(None if server_ttft is None or client_ttft is None
                                    else client_ttft - server_ttft),
               itl_ratio=(None if not server_itl or client_itl is None
                          else client_itl / server_itl))


def histogram_increment(records: list[dict[str, Any]], name: str
                        ) -> tuple[float, float] | None:
    """(Δ sum, Δ count) of histogram `name` from the first to the last scrape (summed over
    engines); None when it is not exported in both or a counter went backwards (a server
    restart)."""
    if len(records) < 2:
        return None
    ends = []
    for part in ("_sum", "_count"):
        series = metric_per_scrape(records, f"{name}{part}", "sum")
        if series is None or not (series[-1] >= series[0]):  # NaN: missing in one of them
            return None
        ends.append(float(series[-1] - series[0]))
    return ends[0], ends[1]


def client_latency_means(table: pa.Table) -> tuple[int, float | None, float | None]:
    """(rows with a first token, their TTFT mean from the actual send, ITL mean per token)."""
    ttft = float_column(table, "ttft_s")
    lag = np.nan_to_num(float_column(table, "send_lag_s"), nan=0.0)
    started = np.isfinite(ttft)
    count = int(started.sum())
    ttft_mean = float((ttft - lag)[started].mean()) if count else None
    if not table.num_rows:
        return count, ttft_mean, None
    flat, bounds = list_values(table.column("chunk_offsets_s").combine_chunks())
    tokens = float_column(table, "output_tokens")
    spanned = started & (tokens > 1) & (np.diff(bounds) >= 2)  # NaN tokens compare False
    spans = (flat[bounds[1:][spanned] - 1].astype(np.float64)
             - flat[bounds[:-1][spanned]].astype(np.float64))
    intervals = float((tokens[spanned] - 1).sum())
    itl_mean = float(spans.sum() / intervals) if intervals > 0 else None
    return count, ttft_mean, itl_mean


def _ms(seconds: float) -> str:
    return f"{seconds * 1e3:.1f} ms"


def crosscheck_flags(check: LatencyCrosscheck) -> tuple[str, ...]:
    """The criterion of the module docstring, each flag with its numbers."""
    if not check.compared:
        return ()
    flags = []
    server, excess = check.server_ttft_mean_s, check.ttft_excess_s
    if server is not None and excess is not None:
        if excess > max(TTFT_EXCESS_S, TTFT_EXCESS_SHARE * server):
            flags.append(
                f"client TTFT mean {_ms(check.client_ttft_mean_s or 0.0)} exceeds vLLM's own "
                f"{_ms(server)} by {_ms(excess)} (more than max(20 ms, 20%)): time between the "
                f"server's first token and the client's stamp that is not the server's "
                f"(transport, a busy API server, or a late client)")
        elif -excess > max(TTFT_DEFICIT_S, TTFT_DEFICIT_SHARE * server):
            flags.append(
                f"client TTFT mean {_ms(check.client_ttft_mean_s or 0.0)} is below vLLM's own "
                f"{_ms(server)} by {_ms(-excess)}: impossible for the same requests; the "
                f"clocks or the definitions disagree")
    ratio = check.itl_ratio
    if ratio is not None and abs(ratio - 1.0) > ITL_RELATIVE:
        flags.append(
            f"client ITL per token {_ms(check.client_itl_mean_s or 0.0)} against vLLM's own "
            f"{_ms(check.server_itl_mean_s or 0.0)} (x{ratio:.3f}, more than 10% apart)")
    return tuple(flags)


def latency_crosscheck(records: Sequence[dict[str, Any]], table: pa.Table
                       ) -> LatencyCrosscheck | None:
    """From the run's scrapes (server_metrics.jsonl's lines) and all its rows; None when the
    server exports no TTFT histogram (e.g. not vLLM) or was not scraped twice."""
    records = valid_scrapes(records)
    ttft = histogram_increment(records, TTFT_HISTOGRAM)
    if ttft is None:
        return None
    itl = histogram_increment(records, ITL_HISTOGRAM)
    server_requests = round(ttft[1])
    client_requests, client_ttft, client_itl = client_latency_means(table)
    slack = max(COUNT_SLACK, math.ceil(COUNT_SLACK_SHARE * max(server_requests,
                                                               client_requests)))
    check = LatencyCrosscheck(
        server_requests=server_requests, client_requests=client_requests,
        server_ttft_mean_s=ttft[0] / ttft[1] if ttft[1] > 0 else None,
        client_ttft_mean_s=client_ttft,
        server_itl_mean_s=itl[0] / itl[1] if itl is not None and itl[1] > 0 else None,
        client_itl_mean_s=client_itl,
        compared=client_requests > 0 and abs(server_requests - client_requests) <= slack,
        flags=())
    return replace(check, flags=crosscheck_flags(check))
