"""Docs and docstrings name only files the repository holds, and no tracker issue.

A repository path is a token that starts with one of the repository's top-level folders
(`vllm_slo/`, `tests/`, `docs/`, `results/`, ...) and ends in a file extension; it must exist
in the checkout (a glob must match), or, for a module path written from inside the package
(`scenarios/model.py`), under `vllm_slo/`. Paths inside a run folder (`runs/<ts>/summary.json`,
`samples/*.arrows`) start with no top-level folder and are not checked. Scanned: README.md,
docs/**/*.md, and every comment and string under vllm_slo/. Pages also may not say "issue N"
(there is no tracker to follow) nor name files outside the repository (`shared/...`).
"""

from __future__ import annotations

import io
import re
import tokenize
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
TOP_LEVEL = ("vllm_slo", "tests", "docs", "results", "benchmarks", "scenarios", "servers",
             "loadtests", "reports", ".ci")
EXTENSIONS = ("py", "md", "json", "jsonl", "yaml", "yml", "sh", "txt", "csv", "toml", "ini",
              "html", "css", "js", "parquet", "arrows", "tgz", "log")
TOPS = "|".join(re.escape(top) for top in TOP_LEVEL)
EXTS = "|".join(EXTENSIONS)
PATH = re.compile(rf"(?<![\w./-])((?:{TOPS})/[\w./*-]*\.(?:{EXTS}))(?![\w/-]|\.\w)")
# installed-only locations, placeholders: not files of the checkout
NOT_CHECKOUT = ("vllm_slo/_data/",)
PLACEHOLDER = re.compile(r"(?<![a-z])[A-Z]{3,}(?![a-z])")  # servers/NAME.yaml
ISSUE = re.compile(r"\b[Ii]ssues? #?\d+|\b(?:[Ss]top|[Ss]ession) \d+\b")
OUTSIDE = re.compile(r"(?<![\w/.-])(?:shared/[\w./-]+|DESIGN\.md|device\.sh)")


def pages() -> list[Path]:
    return [REPO / "README.md", *sorted((REPO / "docs").rglob("*.md"))]


def exists(path: str) -> bool:
    for root in (REPO, REPO / "vllm_slo"):
        if "*" in path:
            if any(root.glob(path)):
                return True
        elif (root / path).exists():
            return True
    return False


def missing_paths(text: str) -> list[str]:
    return sorted({path for path in PATH.findall(text)
                   if not path.startswith(NOT_CHECKOUT) and not PLACEHOLDER.search(path)
                   and not exists(path.rstrip("."))})


def comments_and_strings(source: str) -> str:
    tokens = tokenize.generate_tokens(io.StringIO(source).readline)
    return "\n".join(token.string for token in tokens
                     if token.type in (tokenize.COMMENT, tokenize.STRING))


def modules() -> list[Path]:
    return sorted((REPO / "vllm_slo").rglob("*.py"))


@pytest.mark.parametrize("page", pages(), ids=lambda p: str(p.relative_to(REPO)))
def test_a_page_names_only_files_that_exist(page: Path) -> None:
    assert missing_paths(page.read_text(encoding="utf-8")) == []


@pytest.mark.parametrize("page", pages(), ids=lambda p: str(p.relative_to(REPO)))
def test_a_page_cites_no_issue_and_no_file_outside_the_repository(page: Path) -> None:
    text = page.read_text(encoding="utf-8")
    assert ISSUE.findall(text) == []
    assert OUTSIDE.findall(text) == []


def test_docstrings_and_comments_name_only_files_that_exist() -> None:
    missing = {}
    for module in modules():
        found = missing_paths(comments_and_strings(module.read_text(encoding="utf-8")))
        if found:
            missing[str(module.relative_to(REPO))] = found
    assert missing == {}


def test_the_matcher_sees_a_missing_path_and_skips_run_folder_files() -> None:
    text = ("see `docs/no-such-page.md`, reports/analysis/sequential.py and "
            "tests/unit/test_readme.py;"
            " the run writes runs/<ts>/summary.json and samples/*.arrows; vllm_slo/stats/*.py;"
            " scenarios/model.py servers/NAME.yaml")
    assert missing_paths(text) == ["docs/no-such-page.md", "reports/analysis/sequential.py"]
    assert ISSUE.findall("as issue 14 found") and not ISSUE.findall("the issues it raised")
    assert OUTSIDE.findall("`shared/gpu-vllm/README.md`") == ["shared/gpu-vllm/README.md"]


SECTION_CITE = re.compile(r"""(docs/[\w-]+\.md) ["']([^"'\n]{3,80})["']""")
CITING = ("vllm_slo", "tests", "scenarios", "benchmarks", "servers", "loadtests")


def stale_section_cites(text: str) -> list[str]:
    """`docs/page.md "Section"` citations whose page no longer holds that section's words."""
    stale = []
    for page, section in SECTION_CITE.findall(text):
        path = REPO / page
        if not path.is_file() or section.lower() not in path.read_text(encoding="utf-8").lower():
            stale.append(f'{page} "{section}"')
    return stale


def test_a_cited_section_of_a_page_exists() -> None:
    stale = {}
    for top in CITING:
        for path in sorted((REPO / top).rglob("*")):
            if path.suffix in (".py", ".yaml", ".sh") and path.is_file() \
                    and path != Path(__file__):
                found = stale_section_cites(path.read_text(encoding="utf-8"))
                if found:
                    stale[str(path.relative_to(REPO))] = found
    assert stale == {}


README_SECTION = re.compile(r"""README(?:\.md)?(?:'s)? ["'\u00a7]""")


def test_nothing_cites_a_readme_section() -> None:
    """README is a front door that may be reorganised freely: code, tests, scenarios and
    schemas cite docs pages by path, never a README section by title."""
    citing = {}
    for top in (*CITING, "reports"):
        for path in sorted((REPO / top).rglob("*")):
            if path.suffix in (".py", ".yaml", ".sh", ".json") and path.is_file() \
                    and path != Path(__file__):
                lines = [line.strip() for line in path.read_text(encoding="utf-8").splitlines()
                         if README_SECTION.search(line)]
                if lines:
                    citing[str(path.relative_to(REPO))] = lines
    assert citing == {}
    assert README_SECTION.search("""(see README "Exit codes")""")
    assert README_SECTION.search("(README 'Measurement health')")
    assert not README_SECTION.search("vendor/README.md lists them")


def test_the_section_checker_sees_a_stale_cite() -> None:
    assert stale_section_cites('see docs/statistics.md "No such section here"') == [
        'docs/statistics.md "No such section here"']
    assert stale_section_cites('see docs/statistics.md "Sequential trials"') == []
