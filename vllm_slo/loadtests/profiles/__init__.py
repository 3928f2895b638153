"""The traffic profiles, one module each, registered by name (`traffic.profile`). Adding a
profile: a module here with its `PROFILE`, its entry below, its spec in the scenario model
(`scenarios/model.py`: the `traffic.profile` names and the profile's section);
tests/unit/test_profile_registry.py holds the registry and the model's names equal."""

from __future__ import annotations

from types import MappingProxyType

from vllm_slo.loadtests.profiles import chat, long_doc, mix, sharegpt
from vllm_slo.loadtests.profiles.base import Profile

PROFILES: MappingProxyType[str, Profile] = MappingProxyType({
    profile.name: profile for profile in (chat.PROFILE, long_doc.PROFILE, sharegpt.PROFILE,
                                          mix.PROFILE)})
