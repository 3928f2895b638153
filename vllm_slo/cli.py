"""The `vllm-slo` command: parses the command line, calls the command's driver, prints the
Outcome's text and exits with its code; errors become one line and an exit code (below)."""

from __future__ import annotations

import argparse
import codecs
import os
import signal
import sys
import tempfile
import traceback
from collections.abc import Callable, Sequence
from datetime import datetime, timezone
from pathlib import Path

from vllm_slo.outcome import Outcome
from vllm_slo.redaction import redact_secrets, redact_text
from vllm_slo.run_folder.file_writes import OutputWriteError
from vllm_slo.scenarios.errors import ExitCode, ScenarioError, SloSuiteError
from vllm_slo.scenarios.loader import load_scenario, shipped_scenarios
from vllm_slo.scenarios.model import Scenario
from vllm_slo.scenarios.plugins import load_plugins, plugin_in_traceback

DESCRIPTION = """\
Load-test a vLLM server against SLOs: launch it (or attach to one), drive Locust traffic,
and decide each SLO from confidence intervals (PASS, FAIL or INCONCLUSIVE).

commands:
  run scenario=NAME [key=value ...]       one run, or an experiment of its variants
                                          (also: vllm-slo scenario=NAME ...)
  tune scenario=NAME [key=value ...]      search the scenario's tune: space over server args
  capacity scenario=NAME [key=value ...]  the highest load carried within the SLOs
  report RUN_DIR                          re-render a run, experiment, tune or capacity folder
  compare RUN_A RUN_B [...]               compare saved runs (the first is the baseline)
  gate CANDIDATE --baseline BASELINE      release gate: the candidate no worse than baseline
  plan RUN_DIR [--effect 10%]             trials needed to detect a change, from a pilot
  import vllm-bench FILE.json ...         `vllm bench serve` results as a run or experiment
  scenarios                               list the shipped scenarios
  worker --master HOST:PORT --token=T     lend this host's Locust worker to a run
  run, tune and capacity take --resume DIR to continue an interrupted folder.

exit codes: 0 every SLO passed · 1 an SLO failed · 2 usage or config error · 3 inconclusive
· 4 the measurement is invalid (server died, client saturated, interrupted)

`vllm-slo COMMAND --help` tells a command's options; docs/ has the manual.
"""
Writer = Callable[[str], None]


# what the suite prints beyond ASCII, and what an ASCII terminal gets instead
ASCII_FALLBACKS = {"±": "+/-", "†": "+", "‡": "++", "×": "x", "…": "...", "·": "-", "—": "--",
                   "–": "-", "≤": "<=", "≥": ">=", "≈": "~", "→": "->", "←": "<-", "µ": "u",
                   "°": "deg", "✓": "ok", "✗": "x", "•": "*", "²": "^2", "√": "sqrt"}
_FALLBACK_HANDLER = "vllm_slo_ascii"


def _ascii_fallback(error: UnicodeError) -> tuple[str, int]:
    """A codec error handler: characters the terminal cannot encode become their ASCII
    fallback (`±` -> `+/-`), any other one `?`."""
    if not isinstance(error, UnicodeEncodeError):
        raise error
    text = error.object[error.start:error.end]
    return "".join(ASCII_FALLBACKS.get(char, "?") for char in text), error.end


def encodable_output(streams: Sequence[object] | None = None) -> None:
    """Make stdout and stderr print anything: a stream whose encoding cannot write the
    suite's symbols (`LC_ALL=C` without UTF-8 mode: ASCII) is reconfigured to write ASCII
    fallbacks instead of raising UnicodeEncodeError after the verdict was reached."""
    codecs.register_error(_FALLBACK_HANDLER, _ascii_fallback)
    for stream in (sys.stdout, sys.stderr) if streams is None else streams:
        encoding = getattr(stream, "encoding", None) or "ascii"
        reconfigure = getattr(stream, "reconfigure", None)
        try:
            "".join(ASCII_FALLBACKS).encode(encoding)
        except (UnicodeEncodeError, LookupError):
            if reconfigure is not None:
                reconfigure(errors=_FALLBACK_HANDLER)


def _stdout(text: str) -> None:
    """Print a line; a line starting with a carriage return redraws the terminal's last line."""
    end = "" if text.startswith("\r") else "\n"
    print(text, end=end, flush=True)


def _stderr(text: str) -> None:
    print(text, file=sys.stderr, flush=True)


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


