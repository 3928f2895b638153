"""A new user's install: the wheel built from this repository, installed into a fresh virtual
environment, run from the user's own folder against the stand-in; and the development install
run from a folder that is not the repository with a relative --runs-dir. Child processes
(Locust, the server) run in the run folder, so any path handed to them that is relative, or any
file looked up relative to the working directory, shows up here as a run without requests."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from tests.integration.conftest import (
    HEALTH_BOUNDS_OFF,
    REPO,
    CliRun,
    cli_env,
    run_cli,
    standin_server,
)

pytestmark = pytest.mark.integration

# repository folder -> where the wheel holds it: the package as it is, the user folders as
# package data under vllm_slo/_data/ (vllm_slo/resources.py finds them there)
PACKAGE_FOLDERS = {
    "vllm_slo": "vllm_slo",
    "scenarios": "vllm_slo/_data/scenarios",
    "servers": "vllm_slo/_data/servers",
    "loadtests": "vllm_slo/_data/loadtests",
    "reports": "vllm_slo/_data/reports",
}
# data files the suite reads at run time
REQUIRED_DATA = [
    "vllm_slo/_data/scenarios/chat.yaml",
    "vllm_slo/_data/scenarios/long-doc.yaml",
    "vllm_slo/_data/scenarios/sharegpt.yaml",
    "vllm_slo/_data/scenarios/chunked-prefill-ab.yaml",
    "vllm_slo/_data/servers/chunked-prefill-8k.yaml",
    "vllm_slo/_data/loadtests/locustfile.py",
    "vllm_slo/_data/loadtests/locustfile_stages.py",
    "vllm_slo/_data/loadtests/data/sharegpt_sample.json",
    "vllm_slo/_data/reports/schema/summary.schema.json",
    "vllm_slo/_data/reports/schema/experiment-summary.schema.json",
    "vllm_slo/_data/reports/schema/tune.schema.json",
    "vllm_slo/_data/reports/templates/tune.html.j2",
    "vllm_slo/_data/reports/templates/report.html.j2",
    "vllm_slo/_data/reports/templates/experiment.html.j2",
    "vllm_slo/_data/reports/vendor/plotly-basic.min.js",
]
MEASURED = {0, 1, 3}  # PASS, FAIL, INCONCLUSIVE: a measurement (2 = usage, 4 = invalid run)
# these tests are of the install, not of the client's health (conftest: HEALTH_BOUNDS_OFF)
ATTACH = ["traffic.duration=5s", "traffic.warmup=1s", "traffic.arrival.users=2",
          "traffic.arrival.spawn_rate=100", "traffic.chat.output_tokens=10",
          *HEALTH_BOUNDS_OFF]
STANDIN_FLAGS = ("--ttft", "0.01", "--itl", "0.005")


def source_files() -> set[str]:
    """Every file of the shipped folders, named as the wheel must hold it."""
    names = set()
    for folder, target in PACKAGE_FOLDERS.items():
        for path in (REPO / folder).rglob("*"):
            if path.is_file() and "__pycache__" not in path.parts and path.suffix != ".pyc":
                names.add(f"{target}/{path.relative_to(REPO / folder).as_posix()}")
    return names


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The wheel, built from a clean copy of the sources (an in-place build would reuse a stale
    build/lib and write build/ and *.egg-info into the working tree)."""
    root = tmp_path_factory.mktemp("wheel-build")
    source = root / "source"
    source.mkdir()
    for name in ("pyproject.toml", "README.md"):
        shutil.copy2(REPO / name, source / name)
    for folder in PACKAGE_FOLDERS:
        shutil.copytree(REPO / folder, source / folder,
                        ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    dist = root / "dist"
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation",
                    "-q", "-w", str(dist), str(source)],
                   check=True, capture_output=True, text=True, timeout=300, env=cli_env())
    (built,) = dist.glob("vllm_slo-*.whl")
    return built


def test_wheel_holds_one_import_name_and_every_shipped_file(wheel: Path) -> None:
    with zipfile.ZipFile(wheel) as archive:
        names = [n for n in archive.namelist() if not n.endswith("/")]
        dist_info = {n.split("/")[0] for n in names if n.split("/")[0].endswith(".dist-info")}
        assert len(dist_info) == 1, dist_info
        (info,) = dist_info
        top_level = archive.read(f"{info}/top_level.txt").decode().split()
    assert top_level == ["vllm_slo"]
    packaged = {n for n in names if not n.startswith(f"{info}/")}
    assert {n.split("/")[0] for n in packaged} == {"vllm_slo"}
    missing = sorted(set(REQUIRED_DATA) - packaged)
    assert not missing, f"data files missing from the wheel: {missing}"
    expected = source_files()
    assert "vllm_slo/resources.py" in expected and "vllm_slo/servers/vllm_server.py" in expected
    assert sorted(expected - packaged) == [], "in the sources, not in the wheel"
    assert sorted(packaged - expected) == [], "in the wheel, not in the sources"


