"""The Locust side: users, arrival processes, the OpenAI streaming request, prompt sources and
the request plan, and the launcher that runs Locust as a subprocess. The only package that
imports locust (in its locustfiles only). Imports `scenarios` and `servers` (the HTTP client)."""
