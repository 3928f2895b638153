"""The layout explains itself only if imports go one way (docs/development.md):

    vllm_slo  ->  reports  ->  analysis  ->  stats
        |  ->  loadtests, servers  ->  run_folder, scenarios, transport

`stats` (pure statistics) imports nothing of the suite and nothing but numpy and scipy beside
the standard library; `analysis` (run metrics, verdicts, experiment design, summaries) imports
`stats`, `run_folder` and `scenarios`, never `reports`; `reports` (rendering, reading run
folders back) sits on `analysis`; `run_folder` (the run folder's format) on `scenarios`;
`transport` (the streaming HTTP client and SSE that readiness, /metrics scraping and the
Locust users share; process groups, CPU affinity, ports) imports nothing of the suite;
`loadtests` and `servers` never import each other; every layer may use the leaves
`vllm_slo.resources` (where the user folders are), `vllm_slo.redaction` and
`vllm_slo.serialise` (the result types' one JSON serialiser). Every import of
the suite's own modules is absolute and spelled `vllm_slo.<package>...` (one import path per
module), and only the locustfiles and the Locust users (vllm_slo/loadtests/users.py, and the
greenlets they run: the self-monitor, client_monitor.py, the reader pump, reader_pump.py; and
locust_quirks.py, which the users install; remote_channel.py, their channel to a remote
master) import locust or gevent. Checked statically on the
source.
"""

from __future__ import annotations

import ast
import itertools
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
USER_FOLDERS = ("scenarios", "servers", "loadtests", "reports")  # top-level, users edit them
LAYERS = (*USER_FOLDERS, "transport", "stats", "analysis", "run_folder")
PACKAGE = REPO / "vllm_slo"  # the one package root
LOCUSTFILES = sorted((REPO / "loadtests").glob("*.py"))  # what Locust runs, outside the package
ALLOWED: dict[str, set[str]] = {
    "vllm_slo": {"vllm_slo", *LAYERS},
    "reports": {"reports", "analysis", "stats", "run_folder", "scenarios"},
    "analysis": {"analysis", "stats", "run_folder", "scenarios"},
    "loadtests": {"loadtests", "transport", "run_folder", "scenarios"},
    "servers": {"servers", "transport", "scenarios"},
    "run_folder": {"run_folder", "scenarios"},
    "scenarios": {"scenarios"},
    "stats": {"stats"},
    "transport": {"transport"},
}
# leaf modules any layer may import: they import nothing of the suite (checked below)
LEAVES = ("vllm_slo.resources", "vllm_slo.redaction", "vllm_slo.serialise")
LOCUST_NAMES = ("locust", "gevent")
# greenlets the locustfiles run (the self-monitor and the reader pump), and their workarounds
# for Locust itself (installed by the locustfile)
LOCUST_SIDE_MODULES = ("users.py", "client_monitor.py", "reader_pump.py", "locust_quirks.py",
                       "memory_trace.py", "remote_channel.py")


@dataclass(frozen=True)
class Import:
    source: Path  # the importing file
    line: int
    module: str  # absolute dotted name as written (level > 0 for relative imports)
    level: int
    names: tuple[str, ...] = ()  # what `from module import ...` takes

    def __str__(self) -> str:
        return f"{self.source.relative_to(REPO)}:{self.line}: {'.' * self.level}{self.module}"


