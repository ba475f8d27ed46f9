"""Answering the app's real modal dialogs from a test: a timer clicks a button once the dialog is up.

The dialog's ``exec()`` runs its own event loop, so the answer has to come from inside that loop;
a short polling timer finds the active modal box and records its text before clicking.
"""

from __future__ import annotations

from PySide6.QtCore import QTimer
from PySide6.QtWidgets import QApplication, QMessageBox


def answer_next_box(button: str, seen: list[str], poll_ms: int = 20, tries: int = 500) -> None:
    """Click the button labelled ``button`` on the next modal QMessageBox; its text goes to ``seen``
    (its default button's text follows, as "default: <text>")."""
    def poll(left: int) -> None:
        box = QApplication.activeModalWidget()
        if isinstance(box, QMessageBox) and box.isVisible():
            seen.append(box.text())
            seen.append(f"default: {box.defaultButton().text() if box.defaultButton() else ''}")
            next(b for b in box.buttons() if b.text().replace("&", "") == button).click()
        elif left:
            QTimer.singleShot(poll_ms, lambda: poll(left - 1))

    QTimer.singleShot(poll_ms, lambda: poll(tries))
