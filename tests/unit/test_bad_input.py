"""Bad input is refused clearly (issue 17, "Bad input"): every malformed scenario, override or
data file gives exit code 2 and one message naming the file, the dotted key, the bad value and
what is allowed. Scenario cases go through `load_scenario` and through the CLI (`main`, the
message printed once on the error stream); the cases only a run can meet (the ShareGPT file,
a max-model-len the prompts do not fit, vLLM rejecting a flag) through the functions that
decide them."""

from __future__ import annotations

import json
import signal
from dataclasses import dataclass
from pathlib import Path

import pytest

from vllm_slo.cli import main
from vllm_slo.runner import prepare_plan
from vllm_slo.scenarios.errors import ExitCode, ScenarioError, ServerConfigError
from vllm_slo.scenarios.loader import load_scenario
from vllm_slo.scenarios.server_spec import ServerSpec
from vllm_slo.scenarios.traffic_spec import TrafficSpec
from vllm_slo.servers.vllm_server import VllmServer, plan_launch

BASE = "name: bad\n"
MARKER = "constructed.txt"  # what an unsafe YAML load of the python/object cases would create


@dataclass(frozen=True)
class Case:
    id: str
    text: str  # the scenario file ({marker}: a path in the test's folder)
    expect: tuple[str, ...]  # besides the file: dotted key, bad value, what is allowed
    overrides: tuple[str, ...] = ()


