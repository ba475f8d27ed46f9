"""One import name, and the layering rules: import-linter contracts in pyproject.toml, checked on a
real install of the package; ``import pilothouse`` in a trainer loads no SQLite, Qt or torch."""

from __future__ import annotations

import importlib.util
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest
from support.paths import ROOT

PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())
FOLDERS = {"pilothouse": ROOT / "agent", "pilothouse.gui": ROOT / "gui"}


def source_modules() -> set[str]:
    """Every module of the checkout under the name it is installed as."""
    names = set()
    for prefix, folder in FOLDERS.items():
        for path in folder.rglob("*.py"):
            parts = path.relative_to(folder).with_suffix("").parts
            if prefix == "pilothouse" and parts[0] == "gui":
                continue
            names.add(".".join((prefix, *parts)).removesuffix(".__init__"))
    return names


@pytest.fixture(scope="module")
def installed(tmp_path_factory) -> Path:
    """``pip install .`` (not editable) into a folder of its own: what a user gets from a wheel."""
    target = tmp_path_factory.mktemp("site")
    source = tmp_path_factory.mktemp("source") / "pilothouse"  # a copy: a build in the checkout's build/ can collide
    shutil.copytree(ROOT, source, ignore=shutil.ignore_patterns(".venv", ".git", "build", "*.egg-info", "__pycache__",
                                                                 "results", ".pytest_cache"))
    out = subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--no-compile",
                          "--target", str(target), str(source)], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stdout + out.stderr
    return target


def test_one_top_level_name_holds_every_module(installed):
    tops = {p.name for p in installed.iterdir() if not p.name.endswith(".dist-info") and p.name != "bin"}
    assert tops == {"pilothouse"}
    modules = {".".join(p.relative_to(installed).with_suffix("").parts).removesuffix(".__init__")
               for p in (installed / "pilothouse").rglob("*.py")}
    assert modules == source_modules(), "a package is missing from [tool.setuptools] packages"


def test_no_agent_or_gui_module_outside_the_checkout(tmp_path):
    """The editable install maps both folders into ``pilothouse`` and nothing else."""
    code = ("import importlib.util, pilothouse, pilothouse.gui\n"
            "print(importlib.util.find_spec('agent'), importlib.util.find_spec('gui'), pilothouse.gui.__file__)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=tmp_path, check=True)
    agent, gui, path = out.stdout.split()
    assert (agent, gui) == ("None", "None")
    assert Path(path) == ROOT / "gui" / "__init__.py"


def test_import_linter_contracts_hold(installed, tmp_path):
    lint = shutil.which("lint-imports")
    assert lint, "import-linter is part of the test extra"
    out = subprocess.run([lint, str(ROOT / "pyproject.toml"), "--no-cache"], capture_output=True,
                         text=True, cwd=tmp_path, env={"PYTHONPATH": str(installed), "PATH": "/usr/bin:/bin"})
    assert out.returncode == 0, out.stdout + out.stderr
    assert "0 broken" in out.stdout


def test_contracts_name_every_module():
    """A new module must fall under the rules: the agent side's contract lists every top-level
    module and folder of agent/, the Qt contract every plain module of gui/."""
    contracts = {c["name"]: c for c in PYPROJECT["tool"]["importlinter"]["contracts"]}
    agent_side = set(contracts["the agent side never imports Qt or the app"]["source_modules"])
    tops = {f"pilothouse.{p.stem}" for p in (ROOT / "agent").iterdir()
            if p.suffix == ".py" and p.stem not in ("__init__", "__main__") or (p / "__init__.py").exists()}
    assert agent_side == tops
    plain = set(contracts["in the app only gui._qt imports Qt"]["source_modules"])
    assert plain == {f"pilothouse.gui.{p.stem}" for p in (ROOT / "gui").glob("*.py")
                     if p.stem not in ("__init__", "__main__")}


def test_import_pilothouse_is_cheap(tmp_path):
    """A trainer's ``import pilothouse`` and ``ph.init``'s own imports load no SQLite, Qt or torch;
    the node agent, the CLI and the client load no Qt, no torch, none of the trainer's code, and not
    the pandas and pyarrow that sqlite-utils would bring (installed here, as beside most trainers)."""
    assert importlib.util.find_spec("pandas") and importlib.util.find_spec("pyarrow"), "nothing to keep out"
    heavy = ("{'sqlite3', 'sqlite_utils', 'torch', 'transformers', 'PySide6', 'pyqtgraph', 'shiboken6', 'pandas', "
             "'pyarrow'}")
    loaded = f"','.join(sorted({{m.split('.')[0] for m in sys.modules}} & {heavy}))"
    trainer = ("import sys, pilothouse as ph\n"
               "ph.init, ph.Run\n"
               f"print({loaded})")
    node = ("import sys, pilothouse.client, pilothouse.node.server, pilothouse.cli\n"
            f"print({loaded})\n"
            "print(','.join(sorted(m for m in sys.modules if m.startswith('pilothouse.trainer'))))")
    out = subprocess.run([sys.executable, "-c", trainer], capture_output=True, text=True, cwd=tmp_path, check=True)
    assert out.stdout.strip() == ""
    out = subprocess.run([sys.executable, "-c", node], capture_output=True, text=True, cwd=tmp_path, check=True)
    assert out.stdout.split("\n")[:2] == ["sqlite3,sqlite_utils", ""]
