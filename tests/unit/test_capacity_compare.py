"""`vllm-slo compare` and `vllm-slo gate` on capacity folders, through the CLI's entry point
(capacity.json files written from documents; no server)."""

from __future__ import annotations

from pathlib import Path

from tests.unit.test_capacity_report import search_document
from vllm_slo.cli import main
from vllm_slo.reports.capacity_report import write_capacity


def _folder(root: Path, name: str, scale: float) -> Path:
    folder = root / name
    folder.mkdir(parents=True)
    write_capacity(folder, search_document(scale=scale))  # capacity [9.5, 10.4] x scale
    return folder


def _cli(*arguments: str) -> tuple[int, str]:
    said: list[str] = []
    code = main(list(arguments), say=said.append, complain=said.append)
    return code, "\n".join(said)


def test_compare_gives_the_capacity_ratio_with_its_interval(tmp_path: Path) -> None:
    base, tuned = _folder(tmp_path, "base", 1.0), _folder(tmp_path, "tuned", 3.0)
    code, text = _cli("compare", str(base), str(tuned))
    assert code == 0, text
    # [3 × 9.5 / 10.4, 3 × 10.4 / 9.5] at 90% (both 95% intervals must cover)
    assert "2.74" in text and "3.28" in text and "90%" in text and "higher" in text, text


def test_gate_passes_fails_and_stays_undecided_on_capacity(tmp_path: Path) -> None:
    base = _folder(tmp_path, "base", 1.0)
    same = _folder(tmp_path, "same", 1.0)  # ratio [0.91, 1.09]
    worse = _folder(tmp_path, "worse", 0.5)
    better = _folder(tmp_path, "better", 1.2)
    code, text = _cli("gate", str(better), "--baseline", str(base), "--margin", "5%")
    assert code == 0 and "PASS" in text, text
    code, text = _cli("gate", str(worse), "--baseline", str(base), "--margin", "5%")
    assert code == 1 and "FAIL" in text, text
    code, text = _cli("gate", str(same), "--baseline", str(base), "--margin", "5%")
    assert code == 3 and "INCONCLUSIVE" in text, text
    code, text = _cli("gate", str(same), "--baseline", str(base), "--margin", "10%")
    assert code == 0, text  # 9.5 / 10.4 = 0.913 >= 0.90
