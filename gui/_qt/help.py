"""Help → Keyboard shortcuts and About: read from the window's own actions, so the list cannot drift
from the keys that work."""

from __future__ import annotations

from PySide6.QtGui import QAction, QKeySequence
from PySide6.QtWidgets import (
    QDialog,
    QDialogButtonBox,
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
         "<p>The README describes the agent, the trainer API and the CLI.")


def show_about(parent: QWidget) -> None:
    """Help → About: the version, which bug reports need."""
    QMessageBox.about(parent, "About Pilothouse", ABOUT)

