"""`profile: mix`: no section of its own; its weights are `traffic.mix` (a field of the traffic
model, keyed by the mixable profiles) and its parts keep their own sections. Its generator is
vllm_slo/loadtests/profiles/mix.py."""

from __future__ import annotations

from vllm_slo.scenarios.profile_specs.registry import ProfileSpec

SPEC = ProfileSpec("mix", None)