@pytest.fixture(scope="module")
def installed_venv(wheel: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A fresh virtual environment with only the wheel and its dependencies (from the package
    index; no vLLM: attach mode does not need it)."""
    venv = tmp_path_factory.mktemp("user-venv") / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=120,
                   env=cli_env())
    # --no-compile: pip would byte-compile every module of numpy, scipy, pyarrow, ... (most
    # of the install's time); a run compiles the ones it imports
    install = subprocess.run([str(venv / "bin" / "python"), "-m", "pip", "install", "-q",
                              "--no-compile", str(wheel)],
                             capture_output=True, text=True, timeout=900, env=cli_env())
    assert install.returncode == 0, install.stdout[-3000:] + install.stderr[-3000:]
    return venv


def user_env(venv: Path) -> dict[str, str]:
    """An activated venv in a user's shell: its bin/ first on PATH, this test environment's
    bin/ not on it, no PYTHONPATH."""
    env = cli_env()
    env.pop("VIRTUAL_ENV", None)
    kept = [p for p in env.get("PATH", "").split(os.pathsep)
            if p and not Path(p).resolve().is_relative_to(Path(sys.prefix).resolve())]
    env["PATH"] = os.pathsep.join([str(venv / "bin"), *kept])
    env["VIRTUAL_ENV"] = str(venv)
    return env


def assert_measured(result: CliRun, runs_dir: Path) -> dict:
    assert result.returncode in MEASURED, result.output
    assert result.run_dir is not None, f"no run folder in {runs_dir}:\n{result.output}"
    assert f"run folder: {result.run_dir}\n" in result.output  # the same one, printed absolute
    summary = result.json("summary.json")
    assert summary["requests"]["measured"] > 0, result.output
    assert summary["requests"]["failed"] == 0, summary["requests"]
    assert (result.run_dir / "report.html").stat().st_size > 0
    return summary


@pytest.fixture
def user_dir(tmp_path: Path) -> Path:
    """The user's own folder, outside the repository."""
    folder = tmp_path / "my-project"
    folder.mkdir()
    assert not folder.resolve().is_relative_to(REPO)
    return folder


def test_wheel_in_a_fresh_venv_runs_from_the_users_folder(
        installed_venv: Path, wheel: Path, user_dir: Path) -> None:
    env = user_env(installed_venv)
    where = subprocess.run(
        [str(installed_venv / "bin" / "python"), "-c",
         "import importlib.util, json, vllm_slo; "
         "print(json.dumps([vllm_slo.__file__, importlib.util.find_spec('vllm') is None]))"],
        capture_output=True, text=True, check=True, env=env, cwd=user_dir, timeout=60)
    module_file, no_vllm = json.loads(where.stdout)
    # the wheel's copy, not the repository's
    assert Path(module_file).resolve().is_relative_to(installed_venv.resolve()), module_file
    assert no_vllm

    with standin_server(*STANDIN_FLAGS, python=str(installed_venv / "bin" / "python"),
                        cwd=user_dir, env=env) as url:
        result = run_cli(["run", "scenario=chat", f"server.url={url}", *ATTACH], Path("runs"),
                         timeout_s=300, cwd=user_dir,
                         command=[str(installed_venv / "bin" / "vllm-slo")], env=env)
    assert_measured(result, user_dir / "runs")
    provenance = result.json("provenance.json")
    assert provenance["suite_git_commit"] is None  # an installed wheel has no commit
    assert provenance["suite_version"] == wheel.name.split("-")[1]


@pytest.mark.parametrize("entry", ["python -m vllm_slo.cli", "vllm-slo console script"])
def test_development_install_with_a_relative_runs_dir_from_another_folder(
        entry: str, user_dir: Path) -> None:
    command = ([sys.executable, "-m", "vllm_slo.cli"] if entry.startswith("python")
               else [str(Path(sys.executable).parent / "vllm-slo")])
    with standin_server(*STANDIN_FLAGS, cwd=user_dir) as url:
        result = run_cli(["run", "scenario=chat", f"server.url={url}", *ATTACH],
                         Path("relative/runs"), timeout_s=300, cwd=user_dir,
                         command=[*command, "--runs-dir", "relative/runs"])
    assert_measured(result, user_dir / "relative" / "runs")


def test_launch_paths_are_absolute_from_where_the_user_stands(
        user_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """vLLM runs in the run folder: the model folder and a launcher given as relative paths
    reach it absolute, resolved from the user's folder (no vLLM started here)."""
    from vllm_slo.scenarios.server_spec import ServerSpec
    from vllm_slo.servers.tiny_model import TINY_MODEL_VERSION
    from vllm_slo.servers.vllm_server import plan_launch, resolve_model_path

    user_dir = user_dir.resolve()  # as the working directory reads
    monkeypatch.chdir(user_dir)
    monkeypatch.setenv("VLLM_SLO_CACHE", "cache")  # relative, as a user may set it
    tiny = user_dir / "cache" / "models" / TINY_MODEL_VERSION
    tiny.mkdir(parents=True)
    (tiny / ".complete").write_text("")  # a cached build: nothing is built here
    assert resolve_model_path(ServerSpec(model="tiny")) == str(tiny)
    (user_dir / "models" / "mine").mkdir(parents=True)
    assert resolve_model_path(ServerSpec(model="models/mine")) == str(user_dir / "models/mine")
    assert resolve_model_path(ServerSpec(model="org/model-id")) == "org/model-id"  # not a path

    spec = ServerSpec(command=["./bin/vllm", "--flag"])
    argv = plan_launch(spec, "gpu", str(tiny), 8000).argv
    assert argv[:2] == (str(user_dir / "bin" / "vllm"), "--flag")
    assert plan_launch(ServerSpec(command=["vllm"]), "gpu", str(tiny), 8000).argv[0] == "vllm"
