"""Each example says in its header how to install what it imports, with extras pyproject really has.

A new user copies the header's commands in order; an example whose ``import trl`` fails after
``pip install -e .`` is the first ten minutes lost.
"""

from __future__ import annotations

import ast
import re
import tomllib

from support.paths import ROOT

EXTRAS = set(tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"])
# The third-party packages the examples import, and the extras that bring each one.
BROUGHT_BY = {"torch": {"torch"}, "transformers": {"hf", "trl"}, "trl": {"trl"}, "datasets": {"trl"},
              "tokenizers": {"hf", "trl"}, "ray": {"ray"}}
INSTALL = re.compile(r"pip install -e (?:\.|'\.\[([a-z,]+)\]')(?:\s|$)")
EXAMPLES = sorted((ROOT / "examples").glob("*.py")) + sorted((ROOT / "examples").glob("*.sbatch"))


def _header_extras(text: str) -> set[str] | None:
    """The extras of the header's install line (the first 20 lines), or None when it has none."""
    found = INSTALL.search("\n".join(text.splitlines()[:20]))
    return None if found is None else set(filter(None, (found.group(1) or "").split(",")))


def _imports(text: str) -> set[str]:
    names = set()
    for node in ast.walk(ast.parse(text)):
        if isinstance(node, ast.Import):
            names |= {a.name.split(".")[0] for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            names.add(node.module.split(".")[0])
    return names & set(BROUGHT_BY)


def test_every_example_names_its_install_and_the_extras_exist():
    assert len(EXAMPLES) >= 7
    missing = {}
    for path in EXAMPLES:
        text = path.read_text()
        extras = _header_extras(text)
        assert extras is not None, f"{path.name}: no `pip install -e ...` line in its header"
        assert extras <= EXTRAS, f"{path.name}: unknown extras {extras - EXTRAS}"
        needs = _imports(text) if path.suffix == ".py" else {"torch"}  # the job runs torchrun
        missing[path.name] = sorted(m for m in needs if not BROUGHT_BY[m] & extras)
    assert missing == {p.name: [] for p in EXAMPLES}
