"""File → Quit (Ctrl+Q) and the Help menu: the shortcuts dialog lists the window's real shortcuts, About the version."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

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


def test_help_menu_opens_the_readme_and_every_docs_page(window, qtbot):
    """An entry per page, titled by the page, each opening that file of the checkout through the desktop's
    URL handler (a handler of the test's takes the URL here instead of a browser)."""
    from PySide6.QtCore import QObject, QUrl, Slot
    from PySide6.QtGui import QDesktopServices
    from support.paths import ROOT

    from pilothouse.gui._qt.help import doc_pages, docs_root

    assert docs_root() == ROOT  # the tests run from the checkout: its README and docs/ are the pages
    pages = doc_pages(ROOT)
    files = [url.toLocalFile() for _, url in pages]
    assert files[0] == str(ROOT / "README.md") and pages[0][0] == "Getting started"
    assert sorted(files[1:]) == sorted(str(p) for p in (ROOT / "docs").glob("*.md"))
    for (title, _), path in zip(pages[1:], files[1:]):
        assert Path(path).read_text().splitlines()[0] == f"# {title}"

    w = window([])
    helps = _menu(w, "Help")
    assert {"Getting started", "Steering a run", "Security", "Keyboard shortcuts", "About Pilothouse"} <= set(helps)
    entries = [a for a in next(a.menu() for a in w.menuBar().actions() if a.text() == "&Help").actions()
               if isinstance(a.data(), QUrl)]
    assert [(a.text(), a.data()) for a in entries] == pages

    class Handler(QObject):
        def __init__(self) -> None:
            super().__init__()
            self.opened: list[QUrl] = []

        @Slot(QUrl)
        def take(self, url: QUrl) -> None:
            self.opened.append(url)

    handler = Handler()
    QDesktopServices.setUrlHandler("file", handler, "take")
    try:
        for a in entries:
            a.trigger()
    finally:
        QDesktopServices.unsetUrlHandler("file")
    assert handler.opened == [url for _, url in pages]
    assert all(u.isLocalFile() and Path(u.toLocalFile()).is_file() for u in handler.opened)


def test_help_menu_without_a_checkout_says_where_the_docs_are(tmp_path, qtbot):
    """An install without README.md and docs/ (a wheel; pyproject names no public address): one disabled
    entry says where the documentation lives, none opens a missing file. A page the order does not name
    still gets its entry, after the others."""
    from PySide6.QtWidgets import QMenu, QWidget

    from pilothouse.gui._qt.help import NO_DOCS, add_doc_actions, doc_pages, docs_root

    checkout, wheel = tmp_path / "checkout", tmp_path / "site-packages"
    for root in (checkout, wheel):
        (root / "docs").mkdir(parents=True)
        (root / "README.md").write_text("# Some README\n")
    (checkout / "agent").mkdir()
    (wheel / "pilothouse").mkdir()
    assert docs_root(checkout / "agent") == checkout
    assert docs_root(wheel / "pilothouse") is None  # a README.md beside an installed package is not ours
    assert docs_root(checkout / "agent" / "missing") is None
    (checkout / "docs" / "zz-new.md").write_text("# A page the order does not name\n")
    (checkout / "docs" / "app.md").write_text("# The desktop app\n")

    parent = QWidget()
    qtbot.addWidget(parent)
    assert [a.text() for a in add_doc_actions(QMenu(parent), parent, doc_pages(checkout))] == [
        "Getting started", "The desktop app", "A page the order does not name"]
    assert doc_pages(None) == []
    menu = QMenu(parent)
    actions = add_doc_actions(menu, parent, doc_pages(None))
    assert [(a.text(), a.isEnabled(), a.data()) for a in actions] == [(NO_DOCS, False, None)]
    assert [a.text() for a in menu.actions()] == [NO_DOCS, ""]  # then the separator
