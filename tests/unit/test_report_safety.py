"""Safe to open: every text shown is escaped, Plotly JSON cannot break out of its <script>, and
no credential reaches an output file. (The browser proves nothing executes:
tests/browser/test_report_browser.py.)"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from tests.support import synthetic as synthesis
from vllm_slo.redaction import REDACTED, redact_secrets, redact_text
from vllm_slo.reports.render.html import script_json
from vllm_slo.reports.run_report import render_run

SCRIPT = "<script>alert(1)</script>"
IMG = '"><img src=x onerror=alert(1)>'
SECRETS = ("hf_SECRETvalue123", "sk-SECRETkey456", "s3cr3t-pass", "Zm9vOmJhcg-bearer")


def hostile_run(root: Path) -> Path:
    """Error texts, the scenario description, the run folder's name, provenance and /metrics
    label values carry markup; provenance and scenario carry credentials."""
    errors = (f"{SCRIPT}: boom", f"HTTP 500: {IMG}", f"SSE error event: {SCRIPT}{IMG}")
    table = synthesis.synthetic_table(600, chunks=6, warmup_s=2.0, duration_s=20.0,
                                      failure_fraction=0.05, error_texts=errors, seed=5)
    scenario = synthesis.scenario_document(
        "hostile", duration_s=20.0, warmup_s=2.0, description=f"{SCRIPT} and {IMG}")
    scenario["server"]["env"] = {"HF_TOKEN": SECRETS[0], "OPENAI_API_KEY": SECRETS[1],
                                 "VLLM_LOGGING_LEVEL": "INFO"}
    provenance = synthesis.synthetic_provenance()
    provenance["command_line"] = ["vllm-slo", "run", "scenario=hostile",
                                  f"server.env.HF_TOKEN={SECRETS[0]}"]
    provenance["launch"]["argv"] += ["--api-key", SECRETS[1]]
    provenance["launch"]["env_overrides"]["DB_PASSWORD"] = SECRETS[2]
    provenance["server_url"] = f"http://user:{SECRETS[2]}@127.0.0.1:8000"
    provenance["note"] = f"Authorization: Bearer {SECRETS[3]} {SCRIPT}"
    records = synthesis.synthetic_server_records(22.0)
    for record in records:
        record["values"][f'vllm:num_requests_running{{engine="{IMG}"}}'] = 1.0
    return synthesis.write_run_folder(root / f"20270115T120000Z-hostile-{IMG}", table, scenario,
                                      provenance=provenance, server_records=records)


@pytest.fixture(scope="module")
def hostile(tmp_path_factory: pytest.TempPathFactory):
    return render_run(hostile_run(tmp_path_factory.mktemp("hostile")))


def _outputs(result) -> dict[str, str]:
    return {path.name: path.read_text(encoding="utf-8")
            for path in (result.report_path, result.summary_path, result.junit_path,
                         result.markdown_path)}


def test_markup_in_data_is_escaped_in_the_html(hostile) -> None:
    html = hostile.report_path.read_text(encoding="utf-8")
    # the only <script> elements are ours: plotly.js, the JSON specs and the loader
    opening = re.findall(r"<script[^>]*>", html)
    assert set(opening) <= {"<script>", '<script type="application/json" id="fig-ecdf-spec">',
                            *(f'<script type="application/json" id="fig-{n}-spec">'
                              for n in ("timeline", "throughput", "server", "health"))}
    assert "alert(1)</script>" not in html
    assert "<img" not in html
    assert "onerror=alert(1)>" not in html.replace("\\u003e", "")  # only escaped forms
    escaped_script = "&lt;script&gt;alert(1)&lt;/script&gt;"
    escaped_img = "&#34;&gt;&lt;img src=x onerror=alert(1)&gt;"
    assert html.count(escaped_script) >= 3  # description, error kind, error example
    assert escaped_img in html  # run id in title/header, description, error text


def test_plotly_json_is_escaped_inside_script_elements(hostile) -> None:
    html = hostile.report_path.read_text(encoding="utf-8")
    specs = re.findall(r'<script type="application/json" id="[^"]+">(.*?)</script>', html,
                       flags=re.S)
    assert len(specs) == 5
    for spec in specs:
        assert "<" not in spec and ">" not in spec and "&" not in spec
        parsed = json.loads(spec)  # \u escapes are plain JSON: the data comes back unchanged
        assert set(parsed) >= {"data", "layout"}


def test_script_json_escapes_everything_that_could_end_the_element() -> None:
    payload = json.dumps({"name": "</script><script>alert(1)</script><!--", "x": "a&b",
                          "ls": "\u2028\u2029"})
    escaped = str(script_json(payload))
    for forbidden in ("<", ">", "&", "\u2028", "\u2029"):
        assert forbidden not in escaped
    assert json.loads(escaped) == json.loads(payload)


def test_no_credential_in_any_output_file(hostile) -> None:
    for name, text in _outputs(hostile).items():
        for secret in SECRETS:
            assert secret not in text, (name, secret)
    provenance = hostile.summary["provenance"]
    assert provenance["launch"]["env_overrides"]["DB_PASSWORD"] == REDACTED
    assert provenance["launch"]["env_overrides"]["VLLM_NO_USAGE_STATS"] == "1"
    assert provenance["command_line"][-1] == f"server.env.HF_TOKEN={REDACTED}"
    assert hostile.summary["scenario"]["server"]["env"] == {
        "HF_TOKEN": REDACTED, "OPENAI_API_KEY": REDACTED, "VLLM_LOGGING_LEVEL": "INFO"}
    # settings whose names merely contain "tokens" survive
    assert "--max-num-batched-tokens 2048" in hostile.report_path.read_text(encoding="utf-8")


def test_markdown_and_junit_carry_no_markup(hostile) -> None:
    outputs = _outputs(hostile)
    assert "<img" not in outputs["summary.md"] and "<script" not in outputs["summary.md"]
    assert "&lt;img src=x onerror=alert\\(1\\)&gt;" in outputs["summary.md"]  # run id, escaped
    assert "<img" not in outputs["junit.xml"] and "<script" not in outputs["junit.xml"]


@pytest.mark.parametrize(("value", "expected"), [
    ({"HF_TOKEN": "hf_x", "max_tokens": 64, "max-num-batched-tokens": 2048,
      "tokenizer": "/models/tok", "api_key_env": "MY_KEY", "password": ""},
     {"HF_TOKEN": REDACTED, "max_tokens": 64, "max-num-batched-tokens": 2048,
      "tokenizer": "/models/tok", "api_key_env": "MY_KEY", "password": ""}),
    ({"nested": {"AWS_SECRET_ACCESS_KEY": "abc", "TOKENIZERS_PARALLELISM": "false"}},
     {"nested": {"AWS_SECRET_ACCESS_KEY": REDACTED, "TOKENIZERS_PARALLELISM": "false"}}),
    (["serve", "--api-key", "sk-1", "--max-num-batched-tokens", "2048", "--auth=xyz",
      "server.env.VLLM_API_KEY=sk-2", "traffic.chat.max_tokens=64"],
     ["serve", "--api-key", REDACTED, "--max-num-batched-tokens", "2048", f"--auth={REDACTED}",
      f"server.env.VLLM_API_KEY={REDACTED}", "traffic.chat.max_tokens=64"]),
    ({"credentials": ["a", "b"], "Authorization": "Bearer abc"},
     {"credentials": [REDACTED, REDACTED], "Authorization": REDACTED}),
])
def test_redaction_rule(value, expected) -> None:
    assert redact_secrets(value) == expected


def test_redaction_in_free_text() -> None:
    assert redact_text("https://bob:pw@host/x and http://host/y") == (
        f"https://{REDACTED}@host/x and http://host/y")
    assert redact_text("header Authorization: Bearer abc.def-ghi, next") == (
        f"header Authorization: Bearer {REDACTED}, next")


# ------------------------------------------------------------------------------------------
# the experiment and comparison pages

PAYLOAD = f"{SCRIPT} {IMG} 'single' \"double\""


@pytest.fixture(scope="module")
def hostile_pages(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """An experiment and a comparison whose free text (description, server args, provenance,
    failure texts, run folder names) carries markup."""
    from vllm_slo.reports.experiment_report import render_experiment
    from vllm_slo.saved_runs import compare_saved_runs

    root = tmp_path_factory.mktemp("hostile-pages")
    first = synthesis.write_hostile_experiment(root / f"exp-<script>alert(1)-{IMG}", PAYLOAD)
    second = synthesis.write_hostile_experiment(root / f"other-{IMG}", PAYLOAD, seed=1)
    experiment_page = render_experiment(first).report_path
    compared = compare_saved_runs([first, second], None, 0.05, root / "cmp")
    assert compared.report_path is not None
    return {"experiment": experiment_page, "comparison": compared.report_path}


@pytest.mark.parametrize("page", ["experiment", "comparison"])
def test_markup_on_the_experiment_pages_is_escaped(hostile_pages, page: str) -> None:
    html = hostile_pages[page].read_text(encoding="utf-8")
    opening = set(re.findall(r"<script[^>]*>", html))
    assert opening == {"<script>", '<script type="application/json" id="fig-trials-spec">',
                       '<script type="application/json" id="fig-ecdf-spec">'}
    assert "alert(1)</script>" not in html and "<img" not in html
    assert "onerror=alert(1)>" not in html.replace("\\u003e", "")
    escaped = "&lt;script&gt;alert(1)&lt;/script&gt; &#34;&gt;&lt;img src=x onerror=alert(1)&gt;"
    assert html.count(escaped) >= 3  # description/scenario, server args, provenance, failure
    for spec in re.findall(r'<script type="application/json" id="[^"]+">(.*?)</script>', html,
                           flags=re.S):
        assert "<" not in spec and ">" not in spec
        json.loads(spec)


def test_compared_run_names_reach_plot_labels_entity_escaped(hostile_pages) -> None:
    html = hostile_pages["comparison"].read_text(encoding="utf-8")
    spec = re.search(r'id="fig-trials-spec">(.*?)</script>', html, flags=re.S)
    assert spec is not None
    names = {trace.get("name") for trace in json.loads(spec.group(1))["data"]} - {None}
    assert names and all("<" not in name for name in names)
    assert any("&lt;script&gt;alert(1)" in name for name in names)  # Plotly shows it as text


def test_no_credential_on_the_experiment_pages(tmp_path: Path) -> None:
    from vllm_slo.reports.experiment_report import render_experiment
    from vllm_slo.saved_runs import compare_saved_runs

    runs = []
    for index in range(2):
        runs.append(synthesis.write_synthetic_experiment(
            tmp_path / f"e{index}", {"a": 0.05, "b": 0.06}, trials=2, noise=0.05, seed=index,
            variant_patches={"b": {"server": {"args": {"api-key": SECRETS[1]}}}},
            provenance={name: {"launch": {"engine_args": {"api-key": SECRETS[0],
                                                          "max-num-seqs": 16 + k}}}
                        for k, name in enumerate("ab")}))
    rendered = render_experiment(runs[0])
    compared = compare_saved_runs(runs, None, 0.05, tmp_path / "cmp")
    assert rendered.summary["provenance_differences"]["engine_args"]["a"] == {
        "api-key": REDACTED, "max-num-seqs": 16}
    assert rendered.summary["variants"]["b"]["server_args"]["api-key"] == REDACTED
    for path in (rendered.summary_path, rendered.report_path, tmp_path / "cmp" / "summary.json",
                 compared.report_path):
        assert path is not None
        text = path.read_text(encoding="utf-8")
        assert SECRETS[0] not in text and SECRETS[1] not in text, path


def test_a_server_error_carries_no_secret_of_the_scenario(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A start-up failure quotes the server's log, where vLLM echoes its arguments: the error
    that reaches the terminal (and a tune's start_failure.json) has the scenario's secrets
    — the URL's password, the API key's value — replaced, like the log itself."""
    from vllm_slo import runner
    from vllm_slo.scenarios.errors import ServerError
    from vllm_slo.scenarios.model import Scenario

    class Unready:
        def __init__(self, *_args: object) -> None:
            self.on_waiting = None

        def __enter__(self) -> None:
            raise ServerError("vLLM exited with code 1; last lines:\nnon-default args: "
                              "{'api_key': ['sk-live-7f3a'], 'url': "
                              "'http://ops:hunter2pass@127.0.0.1:9'} hunter2pass")

        def __exit__(self, *_exc: object) -> None:
            return None

    monkeypatch.setattr(runner, "AttachedServer", Unready)
    monkeypatch.setenv("VLLM_SLO_TEST_KEY", "sk-live-7f3a")
    scenario = Scenario.model_validate({"name": "x", "server": {
        "url": "http://ops:hunter2pass@127.0.0.1:9", "api_key_env": "VLLM_SLO_TEST_KEY"}})
    (tmp_path / "run").mkdir()
    with pytest.raises(ServerError) as raised:
        runner.run_trial(scenario, tmp_path / "run", lambda _text: None)
    text = str(raised.value)
    assert "sk-live-7f3a" not in text and "hunter2pass" not in text, text
    assert text == ("vLLM exited with code 1; last lines:\nnon-default args: "
                    f"{{'api_key': ['{REDACTED}'], 'url': 'http://{REDACTED}@127.0.0.1:9'}} "
                    f"{REDACTED}")
