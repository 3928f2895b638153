"""provenance.json as a typed model: what the runner and the vllm-bench import write is what
the reports read; an unknown key (an older or newer folder) is skipped, a wrong type named,
and credentials never reach the file."""

from __future__ import annotations

import json
import secrets
from pathlib import Path

import pytest
from pydantic import ValidationError

from tests.support.synthetic import synthetic_provenance
from vllm_slo.redaction import redact_secrets
from vllm_slo.run_folder.provenance import Provenance
from vllm_slo.run_folder.run_files import PROVENANCE_FILE


def test_a_written_provenance_reads_back_as_written(tmp_path: Path) -> None:
    document = synthetic_provenance()
    Provenance.model_validate(document).write(tmp_path, redact_secrets)
    assert json.loads((tmp_path / PROVENANCE_FILE).read_text()) == document
    assert Provenance.read(tmp_path).to_json_dict() == document


def test_only_the_fields_a_writer_set_are_written(tmp_path: Path) -> None:
    early = Provenance(seed=3, platform="cpu").updated(server_pid=None, locust_workers=2)
    assert early.to_json_dict() == {"platform": "cpu", "seed": 3, "server_pid": None,
                                    "locust_workers": 2}


def test_an_unknown_key_is_skipped_and_a_missing_file_is_empty(tmp_path: Path) -> None:
    (tmp_path / PROVENANCE_FILE).write_text(json.dumps({"seed": 7, "from_a_newer_suite": 1}))
    assert Provenance.read(tmp_path).to_json_dict() == {"seed": 7}
    assert Provenance.read(tmp_path / "nowhere").to_json_dict() == {}


@pytest.mark.parametrize(("key", "value"), [("seed", "seven"), ("host", ["not", "a", "map"]),
                                            ("locust_workers", 2.5)])
def test_a_wrong_type_is_named(tmp_path: Path, key: str, value: object) -> None:
    (tmp_path / PROVENANCE_FILE).write_text(json.dumps({key: value}))
    with pytest.raises(ValidationError) as error:
        Provenance.read(tmp_path)
    assert key in str(error.value)


def test_no_credential_reaches_the_file(tmp_path: Path) -> None:
    password, key, token = (secrets.token_hex(8) for _ in range(3))
    Provenance(
        server_url=f"http://user:{password}@127.0.0.1:8000",
        command_line=["vllm-slo", "run", f"server.url=http://u:{password}@h:1"],
        launch={"argv": ["vllm", "serve", "m", "--api-key", key],
                "env_overrides": {"HF_TOKEN": token}},
    ).write(tmp_path, redact_secrets)
    text = (tmp_path / PROVENANCE_FILE).read_text()
    for secret in (password, key, token):
        assert secret not in text
    assert "127.0.0.1:8000" in text and "--api-key" in text  # only the secrets go
