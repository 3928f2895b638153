"""README.md is a short front door whose offline commands run, and every doc link resolves.

The README's command block marked `<!-- readme-test: offline -->` is run line by line through
`vllm_slo.cli.main` (as benchstat's doc_test.go runs its README), each line's `# exit N`
checked; a repository file named in a line is read from the checkout, a run folder is written
under tmp_path. Links: every relative link in README.md, docs/**/*.md and results/**/README.md
points to a file of the repository, and a `#anchor` into a Markdown page names one of its
headings (mkdocs' slugs). `mkdocs build --strict` (`tox -e docs`) checks the manual's links
again as a site.
"""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import pytest

from vllm_slo import cli

REPO = Path(__file__).resolve().parents[2]
README = REPO / "README.md"
MAX_README_LINES = 200

OFFLINE_MARK = "<!-- readme-test: offline -->"
FENCE = re.compile(r"^```[a-z]*\n(.*?)^```", re.M | re.S)
EXIT = re.compile(r"#\s*exit\s+(\d)\s*$")
# [text](target) and ![alt](target); the target ends at whitespace or ')'
LINK = re.compile(r"!?\[[^\]]*\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)")


def doc_pages() -> list[Path]:
    return [README, *sorted((REPO / "docs").rglob("*.md"))]


def linked_pages() -> list[Path]:
    """Pages whose links are checked: the docs, and the results' campaign READMEs."""
    return [*doc_pages(), *sorted((REPO / "results").rglob("README.md"))]


def offline_commands(text: str) -> list[tuple[list[str], int]]:
    """(argv without `vllm-slo`, expected exit code) per line of the marked block(s)."""
    commands = []
    for block in text.split(OFFLINE_MARK)[1:]:
        fence = FENCE.search(block)
        assert fence and block[:fence.start()].strip() == "", \
            f"{OFFLINE_MARK} must stand right above a fenced block"
        for line in fence.group(1).splitlines():
            if not line.strip():
                continue
            expected = EXIT.search(line)
            assert expected, f"README offline line without '# exit N': {line!r}"
            words = shlex.split(line[:expected.start()])
            assert words[0] == "vllm-slo", f"README offline line is not vllm-slo: {line!r}"
            commands.append((words[1:], int(expected.group(1))))
    return commands


def test_readme_is_a_short_front_door() -> None:
    lines = README.read_text(encoding="utf-8").splitlines()
    assert len(lines) <= MAX_README_LINES, \
        f"README.md has {len(lines)} lines (at most {MAX_README_LINES})"


def test_readme_keeps_the_two_set_up_commands() -> None:
    text = README.read_text(encoding="utf-8")
    assert "python3 -m pip install tox && tox -e loadtest -- scenario=chat" in text
    assert "\n    bash .ci/run\n" in text  # CI runs the test command README gives


def test_readme_offline_commands_run_with_their_exit_codes(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    commands = offline_commands(README.read_text(encoding="utf-8"))
    assert len(commands) >= 3, "README lost its offline command block"
    monkeypatch.chdir(tmp_path)  # run folders (runs/...) land here, not in the checkout
    said: list[str] = []
    for argv, expected in commands:
        # a path the repository holds (tests/unit/data/...) is read from the checkout
        argv = [str(REPO / word) if not word.startswith(("-", "runs/")) and "=" not in word
                and "/" in word and (REPO / word).exists() else word for word in argv]
        said.clear()
        code = cli.main(argv, say=said.append, complain=said.append)
        assert code == expected, (f"vllm-slo {shlex.join(argv)} exited {code}, README says "
                                  f"{expected}:\n" + "\n".join(said[-20:]))


def test_offline_command_checker_sees_a_wrong_exit_code() -> None:
    text = f"{OFFLINE_MARK}\n```sh\nvllm-slo scenarios   # exit 3\n```\n"
    [(argv, expected)] = offline_commands(text)
    assert argv == ["scenarios"] and expected == 3
    assert cli.main(argv, say=lambda _: None, complain=lambda _: None) != expected


def slug(heading: str) -> str:
    """The anchor Python-Markdown's toc extension (mkdocs' default) gives a heading."""
    text = re.sub(r"[`*]|\[([^\]]*)\]\([^)]*\)", r"\1", heading).strip().lower()
    text = re.sub(r"[^\w\s-]", "", text)
    return re.sub(r"[-\s]+", "-", text).strip("-")


def anchors(page: Path) -> set[str]:
    text = FENCE.sub("", page.read_text(encoding="utf-8"))
    return {slug(m.group(1)) for m in re.finditer(r"^#{1,6}\s+(.+?)\s*#*\s*$", text, re.M)}


def broken_links(page: Path) -> list[str]:
    text = FENCE.sub("", page.read_text(encoding="utf-8"))
    text = re.sub(r"`[^`\n]*`", "", text)  # links inside code spans are not links
    broken = []
    for target in LINK.findall(text):
        if re.match(r"^[a-z][a-z0-9+.-]*:", target):  # http:, https:, mailto:
            continue
        path, _, anchor = target.partition("#")
        resolved = (page.parent / path).resolve() if path else page
        if not resolved.exists():
            broken.append(f"{target} (no such file)")
        elif anchor and resolved.suffix == ".md" and anchor not in anchors(resolved):
            broken.append(f"{target} (no heading #{anchor} in {resolved.name})")
        elif path and REPO not in resolved.parents:
            broken.append(f"{target} (outside the repository)")
    return broken


@pytest.mark.parametrize("page", linked_pages(), ids=lambda p: str(p.relative_to(REPO)))
def test_every_relative_link_resolves(page: Path) -> None:
    assert broken_links(page) == []


def test_the_link_checker_sees_a_broken_link_and_anchor(tmp_path: Path) -> None:
    page = tmp_path / "page.md"
    page.write_text("# Title here\n\n[ok](#title-here) [gone](nowhere.md) [bad](#no-such)\n"
                    "```\n[in code](ignored.md)\n```\n", encoding="utf-8")
    found = broken_links(page)
    assert any(link.startswith("nowhere.md") for link in found)
    assert any(link.startswith("#no-such") for link in found)
    assert not any("ignored" in link or "title-here" in link for link in found)


def test_mkdocs_nav_lists_every_page() -> None:
    nav = (REPO / "mkdocs.yml").read_text(encoding="utf-8")
    listed = set(re.findall(r":\s*([\w/-]+\.md)\s*$", nav, re.M))
    pages = {str(p.relative_to(REPO / "docs")) for p in (REPO / "docs").rglob("*.md")}
    assert pages == listed, f"in docs/ but not in mkdocs.yml's nav: {sorted(pages - listed)}; " \
                            f"in the nav but missing: {sorted(listed - pages)}"