def _no_scenario_on_resume(arguments: Sequence[str], what: str) -> None:
    """--resume goes on with the folder's own scenario; its key=value arguments may only give
    again the credentials the folder hides (reports/trial_folders.resumable_scenario)."""
    given = [a for a in arguments if a.startswith("scenario=")]
    if given:
        raise ScenarioError(f"--resume continues {what} as it was started; it takes no "
                            f"scenario (got {given[0]}), only key=value overrides giving "
                            "again the credentials its folder holds as ***")


def _scenario(arguments: Sequence[str], say: Writer) -> Scenario:
    scenario_ref, overrides = _split_run_arguments(arguments)
    scenario, path = load_scenario(scenario_ref, overrides)
    say(f"scenario {scenario.name} from {path}")
    return scenario


def _races(scenario: Scenario) -> bool:
    """A tune whose objective is capacity is a race of capacity searches."""
    return scenario.tune is not None and scenario.tune.objective == "capacity"


def command_run(options: argparse.Namespace, say: Writer) -> Outcome:
    from vllm_slo.experiment_runner import resume_experiment, run_experiment  # heavy imports

    if options.resume is not None:
        _no_scenario_on_resume(options.arguments, f"the experiment in {options.resume}")
        return resume_experiment(options.resume, say, options.arguments)
    return run_experiment(_scenario(options.arguments, say), options.runs_dir, say,
                          options.force)


def command_tune(options: argparse.Namespace, say: Writer) -> Outcome:
    from vllm_slo.capacity_race import resume_capacity_race, run_capacity_race
    from vllm_slo.tuner import resume_tune, run_tune, tune_folder_scenario

    if options.resume is not None:
        _no_scenario_on_resume(options.arguments, f"the tune in {options.resume}")
        scenario = tune_folder_scenario(options.resume, options.arguments)
        if _races(scenario):
            return resume_capacity_race(scenario, options.resume, say)
        return resume_tune(scenario, options.resume, say)
    scenario = _scenario(options.arguments, say)
    if _races(scenario):
        return run_capacity_race(scenario, options.runs_dir, say)
    return run_tune(scenario, options.runs_dir, say)


def command_capacity(options: argparse.Namespace, say: Writer) -> Outcome:
    from vllm_slo.capacity_runner import resume_capacity, run_capacity  # heavy imports

    if options.resume is not None:
        _no_scenario_on_resume(options.arguments,
                               f"the capacity search in {options.resume}")
        return resume_capacity(options.resume, say, options.arguments)
    return run_capacity(_scenario(options.arguments, say), options.runs_dir, say)


