"""loadtests/memory_trace.py's report: the allocation sites that grew between two snapshots,
largest first, without the diagnostic's own allocations."""

from __future__ import annotations

import tracemalloc

from vllm_slo.loadtests.memory_trace import growth_report


def test_the_report_names_the_site_that_grew() -> None:
    tracemalloc.start(4)
    try:
        before = tracemalloc.take_snapshot()
        kept = [bytearray(2048) for _ in range(300)]  # ~600 KiB held from this line
        after = tracemalloc.take_snapshot()
        report = growth_report(before, after, 60.0)
    finally:
        tracemalloc.stop()
    assert len(kept) == 300
    first_site = report.split("\n\n")[1]
    assert first_site.startswith("+6") and "KiB in +" in first_site  # ~600 KiB
    assert "test_memory_trace.py" in first_site  # the innermost frame, last
    assert "tracemalloc.py" not in report and "linecache.py" not in report
