"""`vllm-slo`: a thin command line over the library. `main(argv) -> int` only parses and calls.

    vllm-slo run scenario=chat [dotted.key=value ...]     (also: vllm-slo scenario=chat ...)
    vllm-slo report RUN_DIR                                 re-render a run folder's outputs
    vllm-slo scenarios                                      list shipped scenarios

Exit codes: 0 all SLOs pass · 1 an SLO failed · 2 usage/config error · 3 inconclusive ·
4 the measurement is invalid (server died, no successful request, interrupted).
"""

from __future__ import annotations

import argparse
import signal
import sys
from collections.abc import Sequence
from pathlib import Path

from scenarios.errors import ExitCode, ScenarioError, SloSuiteError
from scenarios.loader import load_scenario, shipped_scenarios

USAGE = __doc__ or ""


def _say(text: str) -> None:
    end = "" if text.startswith("\r") else "\n"
    print(text, end=end, flush=True)


def _split_run_arguments(arguments: Sequence[str]) -> tuple[str, list[str]]:
    scenario_ref = None
    overrides = []
    for argument in arguments:
        if argument.startswith("scenario="):
            scenario_ref = argument.split("=", 1)[1]
        else:
            overrides.append(argument)
    if not scenario_ref:
        raise ScenarioError(
            "which scenario? pass scenario=NAME or scenario=path/to/file.yaml "
            f"(shipped: {', '.join(shipped_scenarios())})")
    return scenario_ref, overrides


def command_run(arguments: Sequence[str], runs_root: Path) -> int:
    from scenarios.runner import run_scenario  # heavy imports only when running

    scenario_ref, overrides = _split_run_arguments(arguments)
    scenario, path = load_scenario(scenario_ref, overrides)
    _say(f"scenario {scenario.name} from {path}")
    outcome = run_scenario(scenario, runs_root, _say)
    if outcome.rendered is not None:
        _say("\n" + outcome.rendered.text)
        _say(f"\nreport: {outcome.rendered.report_path}")
    _say(f"exit code {int(outcome.exit_code)} ({outcome.exit_code.name})")
    return int(outcome.exit_code)


def command_report(run_dir: Path) -> int:
    from reports.run_report import render_run

    if not run_dir.is_dir():
        raise ScenarioError(f"run folder {run_dir} does not exist")
    rendered = render_run(run_dir)
    _say(rendered.text)
    _say(f"\nreport: {rendered.report_path}")
    return int(rendered.summary["exit_code"])


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="vllm-slo", description=USAGE,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs-dir", type=Path, default=Path("runs"),
                        help="where run folders are created (default: ./runs)")
    sub = parser.add_subparsers(dest="command", required=True)
    run = sub.add_parser("run", help="run a scenario")
    run.add_argument("arguments", nargs="*", metavar="scenario=NAME|key=value")
    report = sub.add_parser("report", help="re-render a run folder")
    report.add_argument("run_dir", type=Path)
    sub.add_parser("scenarios", help="list the shipped scenarios")
    return parser


def _raise_keyboard_interrupt(signum: int, frame: object) -> None:
    raise KeyboardInterrupt


def main(argv: Sequence[str] | None = None) -> int:
    arguments = list(sys.argv[1:] if argv is None else argv)
    if arguments and "=" in arguments[0] and not arguments[0].startswith("-"):
        arguments = ["run", *arguments]  # `vllm-slo scenario=chat` == `vllm-slo run ...`
    parser = _parser()
    try:
        options = parser.parse_args(arguments)
    except SystemExit as exit_:
        return ExitCode.USAGE_ERROR if exit_.code else ExitCode.PASS
    signal.signal(signal.SIGTERM, _raise_keyboard_interrupt)
    try:
        if options.command == "run":
            return command_run(options.arguments, options.runs_dir)
        if options.command == "report":
            return command_report(options.run_dir)
        print("\n".join(shipped_scenarios()))
        return ExitCode.PASS
    except SloSuiteError as error:
        print(f"vllm-slo: error: {error}", file=sys.stderr)
        return int(error.exit_code)


def entry_point() -> None:
    sys.exit(main())


if __name__ == "__main__":
    entry_point()