def _percent(text: str) -> float:
    try:
        return float(text.rstrip("%")) / 100.0 if text.endswith("%") else float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"expected a percentage like 5% or 0.05, got {text!r}") from None


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="vllm-slo", description=DESCRIPTION,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs-dir", type=Path, default=Path("runs"),
                        help="where run folders are created, relative to the current "
                             "directory (default: ./runs)")
    sub = parser.add_subparsers(dest="command", required=True)
    run = sub.add_parser("run", help="run a scenario")
    run.add_argument("arguments", nargs="*", metavar="scenario=NAME|key=value")
    run.add_argument("--force", action="store_true",
                     help="run an experiment even when its design can never reach a "
                          "significant difference (refused otherwise, exit 2)")
    run.add_argument("--resume", type=Path, default=None, metavar="RUN_DIR",
                     help="continue an interrupted experiment from its folder (key=value: "
                          "only the credentials its scenario.yaml holds as ***)")
    tune = sub.add_parser("tune", help="search a scenario's tune space over server args")
    tune.add_argument("arguments", nargs="*", metavar="scenario=NAME|key=value")
    tune.add_argument("--resume", type=Path, default=None, metavar="RUN_DIR",
                      help="continue an interrupted tune from its folder (key=value: only "
                           "the credentials its tune.yaml holds as ***)")
    capacity = sub.add_parser("capacity", help="search the highest load carried within the "
                              "SLOs (the scenario's capacity: section)")
    capacity.add_argument("arguments", nargs="*", metavar="scenario=NAME|key=value")
    capacity.add_argument("--resume", type=Path, default=None, metavar="DIR",
                          help="continue an interrupted search from its folder (key=value: "
                               "only the credentials its scenario.yaml holds as ***)")
    report = sub.add_parser("report", help="re-render a run folder")
    report.add_argument("run_dir", type=Path)
    compare = sub.add_parser("compare", help="compare saved runs (first = baseline)")
    compare.add_argument("run_dirs", type=Path, nargs="+")
    compare.add_argument("--cells", nargs="+", default=None,
                         help="metric.statistic cells (default: the baseline scenario's)")
    compare.add_argument("--alpha", type=float, default=0.05)
    compare.add_argument("--test", choices=("welch-log", "mann-whitney"), default=None,
                         help="the per-trial test (default: the baseline scenario's "
                         "compare.test, welch-log unless it says otherwise)")
    compare.add_argument("--force", action="store_true",
                         help="compare even when the workloads or seed sets differ")
    compare.add_argument("--within-instance", action="store_true",
                         help="decide a pair with < 2 server instances on a side on its "
                         "per-trial values (tests these servers, not the configs; said in "
                         "every output); default: undecided: within-instance")
    compare.add_argument("--out", type=Path, default=None,
                         help="the comparison's folder (default: RUNS_DIR/compare-<UTC>)")
    gate = sub.add_parser("gate", help="release gate: candidate no worse than baseline")
    gate.add_argument("candidate", type=Path)
    gate.add_argument("--baseline", type=Path, required=True)
    gate.add_argument("--margin", type=_percent, default=0.05, help="e.g. 5%% (default)")
    gate.add_argument("--cells", nargs="+", default=None)
    gate.add_argument("--alpha", type=float, default=0.05,
                      help="1 - the intervals' level; FAIL is Holm-corrected over the cells")
    gate.add_argument("--force", action="store_true",
                      help="compare even when model, hardware, vLLM version or seed differ")
    gate.add_argument("--test", choices=("welch-log", "mann-whitney"), default=None,
                      help="the test (default: the baseline scenario's compare.test, as "
                      "compare)")
    gate.add_argument("--within-instance", action="store_true",
                      help="decide with < 2 server instances on a side (tests these "
                      "servers, not the configs; said in the output); default: INCONCLUSIVE")
    plan = sub.add_parser("plan", help="trials per variant needed, from a pilot run")
    plan.add_argument("run_dir", type=Path)
    plan.add_argument("--effect", type=_percent, default=0.10,
                      help="the change a comparison must detect (default 10%%)")
    plan.add_argument("--alpha", type=float, default=0.05)
    plan.add_argument("--margin", type=_percent, default=0.05,
                      help="the gate's non-inferiority margin (default 5%%)")
    sub.add_parser("scenarios", help="list the shipped scenarios")
    worker = sub.add_parser("worker", help="lend this host's Locust worker to a run with "
                            "traffic.remote_workers (needs only the master's address)")
    worker.add_argument("--master", required=True, metavar="HOST:PORT",
                        help="the master's address, as the run prints it")
    worker.add_argument("--token", default=os.environ.get("VLLM_SLO_RUN_TOKEN", ""),
                        help="the run's token, as the run prints it (default: "
                             "$VLLM_SLO_RUN_TOKEN)")
    imports = sub.add_parser("import", help="import results of other tools as run folders")
    kinds = imports.add_subparsers(dest="kind", required=True)
    bench = kinds.add_parser(
        "vllm-bench", help="`vllm bench serve --save-result --save-detailed` JSON files",
        description="One file: a run folder. Several: an experiment, one trial per file; "
                    "files with the same label are trials of one variant (the first label "
                    "is the baseline). --instance says which server instance each file ran "
                    "on (default: its label).")
    bench.add_argument("files", type=Path, nargs="*", metavar="FILE.json")
    bench.add_argument("--out", type=Path, default=None,
                       help="the run folder to create (default: RUNS_DIR/<UTC>-vllm-bench)")
    bench.add_argument("--label", action="append", default=[], metavar="LABEL",
                       help="variant label: once for every file, or once per file in the same "
                            "order")
    bench.add_argument("--instance", action="append", default=[], metavar="NAME[=FILE]",
                       help="the server instance the files ran on: NAME once for every file "
                            "({file} and {label} fill in per file: --instance '{file}' = each "
                            "file a fresh server), or NAME=FILE per file (default: the label; "
                            "files of one label ran on one server)")
    bench.add_argument("--variant", action="append", default=[], metavar="NAME=FILE",
                       help="FILE is a trial of variant NAME (repeatable; instead of FILE "
                            "arguments)")
    bench.add_argument("--slo-from", "--scenario", dest="slo_from", default=None,
                       metavar="SCENARIO",
                       help="take the SLOs and compared cells from a scenario (shipped name "
                            "or YAML file); default: no SLOs")
    bench.add_argument("--latency-from", choices=("arrival", "send"), default="arrival",
                       help="open loop: count latencies from when vLLM bench released the "
                            "request (default; includes waiting for a --max-concurrency "
                            "slot) or from the actual send (vLLM bench's own numbers)")
    return parser


