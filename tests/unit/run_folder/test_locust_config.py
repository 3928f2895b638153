"""locust_config.json, the file the runner hands every Locust process: one typed model."""

from __future__ import annotations

import json
from pathlib import Path

import pydantic
import pytest

from vllm_slo.run_folder.locust_config import LocustConfig
from vllm_slo.run_folder.run_files import LOCUST_CONFIG_FILE
from vllm_slo.scenarios.loader import load_scenario


def test_what_the_runner_writes_the_users_read_back(tmp_path: Path) -> None:
    scenario, _ = load_scenario("chat", ["traffic.duration=7s", "traffic.profile=mix",
                                         "traffic.mix={chat: 3, long-doc: 1}",
                                         "traffic.arrival={kind: poisson, rate: 4}"])
    written = LocustConfig(traffic=scenario.traffic, model_id="tiny", api_key_env="KEY",
                           process_count=3)
    path = written.write(tmp_path)
    assert path == tmp_path / LOCUST_CONFIG_FILE
    assert json.loads(path.read_text())["traffic"]["duration"] == 7.0  # the YAML's own names
    assert LocustConfig.read(tmp_path) == written


@pytest.mark.parametrize(("edit", "named"), [
    (lambda d: d.pop("model_id"), "model_id"),
    (lambda d: d.update(process_count=0), "process_count"),
    (lambda d: d["traffic"].update(profile="chatt"), "traffic.profile"),
])
def test_a_damaged_file_names_what_is_wrong(tmp_path: Path, edit, named: str) -> None:
    scenario, _ = load_scenario("chat", [])
    LocustConfig(traffic=scenario.traffic, model_id="tiny").write(tmp_path)
    data = json.loads((tmp_path / LOCUST_CONFIG_FILE).read_text())
    edit(data)
    (tmp_path / LOCUST_CONFIG_FILE).write_text(json.dumps(data))
    with pytest.raises(pydantic.ValidationError, match=named.replace(".", r"\.")):
        LocustConfig.read(tmp_path)
