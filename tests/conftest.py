"""Fixtures, and the session's setup: one local keyring for every process of the tests.

Helpers (the processes the tests start, waiting, sockets, the second user...) live in ``support/``:
no test imports this file."""

from __future__ import annotations

import os
import tempfile

import pytest

# every process of these tests is "the owner": one local keyring for the whole session, never the
# user's real one (a module-scoped agent and a later test's trainer must hold the same keys)
os.environ["PILOTHOUSE_LOCAL_KEYS"] = tempfile.mkdtemp(prefix="pilothouse-local-keys-")

from support.processes import AgentProcess  # noqa: E402
from support.sockets import free_port  # noqa: E402


@pytest.fixture(autouse=True)
def own_keyring(tmp_path, monkeypatch):
    """Tests (and the processes they start) never see the user's real CurveZMQ keys, nor the agents
    another test recorded (a command without --agent asks the recorded ones)."""
    monkeypatch.setenv("PILOTHOUSE_KEYS", str(tmp_path / "no-keys"))
    monkeypatch.setenv("PILOTHOUSE_RUNTIME", str(tmp_path / "runtime"))


@pytest.fixture
def agent_proc(tmp_path):
    proc = AgentProcess(tmp_path / "agent", free_port(), ["--stale-after", "3"]).start()
    yield proc
    proc.stop()


@pytest.fixture
def window(qtbot, tmp_path):
    """``window(agents)``: a real MainWindow on a store in ``tmp_path``, shown, closed at the end."""
    import gc

    from PySide6.QtCore import Qt
    from PySide6.QtGui import QGuiApplication

    from pilothouse.gui._qt.app import MainWindow

    gc.collect()  # earlier tests' windows die here, on the UI thread, not in a worker's collection
    # a modifier an earlier test left held (a key released on a closed window is dropped) would
    # make every click and selectRow of this test toggle: say so here, not as a far-off timeout
    assert QGuiApplication.keyboardModifiers() == Qt.KeyboardModifier.NoModifier, "a key is held"
    made = []

    def make(agents=()):
        w = MainWindow(tmp_path / "app-store.sqlite", agents)
        qtbot.addWidget(w)
        w.show()
        made.append(w)
        return w
    yield make
    for w in made:
        w.close()
