"""The Alerts tab: firing and recent alerts across runs, and the agents' rules.

Why rule edits go through a background thread: ``Client`` calls wait on the network (up to
the timeout), which must not freeze the window; the answer comes back as a signal, and the
agent's error text is shown as is (it says what was wrong with the rule).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from PySide6.QtCore import QEvent, Qt, Signal
from PySide6.QtGui import QColor
from PySide6.QtWidgets import (
    QAbstractItemView,
    QCheckBox,
    QComboBox,
    QDialog,
    QDialogButtonBox,
    QFormLayout,
    QGroupBox,
    QHBoxLayout,
    QLabel,
    QLineEdit,
    QPushButton,
    QSplitter,
    QStackedWidget,
    QTableWidget,
    QTableWidgetItem,
    QVBoxLayout,
    QWidget,
)

from pilothouse.client import Client
from pilothouse.text import printable

from ..alerts import FLOAT_FIELDS, INT_FIELDS, KIND_FIELDS, KINDS, NO_RULES, AlertBook, rule_from_form, rule_text
from ..models import RunKey
from .calls import Calls
from .theme import current, is_restyle, qcolor

FIELD_HINTS = {"metric": "e.g. loss or reward/mean", "threshold": "value", "for_steps": "consecutive steps (1)",
               "pct": "% below the running best", "window": "steps", "seconds": "seconds",
               "util": "GPU utilization % below which it is idle"}

RunChoices = Callable[[str], list[tuple[str, str]]]  # agent url -> [(run id, title)]


class RuleDialog(QDialog):
    """The Add-rule form: only the chosen kind's fields are enabled; ``rule`` and ``run`` hold
    the result after ``accept``."""

    def __init__(self, parent: QWidget | None, runs: list[tuple[str, str]]):
        super().__init__(parent, windowTitle="Add alert rule")
        self.rule: dict | None = None
        self.run: str | None = None
        self.name = QLineEdit(placeholderText="e.g. nan-loss")
        self.kind = QComboBox()
        self.kind.addItems(KINDS)
        self.fields = {f: QLineEdit(placeholderText=FIELD_HINTS[f]) for f in ("metric", *INT_FIELDS, *FLOAT_FIELDS)}
        self.pause = QCheckBox("pause the run when it fires")
        self.scope = QComboBox()
        self.scope.addItem("every run", None)
        for run_id, title in runs:
            self.scope.addItem(f"{title} ({run_id})", run_id)
        self.error = QLabel(wordWrap=True, styleSheet=f"color: {current().alert_text}")
        form = QFormLayout(self)
        form.addRow("name", self.name)
        form.addRow("kind", self.kind)
        for field, edit in self.fields.items():
            form.addRow(field.replace("_", " "), edit)
        form.addRow("", self.pause)
        form.addRow("runs", self.scope)
        form.addRow(self.error)
        buttons = QDialogButtonBox(QDialogButtonBox.StandardButton.Ok | QDialogButtonBox.StandardButton.Cancel)
        buttons.accepted.connect(self.accept)
        buttons.rejected.connect(self.reject)
        form.addRow(buttons)
        self.kind.currentTextChanged.connect(self._kind_changed)
        self._kind_changed(self.kind.currentText())

    def _kind_changed(self, kind: str) -> None:
        for field, edit in self.fields.items():
            edit.setEnabled(field in KIND_FIELDS[kind])

    def accept(self) -> None:
        """Checked here (names, numbers); anything else the agent rejects with its own message."""
        texts = {f: e.text() for f, e in self.fields.items()}
        try:
            self.rule = rule_from_form({**texts, "name": self.name.text(), "kind": self.kind.currentText()},
                                       pause=self.pause.isChecked())
        except ValueError as exc:
            self.error.setText(str(exc))
            return
        self.run = self.scope.currentData()
        super().accept()


def ask_rule(parent: QWidget, runs: list[tuple[str, str]]) -> tuple[dict, str | None] | None:
    """The default Add step: the form, modal; None when cancelled."""
    dialog = RuleDialog(parent, runs)
    if dialog.exec() != QDialog.DialogCode.Accepted or dialog.rule is None:
        return None
    return dialog.rule, dialog.run


class AlertsPanel(QWidget):
    run_activated = Signal(object)  # a run key: show that run

    def __init__(self) -> None:
        super().__init__()
        self.ask_rule: Callable[[QWidget, list[tuple[str, str]]], tuple[dict, str | None] | None] = ask_rule
        self.run_choices: RunChoices = lambda url: []
        self.titles: Callable[[RunKey], str] = lambda key: key[1]
        self.rules: list[dict] = []
        self.firing_table = _table(("run", "rule", "metric", "step", "value", "since", "detail"))
        self.recent_table = _table(("time", "run", "state", "rule", "step", "detail"))
        self._firing_keys: list[RunKey] = []
        self._recent_keys: list[RunKey] = []
        self.firing_table.cellDoubleClicked.connect(lambda row, _: self.run_activated.emit(self._firing_keys[row]))
        self.recent_table.cellDoubleClicked.connect(lambda row, _: self.run_activated.emit(self._recent_keys[row]))

        self.agent = QComboBox()
        self.agent.currentTextChanged.connect(self._agent_changed)
        self.rules_table = _table(("name", "kind", "runs", "source", "spec"))
        self.refresh_button = QPushButton("Refresh", clicked=self.refresh_rules)
        self.add_button = QPushButton("Add…", clicked=self.add_rule)
        self.remove_button = QPushButton("Remove", clicked=self.remove_rule)
        self.status = QLabel(wordWrap=True, textFormat=Qt.TextFormat.PlainText)  # agent text is never markup
        # no rules: what a rule is and how to add one, in place of an empty table (selectable: the command copies)
        self.no_rules = QLabel(NO_RULES, wordWrap=True, textFormat=Qt.TextFormat.PlainText,
                               alignment=Qt.AlignmentFlag.AlignTop | Qt.AlignmentFlag.AlignLeft)
        self.no_rules.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        self.rules_view = QStackedWidget()
        self.rules_view.addWidget(self.no_rules)
        self.rules_view.addWidget(self.rules_table)
        bar = QHBoxLayout()
        bar.addWidget(QLabel("agent"))
        bar.addWidget(self.agent, 1)
        for button in (self.refresh_button, self.add_button, self.remove_button):
            bar.addWidget(button)
        rules = QGroupBox("Rules")
        column = QVBoxLayout(rules)
        column.addLayout(bar)
        column.addWidget(self.rules_view)
        column.addWidget(self.status)

        splitter = QSplitter(Qt.Orientation.Vertical)
        for title, widget in (("Firing", self.firing_table), ("Recent", self.recent_table)):
            box = QGroupBox(title)
            QVBoxLayout(box).addWidget(widget)
            splitter.addWidget(box)
        splitter.addWidget(rules)
        QVBoxLayout(self).addWidget(splitter)
        self.calls = Calls(self)
        self.calls.answered.connect(self._on_answer)

    # --- alerts (from the local store: works offline) ---------------------------------------

    def show_alerts(self, book: AlertBook) -> None:
        firing, recent = book.firing(), book.recent()
        self._firing_keys = [a.key for a in firing]
        self._recent_keys = [a.key for a in recent]
        _fill(self.firing_table, [(self.titles(a.key), a.rule, a.metric or "", _opt(a.step), _opt(a.value),
                                   _clock(a.time), a.summary()) for a in firing], color=qcolor("alert_text"))
        _fill(self.recent_table, [(_clock(a.time), self.titles(a.key), a.state, a.rule, _opt(a.step), a.summary())
                                  for a in recent])

    def changeEvent(self, event: QEvent) -> None:
        if is_restyle(event):  # another theme: the firing rows take its alert color
            for r in range(self.firing_table.rowCount()):
                for c in range(self.firing_table.columnCount()):
                    if (item := self.firing_table.item(r, c)) is not None:
                        item.setForeground(qcolor("alert_text"))
        super().changeEvent(event)

    # --- rules (from the agent) -------------------------------------------------------------

    def set_agents(self, urls: list[str]) -> None:
        current = self.agent.currentText()
        self.agent.blockSignals(True)
        self.agent.clear()
        self.agent.addItems(urls)
        self.agent.setCurrentText(current if current in urls else (urls[0] if urls else ""))
        self.agent.blockSignals(False)
        if self.agent.currentText() != current:
            self._agent_changed()

    def _agent_changed(self, *_: object) -> None:
        """Another agent's rules: asked for now if they are on screen, else when the tab is shown."""
        self._show_rules([])
        if self.isVisible():
            self.refresh_rules()

    def _show_rules(self, rules: list[dict]) -> None:
        """The list, or with none the explanation of what a rule is and how to add one."""
        self.rules = rules
        _fill(self.rules_table, [(r.get("name", "?"), r.get("kind", "?"), r.get("run") or "every run",
                                  r.get("source", ""), rule_text(r)) for r in rules])
        self.rules_view.setCurrentWidget(self.rules_table if rules else self.no_rules)

    def refresh_rules(self) -> None:
        url = self.agent.currentText()
        if url:
            self._call("list", url, "listing rules", lambda c: c.alerts())

    def add_rule(self) -> None:
        url = self.agent.currentText()
        if not url:
            self.status.setText("add an agent first (Agents → Add agent…)")
            return
        answer = self.ask_rule(self, self.run_choices(url))
        if answer is not None:
            rule, run = answer
            self.status.setText(f"adding rule {rule['name']}…")
            self._call("add", url, f"add rule {rule['name']}", lambda c: c.add_alert(rule, run=run))

    def remove_rule(self) -> None:
        row = self.rules_table.currentRow()
        url = self.agent.currentText()
        if not url or not 0 <= row < len(self.rules):
            self.status.setText("select a rule to remove")
            return
        rule = self.rules[row]
        self.status.setText(f"removing rule {rule['name']}…")
        self._call("remove", url, f"remove rule {rule['name']}",
                   lambda c: c.remove_alert(rule["name"], run=rule.get("run")))

    def _call(self, op: str, url: str, what: str, fn: Callable[[Client], Any]) -> None:
        self.calls.call(url, fn, (op, url, what))

    def _on_answer(self, tag: tuple[str, str, str], ok: bool, result: Any) -> None:
        op, url, what = tag
        if not ok:
            self.status.setText(printable(f"{what} failed: {result}"))
            return
        if op == "list":
            if url == self.agent.currentText():
                self._show_rules(list(result["rules"]))
            return
        self.status.setText(f"{what}: done")
        if url == self.agent.currentText():
            self.refresh_rules()


def _table(columns: tuple[str, ...]) -> QTableWidget:
    table = QTableWidget(0, len(columns))
    table.setHorizontalHeaderLabels(columns)
    table.setEditTriggers(QAbstractItemView.EditTrigger.NoEditTriggers)
    table.setSelectionBehavior(QAbstractItemView.SelectionBehavior.SelectRows)
    table.setSelectionMode(QAbstractItemView.SelectionMode.SingleSelection)
    table.verticalHeader().hide()
    table.horizontalHeader().setStretchLastSection(True)
    table.setWordWrap(False)
    return table


def _fill(table: QTableWidget, rows: list[tuple[str, ...]], color: QColor | None = None) -> None:
    table.setRowCount(len(rows))
    for r, cells in enumerate(rows):
        for c, text in enumerate(cells):
            item = QTableWidgetItem(text)
            item.setToolTip(text)
            if color is not None:
                item.setForeground(color)
            table.setItem(r, c, item)
    table.resizeColumnsToContents()


def _opt(value: object) -> str:
    if value is None:
        return ""
    return f"{value:.6g}" if isinstance(value, float) else str(value)


def _clock(when: float) -> str:
    return time.strftime("%m-%d %H:%M:%S", time.localtime(when))
