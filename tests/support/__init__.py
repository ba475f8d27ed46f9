"""Helpers the tests share that the app does not ship: the one place for them (a test module never
imports ``conftest`` or another test module).  tests/ is on sys.path (pytest puts a conftest's
folder there), so a test writes ``from support.x import ...``; a module that holds fixtures is
taken with ``pytest_plugins = ["support.x"]``."""

from pathlib import Path

import pytest

# a test module imports these helpers before pytest loads them (as a plugin, or not at all): rewrite
# their asserts anyway, as pytest did while they lived in conftest.py
pytest.register_assert_rewrite(*(f"{__name__}.{p.stem}" for p in Path(__file__).parent.glob("*.py")
                                 if p.stem != "__init__"))
