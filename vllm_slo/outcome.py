"""How a command ends, the same for every command (run, experiment, capacity, tune, report,
compare, gate, plan, import): the folder it wrote or read, its exit code, the text it prints
last, and the report it wrote. The CLI prints `text` and exits with `exit_code`; nothing
else of a command's result reaches it.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from vllm_slo.scenarios.errors import ExitCode


@dataclass(frozen=True, slots=True)
class Outcome:
    folder: Path | None  # None: a command that read folders and wrote none (gate, plan)
    exit_code: ExitCode
    text: str  # what the command prints once it is done
    report_path: Path | None = None


def exit_code_line(exit_code: int, slo_count: int) -> str:
    """The terminal's last line: `exit code 1 (SLO_FAILED)`; without any SLO no verdict word."""
    if exit_code == 0 and slo_count == 0:
        return "exit code 0 (no SLO given: measured, not judged)"
    return f"exit code {exit_code} ({ExitCode(exit_code).name})"


def verdict_line(exit_code: ExitCode) -> str:
    """`exit code 3 (INCONCLUSIVE)`: the last line of a tune's or a capacity search's text."""
    return f"exit code {int(exit_code)} ({exit_code.name})"


def reported(folder: Path, exit_code: ExitCode, rendered_text: str, report_path: Path,
             report_name: str, last_line: str) -> Outcome:
    """A command that ran something and rendered its report: a blank line, the rendered
    text, a blank line, `<report_name>: <path>`, then `last_line` (the verdict)."""
    return Outcome(folder, exit_code,
                   f"\n{rendered_text}\n\n{report_name}: {report_path}\n{last_line}",
                   report_path)


def run_reported(folder: Path, exit_code: ExitCode, rendered_text: str, report_path: Path,
                 slo_count: int) -> Outcome:
    """A run's or an experiment's outcome; without any SLO, exit 0 says no verdict
    (`exit_code_line`)."""
    return reported(folder, exit_code, rendered_text, report_path, "report",
                    exit_code_line(int(exit_code), slo_count))
