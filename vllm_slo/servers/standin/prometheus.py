"""``GET /metrics``: Prometheus exposition text with the vLLM series the stand-in can honestly
fill (queue gauges, token and finished-request counters; prefix cache always zero)."""

from __future__ import annotations

from vllm_slo.servers.standin.engine import Engine


def metrics_text(engine: Engine) -> str:
    """The engine's state now, in vLLM's metric names and labels."""
    model = engine.config.model
    escaped = model.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")
    labels = f'engine="0",model_name="{escaped}"'
    counters = engine.counters
    out: list[str] = []

    def family(name: str, kind: str, doc: str, samples: list[tuple[str, float]]) -> None:
        out.append(f"# HELP {name} {doc}")
        out.append(f"# TYPE {name} {kind}")
        suffix = "_total" if kind == "counter" else ""
        out.extend(f"{name}{suffix}{{{labels}{extra}}} {float(v)!r}" for extra, v in samples)

    family(
        "vllm:num_requests_running",
        "gauge",
        "Number of requests in model execution batches.",
        [("", engine.queue.running)],
    )
    family(
        "vllm:num_requests_waiting",
        "gauge",
        "Number of requests waiting to be processed.",
        [("", engine.queue.waiting)],
    )
    family(
        "vllm:prompt_tokens",
        "counter",
        "Number of prefill tokens processed.",
        [("", counters.prompt_tokens)],
    )
    family(
        "vllm:generation_tokens",
        "counter",
        "Number of generation tokens processed.",
        [("", counters.generation_tokens)],
    )
    family(
        "vllm:request_success",
        "counter",
        "Count of successfully processed requests.",
        [(f',finished_reason="{k}"', v) for k, v in counters.finished.items()],
    )
    family(
        "vllm:prefix_cache_queries",
        "counter",
        "Prefix cache queries, in terms of number of queried tokens.",
        [("", 0)],
    )
    family(
        "vllm:prefix_cache_hits",
        "counter",
        "Prefix cache hits, in terms of number of cached tokens.",
        [("", 0)],
    )
    return "\n".join(out) + "\n"