def _dispatch(options: argparse.Namespace, say: Writer) -> Outcome:
    """Call the library for one parsed command; its Outcome."""
    if options.command == "run":
        return command_run(options, say)
    if options.command == "tune":
        return command_tune(options, say)
    if options.command == "capacity":
        return command_capacity(options, say)
    if options.command == "worker":
        from vllm_slo.loadtests.locust_launcher import exec_worker

        exec_worker(options.master, options.token)  # returns only when it could not start
        return Outcome(None, ExitCode.USAGE_ERROR, "")
    if options.command == "scenarios":
        return Outcome(None, ExitCode.PASS, "\n".join(shipped_scenarios()))
    if options.command == "import":
        from vllm_slo.vllm_bench.command import import_vllm_bench

        return import_vllm_bench(options.files, options.out, options.label, options.variant,
                                 options.slo_from, options.latency_from, options.runs_dir,
                                 options.instance)
    from vllm_slo import saved_runs  # heavy imports only for the saved-run commands

    if options.command == "report":
        return saved_runs.report_saved_run(options.run_dir)
    if options.command == "compare":
        return saved_runs.compare_saved_runs(options.run_dirs, options.cells, options.alpha,
                                             options.out, options.runs_dir, options.force,
                                             options.test, options.within_instance)
    if options.command == "gate":
        return saved_runs.gate_saved_runs(options.candidate, options.baseline,
                                          options.margin, options.cells, options.force,
                                          options.alpha, options.test,
                                          options.within_instance)
    return saved_runs.plan_saved_run(options.run_dir, options.effect, options.alpha,
                                     options.margin)


class StopSignals:
    """SIGINT/SIGTERM handler: the first signal raises KeyboardInterrupt (the run stops its
    server and Locust, saves its rows and renders its report); a second one while that goes
    on is acknowledged, not obeyed (an impatient Ctrl-C would otherwise cut the teardown and
    lose samples.parquet and summary.json); a third quits at once."""

    def __init__(self, complain: Writer) -> None:
        self.complain = complain
        self.count = 0

    def __call__(self, signum: int, frame: object) -> None:
        self.count += 1
        if self.count == 2:
            self.complain("vllm-slo: stopping already: the server and Locust are being "
                          "stopped and the rows saved; signal once more to quit at once")
            return
        raise KeyboardInterrupt


# one line on the terminal, however long what an error carries (an alias-bombed YAML value)
MAX_MESSAGE_CHARS = 4_000
INTERRUPTED_MESSAGE = (
    "vllm-slo: interrupted before the report was written (exit 4, not a verdict); a run "
    "folder's rows are in its samples/*.arrows: `vllm-slo report RUN_DIR` renders them")


def _capped(message: str) -> str:
    if len(message) <= MAX_MESSAGE_CHARS:
        return message
    return (f"{message[:MAX_MESSAGE_CHARS]} … ({len(message) - MAX_MESSAGE_CHARS:,} more "
            "characters left out)")


def crash_log_path() -> Path:
    """Where an unexpected exception's traceback goes: the system's temporary folder (a
    runs folder may not exist, may be what failed, and holds run folders only)."""
    stamp = datetime.now(timezone.utc).strftime("%Y%m%dT%H%M%SZ")
    return Path(tempfile.gettempdir()) / f"vllm-slo-crash-{stamp}-{os.getpid()}.log"


def _crash_log(error: BaseException, arguments: Sequence[str]) -> str:
    """The traceback to a log file; where it went, in words."""
    path = crash_log_path()
    detail = "".join(traceback.format_exception(error))
    try:
        path.write_text(redact_text(
            f"vllm-slo {' '.join(redact_secrets(list(arguments)))}\n\n{detail}"),
            encoding="utf-8")
        return f"the traceback is in {path}"
    except OSError as log_error:
        return f"no traceback log ({path}: {log_error.strerror})"


def _report_crash(error: BaseException, arguments: Sequence[str], complain: Writer) -> int:
    """An exception the suite did not raise on purpose: its traceback to a log file, one line
    to the terminal, exit 4 (never 1, which says an SLO or a gate failed). A plugin's
    exception (a module VLLM_SLO_PLUGINS names is in its traceback) names the plugin."""
    where = _crash_log(error, arguments)
    first_line = redact_text((str(error).strip().splitlines() or [""])[0][:300])
    plugin = plugin_in_traceback(error)
    raised = (f"plugin {plugin} raised {error!r}"[:400] if plugin is not None else
              f"{type(error).__name__}{': ' + first_line if first_line else ''}")
    complain(f"vllm-slo: internal error (exit 4, not a verdict): {raised}; {where}")
    return int(ExitCode.INVALID_MEASUREMENT)