CASES = [
    # wrong types
    Case("users-not-an-integer", BASE + "traffic: {arrival: {users: many}}\n",
         ("traffic.arrival.users = 'many'", "valid integer")),
    Case("args-not-a-mapping", BASE + "server: {args: [a, b]}\n",
         ("server.args = ['a', 'b']", "valid dictionary")),
    Case("slo-rules-not-a-list", BASE + "slo: {ttft: 'p95 < 1s'}\n",
         ("slo.ttft = 'p95 < 1s'", "valid list")),
    Case("seed-fractional-override", BASE, (
        "traffic.seed = 1.5", "(from command-line override 'traffic.seed=1.5')",
        "valid integer"), ("traffic.seed=1.5",)),
    Case("workers-zero", BASE + "traffic: {workers: 0}\n",
         ("traffic.workers = 0", "'auto' or a whole number of processes from 1 to 256")),
    Case("name-with-spaces", "name: my scenario\n",
         ("name = 'my scenario'", "should match pattern")),
    Case("name-missing", "trials: 2\n", ("name: Field required",)),
    # unknown keys
    Case("unknown-top-level-key", BASE + "trails: 3\n",
         ("trails = 3", "unknown key; allowed keys here:", "trials", "variants")),
    Case("unknown-nested-key-override", BASE, (
        "traffic.arrival.user = 4", "(from command-line override 'traffic.arrival.user=4')",
        "unknown key; allowed keys here: kind, users"), ("traffic.arrival.user=4",)),
    # negative or zero durations
    Case("duration-negative-number", BASE + "traffic: {duration: -5}\n",
         ("traffic.duration = -5", "a duration cannot be negative")),
    Case("duration-negative-text", BASE + "traffic: {duration: -5s}\n",
         ("traffic.duration = '-5s'", "a duration like 30s, 500ms or 2m")),
    Case("duration-zero", BASE + "traffic: {duration: 0s}\n",
         ("traffic.duration = 0.0", "greater than 0")),
    Case("stage-duration-zero",
         BASE + "traffic: {arrival: {kind: stages, stages: [{duration: 0, rate: 1}]}}\n",
         ("traffic.arrival.stages.0.duration = 0.0", "greater than 0")),
    Case("ready-timeout-zero", BASE + "server: {ready_timeout: 0}\n",
         ("server.ready_timeout = 0.0", "greater than 0")),
    Case("think-time-negative-override", BASE, (
        "traffic.arrival.think_time = '-1s'", "a duration like 30s, 500ms or 2m"),
        ("traffic.arrival.think_time=-1s",)),
    # percentiles outside (0, 100)
    Case("slo-p0", BASE + "slo: {ttft: ['p0 < 1s']}\n",
         ("slo.ttft = ['p0 < 1s']", "strictly between 0 and 100, got 'p0'")),
    Case("slo-p101", BASE + "slo: {e2e: ['p101 < 1s']}\n",
         ("slo.e2e = ['p101 < 1s']", "strictly between 0 and 100, got 'p101'")),
    Case("compare-cell-p101", BASE + "compare: {cells: [ttft.p101]}\n",
         ("compare.cells.0 = 'ttft.p101'", "strictly between 0 and 100, got 'p101'")),
    Case("compare-cell-p100", BASE + "compare: {cells: [ttft.p50, itl.p100]}\n",
         ("compare.cells.1 = 'itl.p100'", "strictly between 0 and 100, got 'p100'")),
    Case("compare-cell-statistic", BASE + "compare: {cells: [ttft.median]}\n",
         ("compare.cells.0 = 'ttft.median'",
          "ttft takes pNN (0 < NN < 100) or mean, got 'median'")),
    Case("compare-cell-unknown", BASE + "compare: {cells: [goodput.mean]}\n",
         ("compare.cells.0 = 'goodput.mean'", "expected metric.statistic: ttft with pNN")),
    # malformed SLO expressions
    Case("slo-no-threshold", BASE + "slo: {ttft: ['p95 < ']}\n",
         ("slo.ttft = ['p95 < ']", "'<statistic> <comparator> <duration>'", "'p95 < 2s'")),
    Case("slo-metric-as-statistic", BASE + "slo: {ttft: ['ttft < banana']}\n",
         ("slo.ttft = ['ttft < banana']", "got 'ttft < banana'",
          "statistic pNN with 0 < NN < 100, or mean")),
    Case("slo-threshold-not-a-duration", BASE + "slo: {itl: ['p95 < banana']}\n",
         ("slo.itl = ['p95 < banana']", "threshold 'banana'", "2s, 500ms or 1.5 (seconds)")),
    Case("slo-error-rate-wrong-comparator", BASE + "slo: {error_rate: '> 1%'}\n",
         ("slo.error_rate = '> 1%'", "'< 1%' or '<= 0.01' (comparator < or <=)")),
    Case("slo-error-rate-above-100", BASE + "slo: {error_rate: '< 200%'}\n",
         ("slo.error_rate = '< 200%'", "between 0% and 100%")),
    Case("slo-throughput-wrong-unit", BASE + "slo: {output_throughput: '> 100 req/s'}\n",
         ("slo.output_throughput = '> 100 req/s'", "expected '> N tok/s'")),
    Case("abort-on-wrong-comparator", BASE + "abort_on: {error_rate: '< 50%'}\n",
         ("abort_on.error_rate = '< 50%'", "expected '> 50%' or '>= 0.5'")),
    # unknown profile or arrival kind
    Case("unknown-profile", BASE, (
        "traffic.profile = 'chat2'", "'chat', 'long-doc', 'sharegpt', 'mix', 'trace' or 'agent'"),
        ("traffic.profile=chat2",)),
    Case("unknown-arrival-kind", BASE + "traffic: {arrival: {kind: burst}}\n",
         ("traffic.arrival.kind = 'burst'",
          "'closed', 'poisson', 'gamma', 'constant', 'stages' or 'trace'")),
    # conflicting arrival settings
    Case("closed-loop-with-rate", BASE + "traffic: {arrival: {kind: closed, rate: 5}}\n",
         ("traffic.arrival: rate = 5.0", "only used with the open-loop kinds (poisson, gamma, "
          "constant); kind 'closed' is driven by users")),
    Case("stages-with-rate", BASE + "traffic: {arrival: {kind: stages, rate: 5, stages: "
         "[{duration: 1s, rate: 1}]}}\n",
         ("traffic.arrival: rate = 5.0", "kind 'stages' sets a rate per stage")),
    Case("open-loop-with-think-time",
         BASE + "traffic: {arrival: {kind: poisson, rate: 5, think_time: 1s}}\n",
         ("traffic.arrival: think_time = 1.0s", "only used by closed-loop users")),
    Case("open-loop-without-rate", BASE + "traffic: {arrival: {kind: gamma}}\n",
         ("traffic.arrival", "arrival kind 'gamma' needs rate (requests per second)")),
    Case("stage-with-rate-and-users", BASE + "traffic: {arrival: {kind: stages, stages: "
         "[{duration: 1s, rate: 1, users: 2}]}}\n",
         ("traffic.arrival.stages.0", "exactly one of rate (req/s) or users, got rate = 1.0, "
          "users = 2")),
    Case("stages-without-kind-stages",
         BASE + "traffic: {arrival: {kind: closed, stages: [{duration: 1s, users: 2}]}}\n",
         ("traffic.arrival", "stages are only used with kind 'stages', not 'closed'")),
    Case("processes-and-workers", BASE + "traffic: {processes: 2, workers: 3}\n",
         ("traffic", "processes (2) and workers (3) both given: use workers")),
    # YAML that is not a mapping
    Case("top-level-list", "- name: a\n- name: b\n",
         ("expected a mapping at the top level, got [{'name': 'a'}, {'name': 'b'}]",)),
    Case("top-level-scalar", "just text\n",
         ("expected a mapping at the top level, got 'just text'",)),
    Case("not-yaml", "name: [unclosed\n", ("not valid YAML", "line 2")),
    # duplicate keys
    Case("duplicate-variant-names",
         BASE + "variants:\n  fast: {}\n  fast: {server: {args: {max-num-seqs: 16}}}\n",
         ("variants.fast: given twice (lines 3 and 4)", "each key may appear once per mapping")),
    Case("duplicate-top-level-key", BASE + "trials: 2\ntrials: 3\n",
         ("trials: given twice (lines 2 and 3)", "each key may appear once per mapping")),
    Case("duplicate-engine-arg", BASE + "server:\n  args:\n    block-size: 32\n"
         "    block-size: 64\n", ("server.args.block-size: given twice (lines 4 and 5)",)),
    # variants overriding what does not exist
    Case("variant-unknown-nested-key", BASE + "variants: {b: {traffic: {arrival: {userz: 3}}}}\n",
         ("variants.b: traffic.arrival.userz = 3", "unknown key; allowed keys here: kind, users")),
    Case("variant-unknown-section", BASE + "variants: {b: {server: {argz: {x: 1}}}}\n",
         ("variants.b: server.argz", "unknown key; allowed keys here: model, url")),
    Case("variant-top-level-key", BASE + "variants: {b: {trials: 3}}\n",
         ("variants", "variant 'b' may override server, traffic, slo, description, not trials")),
    Case("variant-bad-value", BASE + "variants: {a: {}, b: {traffic: {duration: -1}}}\n",
         ("variants.b: traffic.duration = -1", "a duration cannot be negative")),
    # placement: server.devices and side_by_side
    Case("devices-repeated", BASE + "server: {devices: [0, 0]}\n",
         ("server", "server.devices lists a device twice: [0, 0]")),
    Case("devices-in-attach-mode", BASE + "server: {url: 'http://127.0.0.1:8000', "
         "devices: [1]}\n", ("server", "attach mode (server.url) targets one that already runs")),
    Case("devices-and-their-env-var", BASE + "server: {devices: [1], env: "
         "{CUDA_VISIBLE_DEVICES: '2'}}\n", ("server", "server.devices sets CUDA_VISIBLE_DEVICES")),
    Case("side-by-side-slot-count", BASE + "variants: {a: {}, b: {}}\nside_by_side: "
         "{devices: [[0], [1], [2]]}\n",
         ("side_by_side.devices has 3 slots for 2 variant(s): one slot per variant",)),
    Case("side-by-side-shared-device", BASE + "variants: {a: {}, b: {}}\nside_by_side: "
         "{devices: [[0, 1], [1]]}\n", ("side_by_side.devices", "device(s) [1] in more than "
                                       "one place: each slot needs devices of its own")),
    Case("side-by-side-one-slot", BASE + "variants: {a: {}}\nside_by_side: {devices: [[0]]}\n",
         ("side_by_side.devices", "at least 2 items")),
    Case("side-by-side-with-variant-devices", BASE + "variants: {a: {}, b: {server: "
         "{devices: [3]}}}\nside_by_side: {devices: [[0], [1]]}\n",
         ("variant 'b': server.devices — side_by_side places every variant",)),
    Case("side-by-side-in-attach-mode", BASE + "server: {url: 'http://127.0.0.1:8000'}\n"
         "variants: {a: {}, b: {}}\nside_by_side: {devices: [[0], [1]]}\n",
         ("side_by_side launches a server per variant",)),
    # vLLM args the suite can refuse before launch (flag syntax)
    Case("engine-arg-with-dashes", BASE + "server: {args: {--max-model-len: 512}}\n",
         ("server.args", "got '--max-model-len'", "vLLM flag names without leading dashes")),
    Case("engine-arg-with-spaces-override", BASE, (
        "server.args", "got 'max model len'", "e.g. 'max-model-len'"),
        ("server.args.max model len=512",)),
    Case("engine-arg-value-wrong-type", BASE + "server: {args: {block-size: [1, {a: 1}]}}\n",
         ("invalid scenario (1 problem(s))\n  server.args.block-size = [1, {'a': 1}]: expected "
          "a string, an integer, a number, true/false, a list of scalars or a mapping",)),
    # override syntax errors on the command line
    Case("override-without-equals", BASE, (
        "command-line argument 'traffic.duration' is not a 'dotted.key=value' override",),
        ("traffic.duration",)),
    Case("override-without-key", BASE, (
        "command-line argument '=30s' is not a 'dotted.key=value' override",), ("=30s",)),
    Case("override-empty-key-part", BASE, (
        "command-line argument 'traffic..duration=30s' is not a 'dotted.key=value'",),
        ("traffic..duration=30s",)),
    Case("override-value-not-yaml", BASE, (
        "override 'traffic.duration=[30s': value '[30s' is not valid YAML",),
        ("traffic.duration=[30s",)),
    Case("override-into-a-scalar", BASE, (
        "override 'name.x=1': 'name' holds 'bad', not a mapping, so it has no key 'x'",),
        ("name.x=1",)),
    # YAML is loaded safely: no object construction
    Case("python-object-in-file",
         BASE + "description: !!python/object/apply:os.system ['touch {marker}']\n",
         ("not valid YAML", "could not determine a constructor for the tag",
          "python/object/apply:os.system")),
    Case("python-object-in-override", BASE, (
        "override \"description=!!python/object/apply:os.system ['touch {marker}']\"",
        "is not valid YAML", "could not determine a constructor"),
        ("description=!!python/object/apply:os.system ['touch {marker}']",)),
]


