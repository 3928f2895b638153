"""The load generator's self-monitoring records read back: `samples/client-<host>-<pid>.jsonl`,
one JSON object per process-second (vllm_slo/loadtests/client_monitor.py writes them; fields in
vllm_slo/analysis/client_health.py). A line cut by a crash, or a foreign one, is skipped."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from vllm_slo.reports.json_lines import read_json_lines
from vllm_slo.run_folder.samples_format import SAMPLES_DIR


def read_client_records(run_dir: Path) -> list[dict[str, Any]]:
    """Every record of every process, in file then line order."""
    return [record for path in sorted((run_dir / SAMPLES_DIR).glob("client-*.jsonl"))
            for record in read_json_lines(path)]
