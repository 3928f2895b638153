"""Launching and talking to servers: `vllm serve` (CPU or GPU build) with readiness and
process-group teardown, the streaming HTTP/1.1 client and SSE decoder, /metrics scraping, host
facts, the tiny local model and the known-timing stand-in. Imports only `scenarios`."""
