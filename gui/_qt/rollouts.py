"""The Rollouts tab: a run's sampled prompts, completions and rewards, step by step.

One selected run shows its rows; two show side by side, the same prompt's completions in one
line.  History comes from the local store and live entries append against the cursor taken in
the same read snapshot (as the Charts tab does), so a batch is never shown twice nor skipped.
What is shown (search, reward range, order, pairing) is decided by ``pilothouse.gui.rollouts``.
"""

from __future__ import annotations

import bisect
from typing import Any

from PySide6.QtCore import QAbstractTableModel, QModelIndex, QPersistentModelIndex, Qt
from PySide6.QtGui import QDoubleValidator
from PySide6.QtWidgets import (
    QAbstractItemView,
    QComboBox,
    QHBoxLayout,
    QHeaderView,
    QLabel,
    QLineEdit,
    QPlainTextEdit,
    QSlider,
    QSpinBox,
    QSplitter,
    QTableView,
    QVBoxLayout,
    QWidget,
)

from pilothouse.wire.entries import KIND_ROLLOUTS, Entry, entry_body

from ..local_store import LocalStore
from ..models import RunKey, run_labels
from ..rollouts import Pair, Query, RolloutIndex, Row, pair, reward, text
from .legend import swatch

CELL_CHARS = 160  # the table shows a line's start; the detail pane shows everything
ORDER_LABELS = {"logged": "as logged", "asc": "reward ↑", "desc": "reward ↓"}
Line = tuple[int, Pair]  # (step, (row of run A, row of run B or None))


def _cell(value: str) -> str:
    """One line of at most CELL_CHARS: newlines in a cell would make rows as tall as the text."""
    flat = " ⏎ ".join(value.splitlines())
    return flat if len(flat) <= CELL_CHARS else flat[:CELL_CHARS - 1] + "…"


def _reward_text(row: Row | None) -> str:
    if row is None or "reward" not in row:
        return ""
    r = reward(row)
    return f"{r:.4g}" if r is not None else str(row["reward"])