@pytest.fixture
def restore_sigterm():
    """`main` installs a SIGTERM handler; give the test process its own back."""
    previous = signal.getsignal(signal.SIGTERM)
    yield
    signal.signal(signal.SIGTERM, previous)


def _run_cli(argv: list[str]) -> tuple[int, list[str], list[str]]:
    said: list[str] = []
    complained: list[str] = []
    return main(argv, said.append, complained.append), said, complained


@pytest.mark.parametrize("case", CASES, ids=[case.id for case in CASES])
def test_bad_scenario_is_refused_with_a_clear_message(case: Case, tmp_path: Path,
                                                      restore_sigterm: None) -> None:
    marker = tmp_path / MARKER
    file = tmp_path / f"{case.id}.yaml"
    file.write_text(case.text.replace("{marker}", str(marker)))
    overrides = [text.replace("{marker}", str(marker)) for text in case.overrides]
    with pytest.raises(ScenarioError) as caught:
        load_scenario(str(file), overrides)
    message = str(caught.value)
    assert caught.value.exit_code == ExitCode.USAGE_ERROR
    assert message.startswith(f"{file}: "), message
    for expected in case.expect:
        assert expected.replace("{marker}", str(marker)) in message, (expected, message)
    # the same through the command line: exit 2, the message once on the error stream
    code, said, complained = _run_cli(["run", f"scenario={file}", *overrides])
    assert (code, said, complained) == (2, [], [f"vllm-slo: error: {message}"])
    assert not marker.exists()  # nothing was constructed or executed


