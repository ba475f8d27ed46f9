"""File → Quit (Ctrl+Q) and the Help menu: the shortcuts dialog lists the window's real shortcuts, About the version."""

from __future__ import annotations

import os
import tempfile

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
os.environ["XDG_CONFIG_HOME"] = tempfile.mkdtemp(prefix="pilothouse-qt-config-")  # QSettings stays in tests

import pytest  # noqa: E402

pytest.importorskip("PySide6")
pytest.importorskip("pytestqt")

from support.dialogs import answer_next_box  # noqa: E402

from pilothouse.version import __version__  # noqa: E402


def _menu(w, title: str) -> dict[str, object]:
    menu = next(a.menu() for a in w.menuBar().actions() if a.text().replace("&", "") == title)
    return {a.text().replace("&", ""): a for a in menu.actions() if a.text()}


def test_help_menu_lists_the_shortcuts_and_the_version(window, qtbot):
    from PySide6.QtWidgets import QApplication

    from pilothouse.gui._qt.help import ShortcutsDialog

    w = window([])
    helps = _menu(w, "Help")
    assert {"Keyboard shortcuts", "About Pilothouse"} <= set(helps)

    rows = dict(ShortcutsDialog(w).rows())
    assert rows["Pause"] == "Ctrl+P" and rows["Resume"] == "Ctrl+R" and rows["Checkpoint"] == "Ctrl+S"
    assert rows["Quit"] == "Ctrl+Q" and rows["Filter runs"] == "Ctrl+F" and rows["Rollouts"] == "Alt+3"
    assert rows["Keyboard shortcuts"] == "F1"
    w.actions["pause"].setShortcut("Ctrl+Shift+P")  # read from the actions: a changed key shows as it is
    assert dict(ShortcutsDialog(w).rows())["Pause"] == "Ctrl+Shift+P"

    def close_dialog() -> None:
        dialog = QApplication.activeModalWidget()
        seen.append(dialog.windowTitle())
        dialog.reject()

    from PySide6.QtCore import QTimer

    seen: list[str] = []
    QTimer.singleShot(100, close_dialog)
    helps["Keyboard shortcuts"].trigger()  # the menu entry opens the real dialog
    assert seen == ["Keyboard shortcuts"]

    about: list[str] = []
    answer_next_box("OK", about)
    helps["About Pilothouse"].trigger()
    assert about and __version__ in about[0]


def test_ctrl_q_quits(window, qtbot):
    from PySide6.QtCore import Qt
    from PySide6.QtGui import QGuiApplication
    from PySide6.QtWidgets import QWidget

    w = window([])
    assert _menu(w, "File")["Quit"].shortcut().toString() == "Ctrl+Q"
    w.activateWindow()
    qtbot.waitUntil(w.isActiveWindow, timeout=5000)
    qtbot.keyPress(w, Qt.Key.Key_Q, Qt.KeyboardModifier.ControlModifier)
    qtbot.waitUntil(lambda: not w.isVisible(), timeout=5000)
    # the release goes to a window still shown: a closed one drops it and Qt would keep Ctrl held
    # for every later test of this process (a selectRow then toggles instead of selecting)
    other = QWidget()
    qtbot.addWidget(other)
    other.show()
    qtbot.keyRelease(other, Qt.Key.Key_Q, Qt.KeyboardModifier.ControlModifier)
    qtbot.keyRelease(other, Qt.Key.Key_Control)
    assert QGuiApplication.keyboardModifiers() == Qt.KeyboardModifier.NoModifier
    assert w._closed  # closed through closeEvent: layout saved, links closed
