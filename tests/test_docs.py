"""The README and docs/ as a reader follows them: every relative link and image reaches a file (and a
heading, where it names one), and the README's test command is the one CI runs, so moving text between
pages cannot leave a dead link or a README that tells people a command CI no longer checks."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from support.paths import ROOT

PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
LINK = re.compile(r"!?\[[^\]]*\]\(([^)\s]+)\)")


def slug(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation dropped, spaces as hyphens."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def anchors(page: Path) -> set[str]:
    text = re.sub(r"```.*?```", "", page.read_text(), flags=re.S)  # a '# comment' in a code block is no heading
    return {slug(m.group(1)) for m in re.finditer(r"^#{1,6} (.+)$", text, re.M)}


def prose(page: Path) -> str:
    return re.sub(r"```.*?```", "", page.read_text(), flags=re.S)


def test_there_are_docs_pages():
    assert len(PAGES) > 5 and all(p.read_text().startswith("# ") for p in PAGES)


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.relative_to(ROOT).as_posix())
def test_every_relative_link_reaches_its_file_and_heading(page: Path):
    bad = []
    for target in LINK.findall(prose(page)):
        if re.match(r"[a-z]+:", target):
            continue  # an address on the web: not checked offline
        path, _, anchor = target.partition("#")
        dest = (page.parent / path).resolve() if path else page
        if not dest.exists():
            bad.append(f"{target}: no file {dest}")
        elif anchor and dest.suffix == ".md" and anchor not in anchors(dest):
            bad.append(f"{target}: no heading #{anchor} in {dest.name}")
    assert not bad, "\n".join(bad)


def test_every_docs_page_is_linked_from_the_readme():
    readme = (ROOT / "README.md").read_text()
    assert [p.name for p in PAGES[1:] if f"(docs/{p.name})" not in readme] == []


def test_the_readme_test_command_is_the_one_ci_runs():
    lines = (ROOT / ".ci" / "run").read_text().splitlines()
    ci = lines[lines.index("# --- the README's test command ---") + 1].strip()
    first_block = (ROOT / "README.md").read_text().split("```")[1]
    assert ci in [line.split("   #")[0].strip() for line in first_block.splitlines()]