def imports_in(path: Path) -> list[Import]:
    """Every import statement in a file, function-level ones included."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found += [Import(path, node.lineno, alias.name, 0) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            found.append(Import(path, node.lineno, node.module or "", node.level,
                                tuple(alias.name for alias in node.names)))
    return found


def package_of_file(path: Path) -> str:
    """The layer of a source file: vllm_slo/<layer>/..., the top-level locustfiles count as
    loadtests, the rest of vllm_slo/ is the orchestration layer."""
    if path.parent == REPO / "loadtests":
        return "loadtests"
    inner = path.relative_to(PACKAGE).parts
    return inner[0] if len(inner) > 1 and inner[0] in LAYERS else "vllm_slo"


def package_of_module(module: str) -> str | None:
    """The layer a `vllm_slo...` module belongs to; None for third-party modules."""
    parts = module.split(".")
    if parts[0] != "vllm_slo":
        return None
    return parts[1] if len(parts) > 1 and parts[1] in LAYERS else "vllm_slo"


def source_files() -> list[Path]:
    files = [*PACKAGE.rglob("*.py"), *LOCUSTFILES]
    assert len(files) > 40, "the source tree was not found"
    return sorted(files)


def all_imports() -> list[Import]:
    return [item for path in source_files() for item in imports_in(path)]


def uphill_imports(imports: list[Import]) -> list[str]:
    offenders = []
    for item in imports:
        target = package_of_module(item.module)
        if item.module in LEAVES:
            continue
        if target is not None and target not in ALLOWED[package_of_file(item.source)]:
            offenders.append(f"{item}  ({package_of_file(item.source)} -> {target})")
    return offenders


def test_imports_only_go_downhill() -> None:
    assert uphill_imports(all_imports()) == []


def test_leaves_import_nothing_of_the_suite() -> None:
    for leaf in LEAVES:
        path = PACKAGE.parent / (leaf.replace(".", "/") + ".py")
        assert [str(i) for i in imports_in(path) if i.module.startswith("vllm_slo")] == []


def test_the_check_catches_an_uphill_import() -> None:
    """The rule above is not vacuous: a scenarios module importing the orchestrator, or a
    server module importing the Locust side, is reported."""
    fake = [Import(PACKAGE / "scenarios" / "model.py", 1, "vllm_slo.runner", 0),
            Import(PACKAGE / "servers" / "readiness.py", 2, "vllm_slo.loadtests.plan", 0),
            Import(PACKAGE / "reports" / "samples.py", 3, "vllm_slo.servers.host", 0),
            Import(PACKAGE / "loadtests" / "plan.py", 4, "vllm_slo.scenarios.model", 0),
            Import(PACKAGE / "loadtests" / "tokens.py", 5, "vllm_slo.servers.readiness", 0),
            Import(PACKAGE / "transport" / "sse.py", 6, "vllm_slo.scenarios.model", 0),
            Import(PACKAGE / "servers" / "readiness.py", 7, "vllm_slo.transport.http_stream", 0)]
    assert len(uphill_imports(fake)) == 5


def test_one_import_path_per_module() -> None:
    """No relative imports and no bare `scenarios.` / `reports.` ... (which would load a
    second copy of a module under another name in a checkout)."""
    offenders = [str(item) for item in all_imports()
                 if item.level > 0 or item.module.split(".")[0] in LAYERS]
    assert offenders == []


def test_analysis_never_imports_reports() -> None:
    analysis = [item for item in all_imports() if item.source.is_relative_to(PACKAGE / "analysis")]
    assert analysis, "vllm_slo/analysis has no imports at all?"
    offenders = [str(item) for item in analysis if item.module.startswith("vllm_slo.reports")]
    assert offenders == []


def test_stats_import_only_numpy_scipy_and_the_standard_library() -> None:
    stats = [item for item in all_imports() if item.source.is_relative_to(PACKAGE / "stats")]
    assert len(stats) > 10, "vllm_slo/stats has no imports at all?"
    allowed = {"numpy", "scipy", "vllm_slo", *sys.stdlib_module_names}
    offenders = [str(item) for item in stats if item.module.split(".")[0] not in allowed]
    assert offenders == []
    outside = [str(item) for item in stats if item.module.startswith("vllm_slo")
               and not item.module.startswith("vllm_slo.stats")]
    assert outside == []


@pytest.mark.parametrize("package", ["analysis", "stats"])
def test_analysis_and_stats_touch_no_files(package: str) -> None:
    """Analysis is pure: reading run folders is `reports/samples.py`, `reports/trial_folders.py`
    and the report builders; writing is the renderers'."""
    io_calls = {"open", "read_text", "write_text", "read_bytes", "write_bytes", "read_table",
                "write_table", "mkdir", "unlink"}
    offenders = []
    for path in sorted((PACKAGE / package).glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Call):
                name = getattr(node.func, "attr", getattr(node.func, "id", ""))
                if name in io_calls:
                    offenders.append(f"{path.relative_to(REPO)}:{node.lineno}: {name}")
    assert offenders == []