class RolloutsModel(QAbstractTableModel):
    """Lines of (step, pair); one run shows step, prompt, completion, reward; two add B's columns."""

    def __init__(self) -> None:
        super().__init__()
        self.lines: list[Line] = []
        self.names: list[str] = []  # the shown runs' names (see ``models.run_labels``)
        self.slots: list[int | None] = []  # their color slots, as the charts draw them

    def set_lines(self, lines: list[Line], names: list[str], slots: list[int | None] | None = None) -> None:
        self.beginResetModel()
        self.lines, self.names = lines, names
        self.slots = list(slots) if slots is not None else [None] * len(names)
        self.endResetModel()

    def headers(self) -> list[str]:
        if len(self.names) < 2:
            return ["step", "prompt", "completion", "reward"]
        a, b = self.names
        return ["step", "prompt", f"completion · {a}", f"reward · {a}", f"completion · {b}", f"reward · {b}"]

    def rowCount(self, parent: QModelIndex | QPersistentModelIndex = QModelIndex()) -> int:  # noqa: B008
        return 0 if parent.isValid() else len(self.lines)

    def columnCount(self, parent: QModelIndex | QPersistentModelIndex = QModelIndex()) -> int:  # noqa: B008
        return 0 if parent.isValid() else len(self.headers())

    def headerData(self, section: int, orientation: Qt.Orientation, role: int = Qt.DisplayRole) -> Any:
        if orientation != Qt.Horizontal:
            return None
        if role == Qt.DisplayRole:
            return self.headers()[section]
        if role == Qt.DecorationRole and len(self.names) == 2 and section >= 2:
            slot = self.slots[(section - 2) // 2]  # completion and reward of A, then of B
            return swatch(slot) if slot is not None else None
        return None

    def data(self, index: QModelIndex | QPersistentModelIndex, role: int = Qt.DisplayRole) -> Any:
        if role != Qt.DisplayRole or not index.isValid():
            return None
        return self.cells(index.row())[index.column()]

    def cells(self, i: int) -> list[str]:
        step, (a, b) = self.lines[i]
        prompt = _cell(text(a if a is not None else b, "prompt"))
        sides = [a] if len(self.names) < 2 else [a, b]
        return [str(step), prompt, *(v for row in sides
                                     for v in (_cell(text(row, "completion")) if row else "", _reward_text(row)))]


class RolloutsPanel(QWidget):
    def __init__(self) -> None:
        super().__init__()
        self.keys: list[RunKey] = []  # the runs shown: one, or two side by side
        self.labels: dict[RunKey, str] = {}  # their names, for the column headers
        self.slots: dict[RunKey, int] = {}  # their colors (the charts' slots)
        self.indexes: dict[RunKey, RolloutIndex] = {}
        self.seen: dict[str, int] = {}  # agent url -> journal id up to which history was loaded
        self._steps: list[int] = []

        self.slider = QSlider(Qt.Horizontal, minimum=0, maximum=0)
        self.slider.valueChanged.connect(self._on_slider)
        self.step_box = QSpinBox(minimum=0, maximum=0, keyboardTracking=False, toolTip="step")
        self.step_box.valueChanged.connect(self._on_step_box)
        self.search = QLineEdit(placeholderText="search prompts and completions (all steps)…", clearButtonEnabled=True)
        self.reward_min = QLineEdit(placeholderText="min reward", validator=QDoubleValidator(), maximumWidth=90)
        self.reward_max = QLineEdit(placeholderText="max reward", validator=QDoubleValidator(), maximumWidth=90)
        self.order = QComboBox()
        for key, label in ORDER_LABELS.items():
            self.order.addItem(label, key)
        for edit in (self.search, self.reward_min, self.reward_max):
            edit.textChanged.connect(self.refresh)
        self.order.currentIndexChanged.connect(self.refresh)

        self.model = RolloutsModel()
        self.table = QTableView(wordWrap=False, textElideMode=Qt.ElideRight)
        self.table.setModel(self.model)
        self.table.setSelectionBehavior(QAbstractItemView.SelectRows)
        self.table.setSelectionMode(QAbstractItemView.SingleSelection)
        self.table.verticalHeader().hide()
        self.table.selectionModel().currentRowChanged.connect(self._show_detail)
        self.detail = QPlainTextEdit(readOnly=True, placeholderText="select a row to read it in full")
        self.hint = QLabel("Select a run that logs rollouts (run.log_rollouts); select two to compare them.",
                           alignment=Qt.AlignCenter)

        steps = QHBoxLayout()
        steps.addWidget(QLabel("step"))
        steps.addWidget(self.slider)
        steps.addWidget(self.step_box)
        filters = QHBoxLayout()
        filters.addWidget(self.search, 1)
        filters.addWidget(self.reward_min)
        filters.addWidget(self.reward_max)
        filters.addWidget(self.order)
        split = QSplitter(Qt.Vertical)
        split.addWidget(self.table)
        split.addWidget(self.detail)
        split.setStretchFactor(0, 3)
        layout = QVBoxLayout(self)
        layout.addLayout(steps)
        layout.addLayout(filters)
        layout.addWidget(self.hint)
        layout.addWidget(split)

    # --- data in --------------------------------------------------------------------------

    def show_runs(self, keys: list[RunKey], store: LocalStore, slots: dict[RunKey, int] | None = None) -> None:
        """The first selected run, or the first two side by side, named by run and colored by
        ``slots``; history from the store."""
        self.keys = list(keys[:2])
        self.slots = dict(slots or {})
        self.seen = {}
        with store.snapshot():
            names = {(r["agent"], r["id"]): r.get("name") or "" for r in store.runs()}
            self.labels = run_labels({key: names.get(key, "") for key in self.keys})
            for agent in {a for a, _ in self.keys}:
                self.seen[agent] = store.cursor(agent)
            self.indexes = {key: RolloutIndex(store.rollouts(*key)) for key in self.keys}
        self._update_steps(follow=True)
        self.refresh()

    def add_entries(self, agent: str, entries: list[Entry]) -> None:
        """Live rollout batches of the shown runs; a panel showing the latest step follows new ones."""
        floor = self.seen.get(agent)
        added: set[int] = set()
        for e in entries:
            key = (agent, e.run)
            if e.kind == KIND_ROLLOUTS and key in self.indexes and (floor is None or e.id > floor):
                body = entry_body(e)
                self.indexes[key].add(body)
                added.add(body["step"])
        if added:
            shown = self.current_step()
            self._update_steps(follow=shown == (self._steps[-1] if self._steps else None))
            if self.current_step() == shown and shown not in added and not self.query().words.strip():
                return  # the table is unchanged: keep the user's selection and detail pane
            self.refresh()

    # --- steps ----------------------------------------------------------------------------

    def steps(self) -> list[int]:
        """Steps any shown run has rollouts for."""
        return sorted({s for index in self.indexes.values() for s in index.steps()})

    def current_step(self) -> int | None:
        return self._steps[self.slider.value()] if self._steps else None

    def set_step(self, step: int) -> None:
        """Show ``step``, or the nearest logged step at or below it (rollouts are often sparse)."""
        if self._steps:
            self.slider.setValue(self._position(step))

    def _position(self, step: int) -> int:
        """The slider position of the last logged step <= ``step`` (the first if none is)."""
        return max(bisect.bisect_right(self._steps, step) - 1, 0)

    def _update_steps(self, follow: bool) -> None:
        """Steps of the shown runs into the slider and spin box; no table rebuild (callers decide)."""
        current = self.current_step()
        self._steps = self.steps()
        self.hint.setVisible(not self._steps)
        for w in (self.slider, self.step_box):
            w.blockSignals(True)
        self.slider.setMaximum(max(len(self._steps) - 1, 0))
        self.step_box.setRange(self._steps[0] if self._steps else 0, self._steps[-1] if self._steps else 0)
        if self._steps:
            self.slider.setValue(len(self._steps) - 1 if follow or current is None else self._position(current))
            self.step_box.setValue(self._steps[self.slider.value()])
        for w in (self.slider, self.step_box):
            w.blockSignals(False)

    def _on_slider(self, i: int) -> None:
        self.step_box.blockSignals(True)
        self.step_box.setValue(self._steps[i] if self._steps else 0)
        self.step_box.blockSignals(False)
        self.refresh()

    def _on_step_box(self, step: int) -> None:
        self.set_step(step)
        self._on_slider(self.slider.value())

    # --- what is shown --------------------------------------------------------------------

    def query(self) -> Query:
        return Query(words=self.search.text(), reward_min=_bound(self.reward_min.text()),
                     reward_max=_bound(self.reward_max.text()), order=self.order.currentData())

    def refresh(self, *_: object) -> None:
        """Rebuild the table: the current step's rows, or with search words every step's matches."""
        query = self.query()
        step = self.current_step()
        searching = bool(query.words.strip())
        steps = self._steps if searching else [step] if step is not None else []
        self.slider.setEnabled(not searching)
        self.step_box.setEnabled(not searching)
        lines: list[Line] = []
        for s in steps:
            if len(self.keys) == 2:
                a, b = (self.indexes[k].rows(s) for k in self.keys)
                lines.extend((s, p) for p in query.pairs(pair(a, b)))
            elif self.keys:
                lines.extend((s, (row, None)) for row in query.rows(self.indexes[self.keys[0]].rows(s)))
        self.model.set_lines(lines, [self.labels[k] for k in self.keys], [self.slots.get(k) for k in self.keys])
        header = self.table.horizontalHeader()
        for column, name in enumerate(self.model.headers()):  # text gets the width, numbers what they need
            text_column = name.startswith(("prompt", "completion"))
            header.setSectionResizeMode(column, QHeaderView.Stretch if text_column else QHeaderView.ResizeToContents)
        self.detail.setPlainText("")

    def _show_detail(self, current: QModelIndex, *_: object) -> None:
        if not current.isValid():
            return
        step, (a, b) = self.model.lines[current.row()]
        sides = [(name, row) for name, row in zip(self.model.names, (a, b)) if row is not None]
        prompt = text(a if a is not None else b, "prompt")
        parts = [f"step {step}\n\nPROMPT\n{prompt}"]
        for name, row in sides:
            extra = "  ".join(f"{k}={v}" for k, v in row.items() if k not in ("prompt", "completion"))
            parts.append(f"COMPLETION · {name}   {extra}\n{text(row, 'completion')}")
        self.detail.setPlainText("\n\n".join(parts))


def _bound(value: str) -> float | None:
    """An empty box is no bound; QDoubleValidator lets partial input ("-", "1e") through."""
    try:
        return float(value.replace(",", "."))
    except ValueError:
        return None
