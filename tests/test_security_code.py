"""What the code itself cannot do, read from its sources (no process started): nothing deserialises
into objects or dispatches by a name off the wire, and the agent's message path builds no file paths.
"""

from __future__ import annotations

import ast
from pathlib import Path

from support.paths import ROOT
from support.sources import imported_roots

UNSAFE_MODULES = {"pickle", "cPickle", "marshal", "shelve", "dill", "cloudpickle", "yaml", "jsonpickle"}
WIRE_MODULES = ["node/server.py", "node/command_desk.py", "node/query_desk.py", "node/trainer_desk.py",
                "node/feed.py", "node/journal.py",
                "security.py", *(f"wire/{p.name}" for p in sorted((ROOT / "agent" / "wire").glob("*.py")))]


def calls(path: Path) -> list[ast.Call]:
    return [n for n in ast.walk(ast.parse(path.read_text(), str(path))) if isinstance(n, ast.Call)]


def call_name(node: ast.Call) -> str:
    f = node.func
    return f.id if isinstance(f, ast.Name) else f.attr if isinstance(f, ast.Attribute) else ""


def test_no_unsafe_deserialisation_or_dynamic_dispatch():
    sources = sorted((ROOT / "agent").rglob("*.py")) + sorted((ROOT / "gui").rglob("*.py"))
    unsafe = {str(p.relative_to(ROOT)): sorted(imported_roots(p) & UNSAFE_MODULES) for p in sources}
    assert not {k: v for k, v in unsafe.items() if v}
    dynamic = [(str(p.relative_to(ROOT)), n.lineno) for p in sources for n in calls(p)
               if isinstance(n.func, ast.Name) and n.func.id in ("eval", "exec", "compile", "__import__")
               or call_name(n) == "getattr" and len(n.args) > 1 and not isinstance(n.args[1], ast.Constant)
               or call_name(n) == "import_module" and p.name != "__init__.py"]
    assert not dynamic, dynamic


def test_wire_handling_code_builds_no_file_paths():
    """The only file the agent's message path touches is the journal it was started with."""
    touching = {"open", "unlink", "remove", "rmtree", "mkdir", "rename", "replace", "write_text", "write_bytes"}
    found = [(name, n.lineno, call_name(n)) for name in WIRE_MODULES for n in calls(ROOT / "agent" / name)
             if call_name(n) in touching]
    # security.py writes the keyring's own files (CLI only); the journal creates its directory
    allowed = {("security.py", "mkdir"), ("security.py", "open"), ("security.py", "unlink"),
               ("security.py", "replace"), ("node/journal.py", "mkdir")}
    assert [f for f in found if (f[0], f[2]) not in allowed] == []
