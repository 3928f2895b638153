"""The deployment examples of docs/examples/ (Kubernetes manifests, a plain several-hosts
script) parse, and their commands are what the suite's command line accepts: every `vllm-slo`
command goes through the CLI's own parser, a run's overrides through the scenario loader, and
master and workers agree on the address, the port, the worker count and the token's source."""

from __future__ import annotations

import shlex
from pathlib import Path
from typing import Any

import yaml

from vllm_slo.cli import _flags_first, _parser
from vllm_slo.loadtests.locust_launcher import parse_master_address
from vllm_slo.loadtests.remote_rows import TOKEN_ENV
from vllm_slo.scenarios.loader import load_scenario
from vllm_slo.scenarios.model import Scenario

EXAMPLES = Path(__file__).resolve().parents[2] / "docs" / "examples"


def _parsed(argv: list[str]) -> Any:
    assert argv[0] == "vllm-slo", argv
    return _parser().parse_args(_flags_first(argv[1:]))


def _scenario(options: Any) -> Scenario:
    assert options.command == "run"
    reference, *overrides = options.arguments
    assert reference.startswith("scenario=")
    return load_scenario(reference.removeprefix("scenario="), overrides)[0]


def _manifests() -> dict[str, dict[str, Any]]:
    """Every object of the k8s examples by `Kind/name`."""
    found = {}
    for path in sorted((EXAMPLES / "k8s").glob("*.yaml")):
        for document in yaml.safe_load_all(path.read_text()):
            found[f"{document['kind']}/{document['metadata']['name']}"] = document
    return found


def _container(workload: dict[str, Any]) -> dict[str, Any]:
    (container,) = workload["spec"]["template"]["spec"]["containers"]
    return container


def _token_source(container: dict[str, Any]) -> tuple[str, str]:
    (variable,) = [v for v in container["env"] if v["name"] == TOKEN_ENV]
    ref = variable["valueFrom"]["secretKeyRef"]
    return ref["name"], ref["key"]


def test_kubernetes_master_job_and_worker_deployment_agree() -> None:
    objects = _manifests()
    assert set(objects) == {"Service/vllm-slo-master", "Job/vllm-slo-master",
                            "Deployment/vllm-slo-worker", "Secret/vllm-slo-run-token"}
    master = _container(objects["Job/vllm-slo-master"])
    worker_deployment = objects["Deployment/vllm-slo-worker"]
    worker = _container(worker_deployment)
    service = objects["Service/vllm-slo-master"]

    run = _parsed(master["command"] + master["args"])
    traffic = _scenario(run).traffic
    assert traffic.remote_workers == worker_deployment["spec"]["replicas"]
    assert traffic.master_bind == "0.0.0.0"  # opened on purpose: the pod's interfaces

    options = _parsed(worker["command"] + worker.get("args", []))
    assert options.command == "worker"
    host, port = parse_master_address(options.master)
    assert host == service["metadata"]["name"]
    assert port == traffic.master_port == service["spec"]["ports"][0]["port"]
    assert master["ports"][0]["containerPort"] == traffic.master_port
    # the Service selects the master's pod, and both read the token from the one Secret
    labels = objects["Job/vllm-slo-master"]["spec"]["template"]["metadata"]["labels"]
    assert service["spec"]["selector"].items() <= labels.items()
    secret = objects["Secret/vllm-slo-run-token"]
    assert _token_source(master) == _token_source(worker) == (
        secret["metadata"]["name"], next(iter(secret["stringData"])))


def test_the_image_installs_the_suites_wheel() -> None:
    dockerfile = (EXAMPLES / "k8s" / "Dockerfile").read_text()
    assert "pip install --no-cache-dir /tmp/vllm_slo-*.whl" in dockerfile
    images = {_container(o)["image"] for o in _manifests().values()
              if o["kind"] in ("Job", "Deployment")}
    assert len(images) == 1  # master and workers run the same build of the suite


def test_several_hosts_script_commands_parse_and_agree() -> None:
    lines = (EXAMPLES / "hosts" / "several-hosts.sh").read_text().splitlines()
    commands = [shlex.split(line) for line in lines if line.startswith("vllm-slo ")]
    assert [c[1] for c in commands] == ["run", "worker"]
    traffic = _scenario(_parsed(commands[0])).traffic
    worker = _parsed(commands[1])
    assert worker.token
    assert parse_master_address(worker.master) == (traffic.master_bind, traffic.master_port)
    assert traffic.remote_workers == 2
