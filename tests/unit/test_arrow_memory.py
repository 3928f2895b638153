"""The Locust processes' Arrow allocator (vllm_slo/loadtests/arrow_memory.py): the system allocator
unless the environment names one, and freed memory handed back without losing live data."""

from __future__ import annotations

import pyarrow as pa
import pytest

from vllm_slo.loadtests import arrow_memory


@pytest.fixture(autouse=True)
def restore_pool():
    before = pa.default_memory_pool()
    yield
    pa.set_memory_pool(before)


def test_the_system_allocator_unless_the_environment_names_one() -> None:
    assert arrow_memory.use_system_allocator({}) == "system"
    pa.set_memory_pool(pa.mimalloc_memory_pool())
    named = {arrow_memory.ENV: "mimalloc"}  # the user's choice: Arrow read it, kept
    assert arrow_memory.use_system_allocator(named) == "mimalloc"


def test_release_keeps_live_arrays_intact() -> None:
    arrow_memory.use_system_allocator({})
    kept = pa.array(range(100_000), pa.int64())
    live = pa.default_memory_pool().bytes_allocated()
    dropped = pa.array(range(1_000_000), pa.int64())
    del dropped
    arrow_memory.release_unused()
    assert pa.default_memory_pool().bytes_allocated() == live  # only the kept array's
    assert kept.to_pylist() == list(range(100_000))


def test_locust_processes_get_the_system_allocator_unless_a_pool_is_named() -> None:
    env = arrow_memory.locust_environment({"PATH": "/bin"})
    assert env == {"PATH": "/bin", arrow_memory.ENV: "system"}
    assert arrow_memory.locust_environment({arrow_memory.ENV: "jemalloc"}) == {
        arrow_memory.ENV: "jemalloc"}
