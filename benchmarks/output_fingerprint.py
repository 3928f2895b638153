"""Fingerprint every output the saved-run commands write, to show a refactor changes none.

Builds, from seeded synthetic data only (tests/support/synthetic.py; no server, no Locust):
a run folder (with /metrics records), a two-variant experiment of three trials each, and a
two-variant capacity folder; then runs `vllm-slo report` on each, `compare`, `gate` and `plan`
on the experiment's variants, and prints one sha256 a written file and a printed text, plus one
over all. Run it before and after a change from the same checkout:

    PYTHONPATH=. .tox/ci/bin/python benchmarks/output_fingerprint.py

The folders are made under a fixed path (FOLDER below), since run ids and paths appear in the
outputs; equal lines before and after mean byte-identical outputs (a UTC time stamp in a
folder's name, `compare-20261207T150703Z`, is hashed as `<UTC>`).
"""

from __future__ import annotations

import hashlib
import re
import shutil
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from tests.support.synthetic import (  # noqa: E402
    build_big_run,
    write_synthetic_experiment,
)
from tests.unit.test_capacity_report import write_variants  # noqa: E402
from vllm_slo.cli import main  # noqa: E402

FOLDER = Path("/tmp/vllm-slo-output-fingerprint")
OUTPUT_SUFFIXES = (".json", ".html", ".xml", ".md", ".txt", ".csv")
STAMP = re.compile(rb"\d{8}T\d{6}Z")  # a folder's UTC creation time (compare-<UTC>)


def sha(data: bytes) -> str:
    return hashlib.sha256(STAMP.sub(b"<UTC>", data)).hexdigest()[:16]


def command_text(argv: list[str]) -> tuple[int, str]:
    lines: list[str] = []
    code = main(argv, say=lines.append, complain=lines.append)
    return code, "\n".join(lines)


def build(root: Path) -> dict[str, Path]:
    run = build_big_run(root / "run", n_requests=600, chunks=16, seed=3)
    experiment = write_synthetic_experiment(root / "experiment", {"base": 0.05, "fast": 0.04},
                                            trials=3, noise=0.05, seed=1)
    capacity = root / "capacity"
    capacity.mkdir()
    write_variants(capacity)
    return {"run": run, "experiment": experiment, "capacity": capacity}


def main_fingerprint() -> None:
    shutil.rmtree(FOLDER, ignore_errors=True)
    folders = build(FOLDER)
    texts: dict[str, tuple[int, str]] = {
        f"report {name}": command_text(["report", str(path)]) for name, path in folders.items()}
    trials = sorted((folders["experiment"] / "trials").iterdir())
    base = [t for t in trials if "-base-" in t.name]
    fast = [t for t in trials if "-fast-" in t.name]
    texts["compare trials"] = command_text(["compare", str(base[0]), str(fast[0]),
                                            "--out", str(FOLDER / "compare")])
    texts["gate trials"] = command_text(["gate", str(fast[0]), "--baseline", str(base[0])])
    texts["plan experiment"] = command_text(["plan", str(folders["experiment"])])
    everything = hashlib.sha256()
    for name, (code, text) in texts.items():
        digest = sha(text.encode())
        everything.update(f"{name} {code} {digest}\n".encode())
        print(f"text  {name:<28} exit {code}  {digest}")
    for path in sorted(FOLDER.rglob("*")):
        if path.is_file() and path.suffix in OUTPUT_SUFFIXES:
            digest = sha(path.read_bytes())
            everything.update(f"{path.relative_to(FOLDER)} {digest}\n".encode())
            print(f"file  {path.relative_to(FOLDER)}  {digest}")
    print(f"all outputs: {everything.hexdigest()[:16]}")


if __name__ == "__main__":
    main_fingerprint()
