"""The Config tab: flattened config keys (rows) x selected runs (columns), differences highlighted,
and live edits of a running run's tunable hyperparameters.

Why the edit goes through a confirm and a background thread: a change reaches a training
process (it cannot be undone), and ``Client.command`` waits up to 30 s for the trainer's next
sync, which must not freeze the window.  The answer comes back as a signal; on a rejection
(or no answer) the cell returns to the value the run really has.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from PySide6.QtCore import QEvent, Qt
from PySide6.QtGui import QBrush
from PySide6.QtWidgets import (
    QHBoxLayout,
    QInputDialog,
    QLabel,
    QMessageBox,
    QPushButton,
    QTableWidget,
    QTableWidgetItem,
    QVBoxLayout,
    QWidget,
)

from pilothouse.text import parse_assignment, printable
from pilothouse.wire.tuning import validate_changes

from ..local_store import LocalStore
from ..models import LIVE, RunKey, config_diff, flatten, run_labels
from .calls import Calls
from .legend import swatch
from .theme import is_restyle, qcolor

MISSING = "—"
SET_WAIT = 30.0  # seconds to wait for the trainer's answer; past that the change stays queued


def ask_confirm(parent: QWidget, question: str) -> bool:
    """The default confirm step: a change reaches a live training process.  No is the default
    button: Enter alone never steers a run."""
    answer = QMessageBox.question(parent, "Change hyperparameter", question,
                                  defaultButton=QMessageBox.StandardButton.No)
    return answer == QMessageBox.StandardButton.Yes


class ConfigPanel(QWidget):

    def __init__(self) -> None:
        super().__init__()
        self.confirm: Callable[[QWidget, str], bool] = ask_confirm  # tests answer without the dialog
        self.keys: list[RunKey] = []
        self.configs: dict[RunKey, dict[str, Any]] = {}
        self.rows: list[str] = []
        self.tunable: set[str] = set()  # keys editable now: a single running run's schema keys
        self.differ: set[str] = set()  # keys whose values differ between the shown runs
        self.schemas: dict[RunKey, set[str]] = {}  # keys each run declared tunable (the others are dimmed)
        self.specs: dict[str, dict[str, Any]] = {}  # the one editable run's schema: checked before asking
        self.title = ""  # that run as the confirm names it: its name, and "paused" when it is
        self.table = QTableWidget()
        self.table.itemChanged.connect(self._on_item_changed)
        self.table.currentCellChanged.connect(self._update_button)
        self.edit_button = QPushButton("Edit…", enabled=False)
        self.edit_button.clicked.connect(self._edit_current)
        self.status = QLabel(wordWrap=True, textFormat=Qt.TextFormat.PlainText)  # agent text is never markup
        bar = QHBoxLayout()
        bar.addWidget(self.edit_button)
        bar.addWidget(self.status, 1)
        layout = QVBoxLayout(self)
        layout.addLayout(bar)
        layout.addWidget(self.table)
        self.calls = Calls(self)
        self.calls.answered.connect(self._on_answer)

    def show_runs(self, keys: list[RunKey], store: LocalStore, slots: dict[RunKey, int] | None = None) -> None:
        """Show these runs' configs as the store has them (the agent updates them on each applied set).
        Columns are named by run (the id only to tell apart two of one name), with the run's
        color from ``slots`` (as the charts draw it)."""
        runs = {(r["agent"], r["id"]): r for r in store.runs()}
        self.keys = [k for k in keys if k in runs]
        self.configs = {k: flatten(runs[k].get("config") or {}) for k in self.keys}
        self.schemas = {k: set(runs[k].get("schema") or {}) for k in self.keys}
        only = runs[self.keys[0]] if len(self.keys) == 1 else None
        live = only is not None and only.get("status") in LIVE  # the agent takes a set for a paused run too
        self.specs = dict(only.get("schema") or {}) if live else {}
        self.tunable = set(self.specs)
        self.title = _title(only) + (" (paused)" if only.get("status") == "paused" else "") if live else ""
        self.differ = config_diff({k: runs[k].get("config") or {} for k in self.keys})
        self.rows = sorted(set().union(*self.configs.values())) if self.configs else []
        labels = run_labels({k: runs[k].get("name") or "" for k in self.keys})
        table = self.table
        table.blockSignals(True)
        table.clear()
        table.setRowCount(len(self.rows))
        table.setColumnCount(len(self.keys))
        for c, key in enumerate(self.keys):
            header = QTableWidgetItem(labels[key])
            header.setToolTip(f"{_title(runs[key])} ({key[1]}) via {key[0]}")
            if slots and key in slots:
                header.setIcon(swatch(slots[key]))
            table.setHorizontalHeaderItem(c, header)
        table.setVerticalHeaderLabels(self.rows)
        for r, name in enumerate(self.rows):
            for c, key in enumerate(self.keys):
                item = QTableWidgetItem(_text(self.configs[key].get(name, MISSING)))
                flags = Qt.ItemFlag.ItemIsSelectable | Qt.ItemFlag.ItemIsEnabled
                if name in self.tunable:
                    flags |= Qt.ItemFlag.ItemIsEditable
                item.setFlags(flags)
                table.setItem(r, c, item)
        self._paint()
        table.blockSignals(False)
        table.resizeColumnsToContents()
        self._update_button()

    def _paint(self) -> None:
        """The current theme's colors: differing rows on the theme's highlight, values no run
        declared tunable dimmed (both pairs meet 4.5:1, see ``pilothouse.gui.themes``)."""
        blocked = self.table.blockSignals(True)
        for r, name in enumerate(self.rows):
            for c, key in enumerate(self.keys):
                item = self.table.item(r, c)
                if item is None:
                    continue
                dim = name not in self.tunable and name not in self.schemas.get(key, ())
                item.setData(Qt.ItemDataRole.ForegroundRole, QBrush(qcolor("dim_text")) if dim else None)
                item.setData(Qt.ItemDataRole.BackgroundRole, QBrush(qcolor("diff_bg")) if name in self.differ else None)
        self.table.blockSignals(blocked)

    def changeEvent(self, event: QEvent) -> None:  # noqa: N802 (Qt's name)
        if is_restyle(event):
            self._paint()  # another theme: the baked item colors follow
        super().changeEvent(event)

    def request_set(self, name: str, text: str) -> bool:
        """Parse ``text`` like the CLI's key=value, check it against the run's declared schema,
        confirm, and send it off the UI thread.  A value the schema refuses is said at once, with
        no dialog first (asking "are you sure?" about a change that cannot happen wastes a decision).
        Returns False when nothing was sent (not editable, refused, or not confirmed)."""
        if name not in self.tunable or len(self.keys) != 1:
            return False
        key = self.keys[0]
        old = self.configs[key].get(name)
        _, value = parse_assignment(f"{name}={text.strip()}")
        try:
            value = validate_changes(self.specs, {name: value})[name]
        except ValueError as exc:
            self._say(f"{name} not sent: {exc}")
            self._show_value(name, old)
            return False
        if not self.confirm(self, f"Set {name} = {_text(value)} (now {_text(old)}) on {self.title}?\n\n"
                                  "The trainer takes it at its next sync; it cannot be undone, only set again."):
            self._show_value(name, old)
            return False
        self.status.setText(f"{name}={value!r}: waiting for the trainer's next sync…")
        self.calls.call(key[0], lambda c: c.command(key[1], "set", values={name: value}, wait=SET_WAIT,
                                                    who={"client": "gui"}), (key, name, old))
        return True

    def _say(self, text: str) -> None:
        self.status.setText(printable(text))  # the trainer's detail: shown, never acted on

    def _on_answer(self, tag: tuple[RunKey, str, Any], ok: bool, answer: Any) -> None:
        key, name, old = tag
        if not ok:
            self._say(f"{name} not changed: {answer}")
        elif answer["state"] == "applied":
            self._say(answer.get("detail") or f"{name} applied at step {answer.get('step')}")
        elif answer["state"] == "rejected":
            self._say(f"{name} rejected: {answer.get('detail')}")
        else:
            self._say(answer.get("detail") or f"{name}: no answer within {SET_WAIT:g} s; "
                                                        "it stays queued for the trainer's next sync")
        if key not in self.keys:
            return  # another selection is shown now
        applied = answer.get("applied", {}) if ok and answer["state"] == "applied" else {}
        if name in applied:
            self.configs[key][name] = applied[name]
        self._show_value(name, self.configs[key].get(name, old))

    def _on_item_changed(self, item: QTableWidgetItem) -> None:
        self.request_set(self.rows[item.row()], item.text())

    def _edit_current(self) -> None:
        row = self.table.currentRow()
        if row < 0 or self.rows[row] not in self.tunable:
            return
        name = self.rows[row]
        text, ok = QInputDialog.getText(self, "Edit hyperparameter", f"New value of {name}:",
                                        text=_text(self.configs[self.keys[0]].get(name)))
        if ok:
            self.request_set(name, text)

    def _update_button(self, *_: object) -> None:
        row = self.table.currentRow()
        self.edit_button.setEnabled(0 <= row < len(self.rows) and self.rows[row] in self.tunable)

    def _show_value(self, name: str, value: Any) -> None:
        item = self.table.item(self.rows.index(name), 0)
        self.table.blockSignals(True)
        item.setText(_text(value))
        self.table.blockSignals(False)


def _title(run: dict) -> str:
    return "/".join(p for p in (run.get("project"), run.get("name")) if p) or run["id"]


def _text(value: Any) -> str:
    """Values as typed back by a user: true/false, numbers as repr, strings bare."""
    if isinstance(value, bool):
        return str(value).lower()
    return value if isinstance(value, str) else repr(value)
