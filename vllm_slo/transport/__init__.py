"""The transport, the bottom layer beside `scenarios`: HTTP streams and SSE (the client that
readiness, /metrics scraping and the Locust users share) and OS processes (process groups,
CPU affinity, loopback ports). `servers` and `loadtests` both import it; it imports nothing of
the suite."""
