"""File → Remove run from this app… and Clean up store… on the real window, offscreen: the
confirmations say what goes and its size, a live run asks once more, the work runs off the UI
thread, and the run list follows."""

from __future__ import annotations

import os
import tempfile

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
os.environ["XDG_CONFIG_HOME"] = tempfile.mkdtemp(prefix="pilothouse-qt-config-")  # QSettings stays in tests

import pytest  # noqa: E402

pytest.importorskip("PySide6")
pytest.importorskip("pytestqt")

from PySide6.QtCore import QItemSelectionModel  # noqa: E402
from PySide6.QtWidgets import QDialog  # noqa: E402
from support.app_store import DAY, fill, run  # noqa: E402

from pilothouse.gui._qt import app as app_module  # noqa: E402
from pilothouse.gui._qt.store_dialogs import CleanupDialog, fmt_bytes  # noqa: E402
from pilothouse.gui.local_store import LocalStore  # noqa: E402

A = "tcp://127.0.0.1:1"  # never answers: the store alone feeds the window


@pytest.fixture
def stored(tmp_path):
    """The window's store with an old finished run, a recent one and a live one, each with points."""
    import time

    now = time.time()
    store = LocalStore(tmp_path / "app-store.sqlite")
    store.put_runs(A, [run("old", ended=now - 40 * DAY), run("recent", ended=now - DAY),
                       run("live", "running", ended=None, last_seen=now - 60 * DAY)])
    for i, run_id in enumerate(("old", "recent", "live")):
        fill(store, A, run_id, 1 + 1000 * i, 200)
    yield store
    store.close()


def listed(w) -> list[str]:
    return sorted(w.table_model.row_at(i).run_id for i in range(w.table_model.rowCount()))


def select(w, *ids: str) -> None:
    flags = QItemSelectionModel.SelectionFlag.Select | QItemSelectionModel.SelectionFlag.Rows
    for i in range(w.table_model.rowCount()):
        if w.table_model.row_at(i).run_id in ids:
            w.table.selectionModel().select(w.table_model.index(i, 0), flags)


def file_action(w, text: str):
    menu = next(a.menu() for a in w.menuBar().actions() if a.text() == "&File")
    return next(a for a in menu.actions() if a.text() == text)


def test_clean_up_shows_what_goes_then_removes_it_off_the_ui_thread(window, qtbot, stored, monkeypatch):
    seen = {}

    def accept(dialog: CleanupDialog) -> int:  # the user leaves "more than 30 days ago" and clicks Remove
        seen["summary"], seen["items"] = dialog.summary.text(), dialog.listing.count()
        dialog.set_limits(days=None, gigabytes=None)
        seen["nothing"] = dialog.summary.text(), dialog.remove.isEnabled()
        dialog.set_limits(days=30, gigabytes=None)
        return QDialog.DialogCode.Accepted

    monkeypatch.setattr(CleanupDialog, "exec", accept)
    size = stored.run_sizes()[(A, "old")]
    w = window()
    w._redraw()
    assert listed(w) == ["live", "old", "recent"]
    file_action(w, "Clean &up store…").trigger()
    assert seen["summary"] == f"1 run would go, {fmt_bytes(size)}:" and seen["items"] == 1  # not the live one
    assert seen["nothing"] == ("Nothing would go.", False)
    assert listed(w) == ["live", "recent"]  # hidden at once
    qtbot.waitUntil(lambda: "removed 1 run" in w.statusBar().currentMessage(), timeout=5000)
    assert fmt_bytes(size) in w.statusBar().currentMessage()
    assert stored.metrics(A, "old") == [] and stored.metrics(A, "recent") == ["m0", "m1", "m2"]

    w._on_batch(A, [], [run("old"), run("recent")])  # the agent still lists it: it does not come back
    w._redraw()
    assert listed(w) == ["live", "recent"]


def test_removing_a_live_run_asks_twice_and_no_means_nothing_goes(window, qtbot, stored, monkeypatch):
    asked, answers = [], []
    monkeypatch.setattr(app_module, "ask_user", lambda parent: lambda title, text: asked.append(text) or answers.pop(0))
    w = window()
    w._redraw()
    select(w, "live", "recent")
    assert sorted(k[1] for k in w.runs.selected()) == ["live", "recent"]
    remove = file_action(w, "&Remove run from this app…")

    answers[:] = [True, False]
    remove.trigger()
    assert asked[0].startswith("Remove 2 runs (") and "p/recent · finished" in asked[0]
    assert "p/live (running) may still be training" in asked[1]
    assert listed(w) == ["live", "old", "recent"]

    asked.clear()
    answers[:] = [True, True]
    remove.trigger()
    assert len(asked) == 2 and listed(w) == ["old"] and w.runs.selected() == []
    qtbot.waitUntil(lambda: "removed 2 runs" in w.statusBar().currentMessage(), timeout=5000)
    assert stored.metrics(A, "live") == [] and stored.metrics(A, "old") == ["m0", "m1", "m2"]


def test_a_removal_left_pending_finishes_when_the_app_starts(window, qtbot, stored):
    stored._mark_removed([(A, "old")], force=False)  # as a killed app left it: marked, rows still there
    w = window()
    w._redraw()
    assert listed(w) == ["live", "recent"]
    qtbot.waitUntil(lambda: "finished removing 1 run" in w.statusBar().currentMessage(), timeout=5000)
    assert stored.pending_removals() == [] and stored.metrics(A, "old") == []
