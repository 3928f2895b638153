"""`remote_workers.json`: what the Locust master saw of a `traffic.remote_workers` run's
workers, written by the master (vllm_slo/loadtests/remote_channel.py) whenever a worker joins,
is refused, is lost or finishes, and read by the runner once Locust has ended: per worker its
rows delivered, and every loss and stray named. The run token is never in it."""

from __future__ import annotations

from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field

from vllm_slo.run_folder.file_writes import write_atomic
from vllm_slo.run_folder.run_files import REMOTE_WORKERS_FILE


class _Record(BaseModel):
    model_config = ConfigDict(extra="ignore", frozen=True)


class WorkerRecord(_Record):
    """One admitted worker: Locust's id for it (`<hostname>_<hex>`), its stripe of the plan,
    when it joined, the rows it delivered (each request once) and how it ended."""

    worker_id: str
    host: str
    pid: int
    stripe: int = Field(ge=0)  # its share of the arrivals / conversations: every N-th from here
    joined_unix_s: float
    rows: int = 0  # rows kept (request ids seen for the first time)
    duplicate_rows: int = 0  # rows it sent again (a retried batch): kept once
    batches: int = 0
    finished: bool = False  # it said its users were done and its last rows sent
    lost_unix_s: float | None = None  # when the master saw it gone before it finished
    lost_reason: str | None = None

    def loss(self, start_unix_s: float | None) -> str:
        """The loss in one line: which worker, when, what it had delivered."""
        at = ("" if self.lost_unix_s is None else
              f" {self.lost_unix_s - start_unix_s:.1f}s into the run" if start_unix_s else
              f" at Unix {self.lost_unix_s:.1f}")
        return (f"remote worker {self.worker_id} (stripe {self.stripe}) lost{at}: "
                f"{self.lost_reason or 'gone'}; {self.rows} rows delivered")


class StrayWorker(_Record):
    """A worker the master turned away (no run token, a wrong one, or one too many), or
    rows from a sender it had not admitted."""

    worker_id: str
    reason: str
    at_unix_s: float


class RemoteWorkers(_Record):
    expected: int = Field(ge=1)
    traffic_start_unix_s: float | None = None  # the master's test start
    workers: tuple[WorkerRecord, ...] = ()
    strays: tuple[StrayWorker, ...] = ()

    @property
    def joined(self) -> int:
        return len(self.workers)

    @property
    def rows(self) -> int:
        return sum(worker.rows for worker in self.workers)

    def problems(self) -> list[str]:
        """Why the run is invalid on the load generator's side (empty: every expected worker
        joined, finished and delivered)."""
        found = []
        if self.joined < self.expected:
            found.append(f"only {self.joined} of {self.expected} remote workers joined")
        start = self.traffic_start_unix_s
        found.extend(worker.loss(start) for worker in self.workers
                     if worker.lost_unix_s is not None)
        found.extend(f"remote worker {worker.worker_id} (stripe {worker.stripe}) never said "
                     f"it finished; {worker.rows} rows delivered"
                     for worker in self.workers
                     if worker.lost_unix_s is None and not worker.finished)
        return found

    def write(self, run_dir: Path) -> Path:
        return write_atomic(Path(run_dir) / REMOTE_WORKERS_FILE, self.model_dump_json(indent=2))

    @classmethod
    def read(cls, run_dir: Path) -> RemoteWorkers | None:
        """The master's record; None when it never wrote one (no worker ever spoke)."""
        path = Path(run_dir) / REMOTE_WORKERS_FILE
        return cls.model_validate_json(path.read_text()) if path.is_file() else None
