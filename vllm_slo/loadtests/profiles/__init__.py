"""The traffic profiles' generators, one module per profile, registered by name
(`traffic.profile`) below, in the order the docs list them. A profile's settings are its spec
in the bottom layer (vllm_slo/scenarios/profile_specs/), so the scenario model validates them
without importing the load generator: adding a profile is its spec module there and its
generator module here; a plugin or a test registers both from one module of its own
(tests/support/fixed_length.py). tests/unit/test_profile_registry.py holds the two registries
equal."""

from __future__ import annotations

from vllm_slo.loadtests.profiles import agent, chat, long_doc, mix, sharegpt, trace
from vllm_slo.loadtests.profiles.base import (
    PROFILES,
    Profile,
    register_profile,
    unregister_profile,
)

for _profile in (chat.PROFILE, long_doc.PROFILE, sharegpt.PROFILE, mix.PROFILE, trace.PROFILE,
                 agent.PROFILE):
    register_profile(_profile, built_in=True)

__all__ = ["PROFILES", "Profile", "register_profile", "unregister_profile"]