def _report_write_failure(error: OutputWriteError, say: Writer, complain: Writer) -> int:
    """A file that could not be written (full disk, read-only folder): the verdict reached
    before it, if any, then the path and why; exit 4 (nothing was saved to stand on)."""
    if error.verdict_text is not None and error.verdict_exit_code is not None:
        code = ExitCode(error.verdict_exit_code)
        say("\n" + error.verdict_text)
        say(f"\nverdict: exit code {int(code)} ({code.name}), but it could not be saved")
    complain(_capped(redact_text(
        f"vllm-slo: error: {error} (exit 4: the environment failed to keep the outputs; "
        f"free space or permissions, then `vllm-slo report RUN_DIR` renders them again)")))
    return int(ExitCode.INVALID_MEASUREMENT)


def _report_environment(error: OSError, arguments: Sequence[str], complain: Writer) -> int:
    """An OSError naming a file (a read-only cache folder, a full disk): the path and the
    system's reason, exit 4, its traceback logged."""
    where = _crash_log(error, arguments)
    complain(_capped(redact_text(
        f"vllm-slo: error: cannot use {error.filename}: {error.strerror or error} (exit 4, "
        f"not a verdict); {where}")))
    return int(ExitCode.INVALID_MEASUREMENT)


#: `run`'s flags without a value: argparse ends `key=value ...` at the first flag, so
#: `run scenario=X --force key=v` would leave `key=v` unrecognised; they are moved up front
_RUN_SWITCHES = frozenset({"--force"})
_GLOBAL_VALUED = frozenset({"--runs-dir"})  # the parser's options before the command that
# take a value as the next argument (`--runs-dir=D` is one argument)


def _flags_first(arguments: list[str]) -> list[str]:
    """`run`'s switches anywhere among its `key=value` arguments, moved before them (the
    global `--runs-dir DIR` may stand before `run`)."""
    start = 0
    while start < len(arguments) and arguments[start].startswith("-"):
        start += 2 if arguments[start] in _GLOBAL_VALUED else 1  # `--runs-dir D`, or a switch
    if start >= len(arguments) or arguments[start] != "run":
        return arguments
    head, rest = arguments[:start + 1], arguments[start + 1:]
    switches = [a for a in rest if a in _RUN_SWITCHES]
    return [*head, *switches, *(a for a in rest if a not in _RUN_SWITCHES)]


def main(argv: Sequence[str] | None = None, say: Writer = _stdout,
         complain: Writer = _stderr) -> int:
    """Parse, call, print through `say` (errors through `complain`), return the exit code."""
    encodable_output()
    arguments = list(sys.argv[1:] if argv is None else argv)
    if arguments and "=" in arguments[0] and not arguments[0].startswith("-"):
        arguments = ["run", *arguments]  # `vllm-slo scenario=chat` == `vllm-slo run ...`
    arguments = _flags_first(arguments)
    try:
        options = _parser().parse_args(arguments)
    except SystemExit as exit_:
        return ExitCode.USAGE_ERROR if exit_.code else ExitCode.PASS
    stop = StopSignals(complain)
    signal.signal(signal.SIGTERM, stop)
    # Ctrl-C stops a run even when the CLI was started with SIGINT ignored (a background job
    # of a non-interactive shell inherits SIG_IGN, and Python then keeps it)
    signal.signal(signal.SIGINT, stop)
    try:
        load_plugins()  # modules that register metrics or profiles (VLLM_SLO_PLUGINS)
        outcome = _dispatch(options, say)
        if outcome.text:
            say(outcome.text)
        return int(outcome.exit_code)
    except OutputWriteError as error:
        return _report_write_failure(error, say, complain)
    except SloSuiteError as error:
        complain(_capped(redact_text(f"vllm-slo: error: {error}")))
        return int(error.exit_code)
    except KeyboardInterrupt:  # a signal outside the run's own handling (or a third one)
        complain(INTERRUPTED_MESSAGE)
        return int(ExitCode.INVALID_MEASUREMENT)
    except OSError as error:
        if error.filename is not None:
            return _report_environment(error, arguments, complain)
        return _report_crash(error, arguments, complain)
    except Exception as error:  # a crash must never read as a verdict
        return _report_crash(error, arguments, complain)
    except BaseException as error:  # sys.exit() in a plugin: never the exit code
        return _report_crash(error, arguments, complain)


if __name__ == "__main__":
    sys.exit(main())