def test_enough_bad_scenario_cases() -> None:
    assert len({case.id for case in CASES}) == len(CASES) >= 25


@pytest.mark.parametrize(("argv", "expect"), [
    (["run", "traffic.duration=30s"], ("which scenario? pass scenario=NAME", "chat")),
    (["run", "scenario=no-such-scenario"],
     ("'no-such-scenario' is neither a shipped scenario", "chat", "a path to a .yaml file")),
    (["run", "scenario=missing/dir/s.yaml"],
     ("scenario file 'missing/dir/s.yaml' does not exist",)),
], ids=["no-scenario", "unknown-scenario-name", "missing-scenario-file"])
def test_no_usable_scenario_reference(argv: list[str], expect: tuple[str, ...],
                                      restore_sigterm: None) -> None:
    code, said, complained = _run_cli(argv)
    assert code == 2 and said == [] and len(complained) == 1
    for expected in expect:
        assert expected in complained[0], (expected, complained)


def test_bad_command_line_syntax_is_exit_2(restore_sigterm: None, capsys) -> None:
    code, said, _ = _run_cli(["gate", "runs/x", "--margin", "five"])
    assert code == 2 and said == []
    assert "expected a percentage like 5% or 0.05, got 'five'" in capsys.readouterr().err


# --------------------------------------------------------- decided when the plan is built
@dataclass(frozen=True)
class PlanCase:
    id: str
    traffic: dict
    data: str | None  # the ShareGPT file's text (None: no file written)
    max_model_len: int
    expect: tuple[str, ...]  # {data}: the ShareGPT file's path


