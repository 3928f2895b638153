"""`locust_config.json`: what the suite hands every Locust process of a run (the traffic, the
served model's id, where the API key is, how many worker processes share the plan), as one
typed model both sides use: the runner writes it, the locustfile's users read it back."""

from __future__ import annotations

from pathlib import Path

from pydantic import Field

from vllm_slo.run_folder.file_writes import write_atomic
from vllm_slo.run_folder.run_files import LOCUST_CONFIG_FILE
from vllm_slo.scenarios.model_base import Frozen
from vllm_slo.scenarios.traffic_spec import TrafficSpec


class LocustConfig(Frozen):
    traffic: TrafficSpec
    model_id: str  # as the server's /v1/models names it (what requests send as `model`)
    api_key_env: str | None = None  # the environment variable holding the API key, if any
    process_count: int = Field(1, ge=1)  # Locust processes that split the plan between them

    def write(self, run_dir: Path) -> Path:
        path = Path(run_dir) / LOCUST_CONFIG_FILE
        return write_atomic(path, self.model_dump_json(by_alias=True))

    @classmethod
    def read(cls, run_dir: Path) -> LocustConfig:
        """The run folder's config; a pydantic ValidationError names what is wrong in it."""
        return cls.model_validate_json((Path(run_dir) / LOCUST_CONFIG_FILE).read_text())
