"""`provenance.json`: where a run's numbers came from (the suite, Locust and vLLM versions, the
host, the launch, the server that answered, the plan, the seed), as one typed model for the
runner and `vllm-slo import vllm-bench`, which write it, and the reports, which read it.

An older or newer folder's unknown key is skipped, not fatal (saved run folders outlive
suite versions); a known key of the wrong type is refused, the pydantic error naming it.
Only the fields a writer set are written back (`to_json_dict`), so a run's file shows
what was known, not a page of nulls. Credentials: `write` takes the redaction rule
(reports.redaction, a layer above) so that no writer can forget it.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict

from vllm_slo.run_folder.file_writes import write_atomic
from vllm_slo.run_folder.run_files import PROVENANCE_FILE

Redact = Callable[[Any], Any]


class Provenance(BaseModel):
    model_config = ConfigDict(extra="ignore", frozen=True, strict=False)

    # the suite's side (in the order a run learns them, which is the report's order)
    suite_version: str | None = None
    suite_git_commit: str | None = None
    locust_version: str | None = None
    host: dict[str, Any] | None = None  # host_facts(): hostname, OS, CPU, GPUs
    platform: str | None = None  # cpu | gpu (None: imported)
    seed: int | None = None
    started_utc: str | None = None
    command_line: list[str] | None = None
    launch: dict[str, Any] | None = None  # a launched server's plan (argv, env, engine args)
    # the server that answered
    vllm_version: str | None = None
    model_id: str | None = None
    max_model_len: int | None = None
    server_url: str | None = None
    server_pid: int | None = None
    server_instance: dict[str, Any] | None = None
    server_ready_after_s: float | None = None  # a launched server: start until ready
    # the traffic
    plan: dict[str, Any] | None = None  # requests, sha256, tokenizer, trimmed ...
    prefix_cache_reset: str | None = None
    prefix_cache_primed: str | None = None  # phases: warm: what priming did
    core_split: dict[str, Any] | None = None
    locust_workers: int | None = None
    locust_master: str | None = None
    remote_workers: list[dict[str, Any]] | None = None  # per worker: rows delivered, loss
    # an imported run (`vllm-slo import vllm-bench`)
    source: str | None = None
    imported_utc: str | None = None
    vllm_bench: dict[str, Any] | None = None
    send_times: str | None = None
    time_anchor: str | None = None
    latency_from: str | None = None

    def updated(self, **fields: Any) -> Provenance:
        """A copy with `fields` set, validated (a run learns its provenance as it goes)."""
        return type(self).model_validate({**self.to_json_dict(), **fields})

    def to_json_dict(self) -> dict[str, Any]:
        """The fields a writer set, as JSON values (what provenance.json holds)."""
        data: dict[str, Any] = self.model_dump(mode="json", exclude_unset=True)
        return data

    def write(self, run_dir: Path, redact: Redact) -> Path:
        path = Path(run_dir) / PROVENANCE_FILE
        return write_atomic(path, json.dumps(redact(self.to_json_dict()), indent=2))

    @classmethod
    def read(cls, run_dir: Path) -> Provenance:
        """The folder's provenance; empty when the run never wrote one (it died before its
        server was up). A pydantic ValidationError names a field of the wrong type."""
        path = Path(run_dir) / PROVENANCE_FILE
        return cls.model_validate_json(path.read_text()) if path.is_file() else cls()