SHAREGPT = {"profile": "sharegpt", "sharegpt": {"path": "{data}"}}
SHORT_CHAT = {"duration": "1s", "warmup": "0s", "arrival": {"users": 1}}
PLAN_CASES = [
    PlanCase("sharegpt-missing", SHAREGPT, None, 2048,
             ("traffic.sharegpt: {data}: no such ShareGPT file",)),
    PlanCase("sharegpt-not-json", SHAREGPT, "{not json", 2048,
             ("traffic.sharegpt: {data}: not valid JSON", "line 1 column 2")),
    PlanCase("sharegpt-not-a-list", SHAREGPT, json.dumps({"conversations": []}), 2048,
             ("traffic.sharegpt: {data}: a ShareGPT file is a JSON list of",
              '{"id", "conversations": [{"from", "value"}, ...]} entries, got a JSON dict')),
    PlanCase("sharegpt-empty-list", SHAREGPT, "[]", 2048,
             ("traffic.sharegpt: {data}: the ShareGPT file holds no conversations",)),
    PlanCase("sharegpt-entries-malformed", SHAREGPT,
             json.dumps(["a", {"conversations": "x"}, {"conversations": [{"from": "human"}]}]),
             2048, ("traffic.sharegpt: {data}: no request passes the filters (malformed 3)",)),
    PlanCase("sharegpt-max-model-len-below-every-prompt",
             {**SHAREGPT, "overlong": "reject"},
             json.dumps([{"id": str(k), "conversations": [
                 {"from": "human", "value": "tell me a story " * 8},
                 {"from": "gpt", "value": "once upon a time " * 8}]} for k in range(3)]),
             16, ("longer than the server's max-model-len 16: ",
                  "raise server.args.max-model-len or set traffic.overlong=trim")),
    PlanCase("max-model-len-below-every-prompt",
             {**SHORT_CHAT, "overlong": "reject",
              "chat": {"system_prompt_tokens": 200, "output_tokens": 16}}, None, 100,
             ("traffic.chat: ", "do not fit max-model-len 100 with max_tokens 16",
              "lower the prompt/output lengths or raise max-model-len")),
    PlanCase("max-model-len-below-max-tokens",
             {**SHORT_CHAT, "chat": {"system_prompt_tokens": 0, "output_tokens": 64}}, None, 32,
             ("traffic.chat: ", "do not fit max-model-len 32 with max_tokens 64")),
    PlanCase("max-model-len-leaves-no-room-for-a-document", {"profile": "long-doc"}, None, 200,
             ("traffic.long-doc: max-model-len 200 leaves no room for a document with "
              "output_tokens 256",)),
]


@pytest.mark.parametrize("case", PLAN_CASES, ids=[case.id for case in PLAN_CASES])
def test_unusable_prompts_are_refused_before_the_run(case: PlanCase, tmp_path: Path,
                                                     tiny_tokenizer_file: Path) -> None:
    data = tmp_path / "conversations.json"
    if case.data is not None:
        data.write_text(case.data)
    spec = json.loads(json.dumps(case.traffic).replace("{data}", str(data)))
    traffic = TrafficSpec.model_validate({**spec, "tokenizer": str(tiny_tokenizer_file)})
    with pytest.raises(ScenarioError) as caught:
        prepare_plan(traffic, None, "http://127.0.0.1:9", "m", case.max_model_len,
                     tmp_path / "run")
    assert caught.value.exit_code == ExitCode.USAGE_ERROR
    for expected in case.expect:
        assert expected.replace("{data}", str(data)) in str(caught.value), (
            expected, str(caught.value))
    assert not (tmp_path / "run" / "requests.parquet").exists()


# ------------------------------------------------ unknown vLLM args: vLLM's parser decides
class _ExitedProcess:
    returncode = 2

    def poll(self) -> int:
        return self.returncode


def test_unknown_vllm_arg_is_a_configuration_error(tmp_path: Path) -> None:
    """A flag vLLM does not know passes the suite's name check, goes on the command line, and
    vLLM's own rejection (the line vLLM 0.32 prints) becomes exit 2 naming the flag."""
    spec = ServerSpec(args={"max-modle-len": 2048})
    plan = plan_launch(spec, "gpu", "/models/m", 8000)
    assert plan.argv[-2:] == ("--max-modle-len", "2048")
    log = tmp_path / "server.log"
    log.write_text("usage: vllm [-h] [-v]\n"
                   "vllm: error: unrecognized arguments: --max-modle-len 2048\n")
    server = VllmServer(plan, log, 1.0)
    server.process = _ExitedProcess()  # type: ignore[assignment]
    with pytest.raises(ServerConfigError) as caught:
        server.failure()
    assert caught.value.exit_code == ExitCode.USAGE_ERROR
    message = str(caught.value)
    assert "vLLM rejected the server configuration (exit 2)" in message
    assert "unrecognized arguments: --max-modle-len 2048" in message
    assert f"log: {log}" in message
