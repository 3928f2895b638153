"""Traffic-profile specs, one module per profile, each holding its settings model and its
`SPEC`; the built-in ones are registered below, in the order the docs list them. Adding a
profile: its spec module and its generator module (vllm_slo/loadtests/profiles/), each with
its line in its package's list; a plugin or a test registers both from one module of its own
(`register_profile_spec`, `loadtests.profiles.register_profile`: tests/support/fixed_length.py).
"""

from __future__ import annotations

from vllm_slo.scenarios.profile_specs import agent, chat, long_doc, mix, sharegpt, trace
from vllm_slo.scenarios.profile_specs.chat import ChatSpec
from vllm_slo.scenarios.profile_specs.long_doc import LongDocSpec
from vllm_slo.scenarios.profile_specs.registry import (
    PROFILE_SPECS,
    ProfileSpec,
    mixable_profiles,
    one_of,
    register_profile_spec,
    unregister_profile_spec,
)
from vllm_slo.scenarios.profile_specs.sharegpt import ShareGptSpec

for _spec in (chat.SPEC, long_doc.SPEC, sharegpt.SPEC, mix.SPEC, trace.SPEC, agent.SPEC):
    register_profile_spec(_spec, built_in=True)

__all__ = ["PROFILE_SPECS", "ChatSpec", "LongDocSpec", "ProfileSpec", "ShareGptSpec",
           "mixable_profiles", "one_of", "register_profile_spec", "unregister_profile_spec"]