def test_locust_is_imported_only_by_locustfiles() -> None:
    imports = all_imports()
    locust_imports = [item for item in imports if item.module.split(".")[0] in LOCUST_NAMES]
    assert locust_imports, "the locustfiles import locust: the scan must see them"
    offenders = [str(item) for item in locust_imports
                 if not (package_of_file(item.source) == "loadtests"
                         and (item.source.name.startswith("locustfile")
                              or item.source.name in LOCUST_SIDE_MODULES))]
    assert offenders == []


def test_every_source_folder_is_a_listed_package_under_the_one_root() -> None:
    """Each folder holding modules is a package under vllm_slo/ listed in pyproject (else the
    wheel drops it); package-dir maps only the data folders users edit (no module is
    remapped, so mypy and an IDE resolve every import from the checkout as it is)."""
    import tomllib

    project = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["setuptools"]
    listed = set(project["packages"])
    for path in PACKAGE.rglob("*.py"):
        folder = path.parent
        name = ".".join(("vllm_slo", *folder.relative_to(PACKAGE).parts))
        assert name in listed, f"{folder.relative_to(REPO)} is not listed as {name}"
        assert (folder / "__init__.py").is_file(), f"{folder} has no __init__.py"
    assert project["package-dir"] == {f"vllm_slo._data.{layer}": layer
                                      for layer in USER_FOLDERS}
    for layer in USER_FOLDERS:  # the user folders hold data and locustfiles, never modules
        modules = [p.name for p in (REPO / layer).rglob("*.py")]
        assert modules == [] or (layer == "loadtests" and set(modules) == {
            "locustfile.py", "locustfile_stages.py"}), (layer, modules)


# -- the module graph: no circle anywhere, drivers as siblings ------------------------------
# The drivers: one module per command over one trial runner (docs/development.md, "The
# drivers"). `preflight` (the checks before a run, the Printer type) and `outcome` (how a
# command ends) are what they share; they import no driver.
DRIVERS = ("cli", "runner", "side_by_side", "experiment_runner", "capacity_runner", "tuner",
           "capacity_race", "saved_runs", "vllm_bench")
SHARED_BY_DRIVERS = ("preflight", "outcome")
# the only driver -> driver imports the design names (docs/development.md's table)
DRIVER_IMPORTS: dict[str, set[str]] = {
    "cli": {"experiment_runner", "tuner", "capacity_race", "capacity_runner", "saved_runs",
            "vllm_bench"},
    "experiment_runner": {"runner", "side_by_side"},  # rounds of trials, two at once
    "side_by_side": {"runner"},
    "capacity_runner": {"runner"},  # steps on one shared server
    "tuner": {"runner"},
    "capacity_race": {"capacity_runner", "tuner"},  # the tune's candidates, searched
    "saved_runs": {"tuner"},  # a tune folder is re-rendered by replaying its search
    "runner": set(),
    "vllm_bench": set(),
}
MAX_DRIVER_FLOORS = 3  # arrows on the longest chain of driver imports


