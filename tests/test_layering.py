"""The layering rule: agent/ never imports Qt, torch or the app; in gui/ only gui._qt imports Qt."""

from __future__ import annotations

import ast
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import ROOT

QT = {"PySide6", "PyQt5", "PyQt6", "pyqtgraph", "shiboken6"}


def imported_roots(path: Path) -> set[str]:
    roots = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            roots.update(a.name.split(".")[0] for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            roots.add(node.module.split(".")[0])
    return roots


@pytest.mark.parametrize("package", ["agent", "gui"])
def test_only_the_qt_layer_imports_qt(package):
    offenders = {}
    for path in sorted((ROOT / package).rglob("*.py")):
        if package == "gui" and "_qt" in path.relative_to(ROOT / package).parts:
            continue
        forbidden = QT | ({"gui"} if package == "agent" else set())
        bad = imported_roots(path) & forbidden
        if bad:
            offenders[str(path.relative_to(ROOT))] = sorted(bad)
    assert not offenders, f"layering broken: {offenders}"


def test_import_agent_is_cheap_and_pulls_in_no_qt_or_torch():
    code = ("import sys, agent, agent.client, agent.node.server, agent.cli\n"
            "bad = sorted({m.split('.')[0] for m in sys.modules} & {'torch', 'PySide6', 'pyqtgraph', 'gui'})\n"
            "print(','.join(bad))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, check=True)
    assert out.stdout.strip() == ""


def test_import_linter_contracts_hold():
    lint = shutil.which("lint-imports")
    assert lint, "import-linter is part of the test extra"
    out = subprocess.run([lint], capture_output=True, text=True, cwd=ROOT)
    assert out.returncode == 0, out.stdout + out.stderr
