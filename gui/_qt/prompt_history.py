"""The Rollouts tab's prompt history: the selected row's prompt at every step it was sampled.

Why: a prompt's completions over training show what the policy learned on it (or stopped doing),
which one step cannot.  Newest step first, two runs paired by prompt as in the table; clicking a line
shows it in the transcript.  Loaded once per selection from the app's local store, bounded
(``pilothouse.gui.prompt_history``), never per paint.
"""

from __future__ import annotations

from typing import Any

from PySide6.QtCore import QModelIndex, Signal
from PySide6.QtWidgets import QAbstractItemView, QHeaderView, QLabel, QTableView, QVBoxLayout, QWidget

from ..local_store import LocalStore
from ..models import RunKey
from ..prompt_history import HISTORY_HITS, history, paired
from ..transcript import summary
from .rollouts_model import Line, RolloutsModel


class HistoryView(QWidget):
    """The history's lines; ``picked`` gives the clicked line."""

    picked = Signal(object)  # a Line

    def __init__(self) -> None:
        super().__init__()
        self.title = QLabel("select a row: its prompt's completions at every step")
        self.title.setWordWrap(True)
        self.model = RolloutsModel()
        self.table = QTableView(wordWrap=False)
        self.table.setModel(self.model)
        self.table.setSelectionBehavior(QAbstractItemView.SelectRows)
        self.table.setSelectionMode(QAbstractItemView.SingleSelection)
        self.table.verticalHeader().hide()
        self.table.selectionModel().currentRowChanged.connect(self._on_row)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.addWidget(self.title)
        layout.addWidget(self.table)

    def load(self, store: LocalStore, keys: list[RunKey], names: list[str], slots: list[int | None],
             prompt: Any) -> None:
        """The history of ``prompt`` in the shown runs (one, or two paired)."""
        if prompt is None:  # a row logging only its trajectory (``messages``) has no prompt to follow
            self.model.set_lines([], names, slots)
            self.title.setText("this row logs no prompt: no history to follow")
            return
        found = [history(store, key, prompt) for key in keys]
        lines = paired(found[0].rows, found[1].rows if len(found) == 2 else None)
        self.model.set_lines(lines, names, slots)
        self.table.setColumnHidden(1, True)  # the prompt: the same on every line
        header = self.table.horizontalHeader()
        for column, name in enumerate(self.model.headers()):
            header.setSectionResizeMode(column, QHeaderView.Stretch if name.startswith("completion")
                                        else QHeaderView.ResizeToContents)
        steps = len({step for step, _ in lines})
        cut = "" if all(h.complete for h in found) else f" (the newest {HISTORY_HITS} matches searched)"
        self.title.setText(f"“{summary(prompt)[:80]}” at {steps} step{'s' * (steps != 1)}, newest first{cut}")

    def clear(self) -> None:
        self.model.set_lines([], self.model.names, self.model.slots)
        self.title.setText("select a row: its prompt's completions at every step")

    def lines(self) -> list[Line]:
        return self.model.lines

    def _on_row(self, current: QModelIndex, *_: object) -> None:
        if current.isValid():
            self.picked.emit(self.model.lines[current.row()])