def module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def module_graph(imports: list[Import]) -> dict[str, set[str]]:
    """Module -> the suite's modules it imports, every import counted (inside functions and
    under TYPE_CHECKING too); `from package import module` is an arrow to the module."""
    known = {module_name(path) for path in PACKAGE.rglob("*.py")}
    graph: dict[str, set[str]] = {name: set() for name in known}
    for item in imports:
        if not item.source.is_relative_to(PACKAGE) or not item.module.startswith("vllm_slo"):
            continue
        source = module_name(item.source)
        targets = {item.module} if item.module in known else set()
        targets |= {f"{item.module}.{name}" for name in item.names
                    if f"{item.module}.{name}" in known}
        graph[source] |= {target for target in targets if target != source}
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components with more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for target in sorted(graph.get(node, ())):
            if target not in index:
                visit(target)
                low[node] = min(low[node], low[target])
            elif target in on_stack:
                low[node] = min(low[node], index[target])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


def driver_of(module: str) -> str | None:
    parts = module.split(".")
    if len(parts) < 2 or parts[0] != "vllm_slo":
        return None
    return parts[1] if parts[1] in (*DRIVERS, *SHARED_BY_DRIVERS) else None


def driver_graph(graph: dict[str, set[str]]) -> dict[str, set[str]]:
    drivers: dict[str, set[str]] = {name: set() for name in (*DRIVERS, *SHARED_BY_DRIVERS)}
    for source, targets in graph.items():
        mine = driver_of(source)
        if mine is None:
            continue
        drivers[mine] |= {t for t in map(driver_of, targets) if t not in (None, mine)}
    return drivers


def floors(drivers: dict[str, set[str]]) -> int:
    """Arrows on the longest chain of driver imports (the graph has no circle)."""
    memo: dict[str, int] = {}
    visiting: list[str] = []

    def depth(name: str) -> int:
        assert name not in visiting, f"drivers import in a circle: {visiting}"
        if name not in memo:
            visiting.append(name)
            memo[name] = max((1 + depth(t) for t in drivers[name] if t in DRIVERS), default=0)
            visiting.pop()
        return memo[name]

    return max(depth(name) for name in DRIVERS)


def test_no_import_cycle_anywhere() -> None:
    assert cycles(module_graph(all_imports())) == []


def test_the_cycle_check_catches_a_planted_cycle() -> None:
    """A circle planted through a function-level import (the tuner dispatching the race,
    as it once did) is found, and so is one over three modules."""
    planted = [*all_imports(),
               Import(PACKAGE / "tuner.py", 1, "vllm_slo.capacity_race", 0, ("run",)),
               Import(PACKAGE / "analysis" / "summary.py", 2, "vllm_slo.analysis", 0,
                      ("comparison",)),
               Import(PACKAGE / "analysis" / "comparison.py", 3, "vllm_slo.analysis.trials",
                      0, ("Trial",))]
    graph = module_graph(planted)
    graph["vllm_slo.analysis.trials"].add("vllm_slo.analysis.summary")
    found = cycles(graph)
    assert ["vllm_slo.capacity_race", "vllm_slo.tuner"] in found
    assert any({"vllm_slo.analysis.summary", "vllm_slo.analysis.comparison",
                "vllm_slo.analysis.trials"} <= set(c) for c in found)


def test_drivers_import_only_the_drivers_the_design_names() -> None:
    drivers = driver_graph(module_graph(all_imports()))
    for shared in SHARED_BY_DRIVERS:
        assert drivers[shared] & set(DRIVERS) == set(), shared
    unexpected = {name: sorted(drivers[name] & set(DRIVERS) - DRIVER_IMPORTS[name])
                  for name in DRIVERS if drivers[name] & set(DRIVERS) - DRIVER_IMPORTS[name]}
    assert unexpected == {}
    assert floors(drivers) <= MAX_DRIVER_FLOORS


def test_the_floor_count_sees_a_tower() -> None:
    tower = {name: set() for name in (*DRIVERS, *SHARED_BY_DRIVERS)}
    chain = ["cli", "saved_runs", "capacity_race", "tuner", "capacity_runner",
             "experiment_runner", "side_by_side", "runner"]
    for upper, lower in itertools.pairwise(chain):
        tower[upper].add(lower)
    assert floors(tower) == 7
    assert floors(driver_graph(module_graph(all_imports()))) == 3
