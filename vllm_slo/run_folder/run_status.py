"""`run_status.json`: how a run ended, as the runner saw it (the server's or the load
generator's failure, an interruption, an abort, the server's outages, warnings), one typed
model for the runner and `vllm-slo import vllm-bench`, which write it, and the run report,
which reads it. Built while the run goes on, hence not frozen."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from vllm_slo.run_folder.file_writes import write_atomic
from vllm_slo.run_folder.run_files import STATUS_FILE


class RunStatus(BaseModel):
    # a newer suite's field in an older reader is skipped, not fatal (saved run folders)
    model_config = ConfigDict(extra="ignore", validate_assignment=True)

    server_failure: str | None = None  # why the launched server died, with its log tail
    load_generator_failure: str | None = None  # why Locust failed
    interrupted: bool = False  # Ctrl-C / SIGTERM before the planned end
    aborted: str | None = None  # abort_on's reason
    warnings: list[str] = Field(default_factory=list)
    # the server went away mid-run: each outage with its start, length and cost
    server_unreachable: list[dict[str, Any]] = Field(default_factory=list)

    def write(self, run_dir: Path) -> Path:
        path = Path(run_dir) / STATUS_FILE
        return write_atomic(path, self.model_dump_json(indent=2))

    @classmethod
    def read(cls, run_dir: Path) -> RunStatus | None:
        """The folder's status; None when the run never wrote one (it did not finish)."""
        path = Path(run_dir) / STATUS_FILE
        return cls.model_validate_json(path.read_text()) if path.is_file() else None
