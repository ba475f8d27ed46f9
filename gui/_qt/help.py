"""Help → the documentation pages, Keyboard shortcuts and About: the shortcuts are read from the window's own
actions and the pages' titles from the pages, so neither list can drift from what exists."""

from __future__ import annotations

from pathlib import Path

from PySide6.QtCore import QUrl
from PySide6.QtGui import QAction, QDesktopServices, QKeySequence
from PySide6.QtWidgets import (
    QDialog,
    QDialogButtonBox,
    QMenu,
    QMessageBox,
    QTableWidget,
    QTableWidgetItem,
    QVBoxLayout,
    QWidget,
)

from pilothouse.version import __version__


def shortcut_rows(window: QWidget) -> list[tuple[str, str]]:
    """(what it does, keys) for every action of ``window`` that has a shortcut, sorted by what it does."""
    native = QKeySequence.SequenceFormat.NativeText
    rows = {(a.text().replace("&", "").rstrip("…").strip(), a.shortcut().toString(native))
            for a in window.findChildren(QAction) if not a.shortcut().isEmpty() and a.text()}
    return sorted(rows, key=lambda r: r[0].lower())


class ShortcutsDialog(QDialog):
    """A two-column table: the action and its keys."""

    def __init__(self, window: QWidget):
        super().__init__(window, windowTitle="Keyboard shortcuts")
        rows = shortcut_rows(window)
        self.table = QTableWidget(len(rows), 2, self)
        self.table.setHorizontalHeaderLabels(["Action", "Keys"])
        self.table.verticalHeader().hide()
        self.table.setEditTriggers(QTableWidget.EditTrigger.NoEditTriggers)
        for i, (what, keys) in enumerate(rows):
            self.table.setItem(i, 0, QTableWidgetItem(what))
            self.table.setItem(i, 1, QTableWidgetItem(keys))
        self.table.resizeColumnsToContents()
        self.table.horizontalHeader().setStretchLastSection(True)
        buttons = QDialogButtonBox(QDialogButtonBox.StandardButton.Close, rejected=self.reject)
        layout = QVBoxLayout(self)
        layout.addWidget(self.table)
        layout.addWidget(buttons)
        self.resize(420, 480)

    def rows(self) -> list[tuple[str, str]]:
        """What the dialog shows, row by row."""
        return [(self.table.item(i, 0).text(), self.table.item(i, 1).text()) for i in range(self.table.rowCount())]


ABOUT = (f"<b>Pilothouse {__version__}</b><p>Watch and steer training runs: pause, resume, checkpoint, "
         "change a tunable value or stop a run from here or from <code>pilothouse</code> on the command line."
         "<p>Help → Getting started opens the README; the entries below it, the pages on the app, the trainer "
         "API, steering, the command and the rest.")


def show_about(parent: QWidget) -> None:
    """Help → About: the version, which bug reports need."""
    QMessageBox.about(parent, "About Pilothouse", ABOUT)



# the order a reader meets them in the README's "More" list; a page not named here comes after, by file name
DOCS_ORDER = ("app", "training-loop", "steering", "frameworks", "alerts", "cli", "examples", "security",
              "promises", "benchmarks", "layout")
NO_DOCS = "Documentation: README.md and docs/ of the source checkout"


def docs_root(package: Path | None = None) -> Path | None:
    """The source checkout whose README.md and docs/ the Help menu opens, or None for an install without
    them (a wheel ships neither, and pyproject names no public address to open instead). The package
    ``pilothouse`` (``package``, else the one imported) is the checkout's ``agent/`` folder, so its parent
    is the checkout only in that layout: a README.md lying in site-packages is not ours."""
    if package is None:
        import pilothouse.version

        package = Path(pilothouse.version.__file__).resolve().parent
    root = package.parent
    if package.name == "agent" and (root / "README.md").is_file() and (root / "docs").is_dir():
        return root
    return None


def doc_pages(root: Path | None) -> list[tuple[str, QUrl]]:
    """(menu entry, the file's URL) for the README ("Getting started") and each docs/ page, titled by its
    first heading: the menu opens exactly these."""
    if root is None:
        return []
    pages = [("Getting started", QUrl.fromLocalFile(str(root / "README.md")))]
    rank = {name: i for i, name in enumerate(DOCS_ORDER)}
    for page in sorted((root / "docs").glob("*.md"), key=lambda p: (rank.get(p.stem, len(rank)), p.name)):
        first = page.read_text(encoding="utf-8").partition("\n")[0]
        pages.append((first.removeprefix("# ").strip() or page.stem, QUrl.fromLocalFile(str(page))))
    return pages


def open_doc(url: QUrl) -> bool:
    """Opens a page with the desktop's handler for it (a browser or an editor); False when none took it."""
    return QDesktopServices.openUrl(url)


def add_doc_actions(menu: QMenu, parent: QWidget,
                    pages: list[tuple[str, QUrl]] | None = None) -> list[QAction]:
    """Adds an entry per page (by default ``doc_pages(docs_root())``; each action's data is the URL it
    opens), then a separator; with no pages, one disabled entry saying where the documentation is."""
    pages = doc_pages(docs_root()) if pages is None else pages
    actions = []
    for title, url in pages:
        act = QAction(title, parent, triggered=lambda _=False, u=url: open_doc(u))
        act.setData(url)
        act.setToolTip(url.toLocalFile())
        actions.append(act)
    if not pages:
        act = QAction(NO_DOCS, parent, enabled=False)
        actions.append(act)
    for act in actions:
        menu.addAction(act)
    menu.addSeparator()
    return actions
