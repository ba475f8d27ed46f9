"""The Rollouts tab: a run's sampled prompts, completions and rewards, step by step.

One selected run shows its rows; two show side by side, the same prompt's completions in one
line.  The panel asks the local store for the shown runs' steps (counts and mean rewards, no
text), the rows of the step shown, and a search's matches a page at a time (SEARCH_PAGE, newest
first, "more" for the next): it never loads a whole run's text.  Live entries of the shown runs
above the cursor taken when they were opened make it list the steps again.  What is shown of the
rows loaded (reward range, order, pairing) is decided by ``pilothouse.gui.rollouts``.
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
    QPushButton,
    QSlider,
    QSpinBox,
    QSplitter,
    QTableView,
    QVBoxLayout,
    QWidget,
)

from pilothouse.wire.entries import KIND_ROLLOUTS, Entry

from ..local_store import LocalStore
from ..models import RunKey, run_labels
from ..rollouts import Pair, Query, Row, hit_pairs, merge_steps, pair, reward, text
from .legend import swatch

CELL_CHARS = 160  # the table shows a line's start; the detail pane shows everything
SEARCH_PAGE = 200  # matches a search loads per run at a time
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
        self.store: LocalStore | None = None
        self.step_rows: dict[RunKey, list[tuple[int, int, float | None]]] = {}  # (step, rows, mean reward)
        self.seen: dict[str, int] = {}  # agent url -> journal id up to which history was loaded
        self._steps: list[int] = []
        self._hits: dict[RunKey, list[tuple[int, Row]]] = {}  # a search's pages loaded so far, newest first
        self._next: dict[RunKey, int | None] = {}  # where each run's next search page begins

        self.slider = QSlider(Qt.Horizontal, minimum=0, maximum=0)
        self.slider.valueChanged.connect(self._on_slider)
        self.step_box = QSpinBox(minimum=0, maximum=0, keyboardTracking=False, toolTip="step")
        self.step_box.valueChanged.connect(self._on_step_box)
        self.step_info = QLabel()  # the shown step's rows and mean reward per run, from the store's step list
        self.search = QLineEdit(placeholderText="search prompts and completions (all steps)…", clearButtonEnabled=True)
        self.reward_min = QLineEdit(placeholderText="min reward", validator=QDoubleValidator(), maximumWidth=90)
        self.reward_max = QLineEdit(placeholderText="max reward", validator=QDoubleValidator(), maximumWidth=90)
        self.more = QPushButton("more matches", visible=False, toolTip=f"the next {SEARCH_PAGE} older matches")
        self.more.clicked.connect(self._more)
        self.order = QComboBox()
        for key, label in ORDER_LABELS.items():
            self.order.addItem(label, key)
        self.search.textChanged.connect(self.refresh)
        for edit in (self.reward_min, self.reward_max):  # they filter the rows loaded: no new query
            edit.textChanged.connect(self._show_lines)
        self.order.currentIndexChanged.connect(self._show_lines)

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
        steps.addWidget(self.step_info)
        filters = QHBoxLayout()
        filters.addWidget(self.search, 1)
        filters.addWidget(self.reward_min)
        filters.addWidget(self.reward_max)
        filters.addWidget(self.order)
        filters.addWidget(self.more)
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
        self.store = store
        with store.snapshot():
            names = {(r["agent"], r["id"]): r.get("name") or "" for r in store.runs()}
            self.labels = run_labels({key: names.get(key, "") for key in self.keys})
            for agent in {a for a, _ in self.keys}:
                self.seen[agent] = store.cursor(agent)
            self.step_rows = {key: store.rollout_steps(*key) for key in self.keys}
        self._update_steps(follow=True)
        self.refresh()

    def add_entries(self, agent: str, entries: list[Entry]) -> None:
        """Live rollout batches of the shown runs; a panel showing the latest step follows new ones."""
        floor = self.seen.get(agent)
        grown = {(agent, e.run) for e in entries if e.kind == KIND_ROLLOUTS and (agent, e.run) in self.step_rows
                 and (floor is None or e.id > floor)}
        if not grown or self.store is None:
            return
        before = {key: dict((s, n) for s, n, _ in self.step_rows[key]) for key in grown}
        for key in grown:
            self.step_rows[key] = self.store.rollout_steps(*key)
        added = {s for key in grown for s, n, _ in self.step_rows[key] if before[key].get(s) != n}
        shown = self.current_step()
        self._update_steps(follow=shown == (self._steps[-1] if self._steps else None))
        if self.current_step() == shown and shown not in added and not self.words():
            return  # the table is unchanged: keep the user's selection and detail pane
        self.refresh()

    # --- steps ----------------------------------------------------------------------------

    def steps(self) -> list[int]:
        """Steps any shown run has rollouts for."""
        return merge_steps(*self.step_rows.values())

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
        return Query(reward_min=_bound(self.reward_min.text()), reward_max=_bound(self.reward_max.text()),
                     order=self.order.currentData())

    def words(self) -> str:
        return self.search.text().strip()

    def refresh(self, *_: object) -> None:
        """Rebuild the table: the current step's rows, or with search words the first page of matches
        over every step (the store searches; ``more`` loads the next)."""
        words = self.words()
        self.slider.setEnabled(not words)
        self.step_box.setEnabled(not words)
        self._hits, self._next = {}, {}
        if words and self.store is not None:
            try:
                for key in self.keys:
                    self._load_page(key, None)
            except ValueError as exc:  # words the index cannot look for: said, nothing shown
                self._hits, self._next = {}, {}
                self.search.setToolTip(str(exc))
                self.search.setStyleSheet("color: #c0392b")
            else:
                self.search.setToolTip("")
                self.search.setStyleSheet("")
        self._show_lines()

    def _load_page(self, key: RunKey, before: int | None) -> None:
        assert self.store is not None
        hits, self._next[key] = self.store.search_rollouts(*key, self.words(), before, SEARCH_PAGE)
        self._hits.setdefault(key, []).extend((step, row) for step, _, _, row in hits)

    def _more(self) -> None:
        for key in self.keys:
            if self._next.get(key) is not None:
                self._load_page(key, self._next[key])
        self._show_lines()

    def _rows(self, key: RunKey, step: int) -> list[Row]:
        return self.store.rollout_rows(*key, step) if self.store is not None else []

    def _step_text(self, step: int | None) -> str:
        """Per shown run: the step's rows and mean reward (``—`` where the run has none there)."""
        parts = []
        if step is None:
            return ""
        for key in self.keys:
            listing = self.step_rows.get(key, [])
            i = bisect.bisect_left(listing, (step,))  # the listing is in step order
            what = "—"
            if i < len(listing) and listing[i][0] == step:
                _, n, mean = listing[i]
                what = f"{n} rows" + (f", mean reward {mean:.4g}" if mean is not None else "")
            parts.append(f"{self.labels.get(key, '')}: {what}" if len(self.keys) == 2 else what)
        return " · ".join(parts)

    def _show_lines(self, *_: object) -> None:
        query = self.query()
        step = self.current_step()
        lines: list[Line] = []
        if self.words():
            if len(self.keys) == 2:
                a, b = self.keys
                steps = sorted({s for s, _ in (*self._hits.get(a, []), *self._hits.get(b, []))}, reverse=True)
                found = hit_pairs(steps, lambda s: self._rows(a, s), lambda s: self._rows(b, s),
                                  self._hits.get(a, []), self._hits.get(b, []))
                lines = query.lines(found)
            elif self.keys:
                lines = query.lines((s, (row, None)) for s, row in self._hits.get(self.keys[0], []))
        elif step is not None and len(self.keys) == 2:
            lines = [(step, p) for p in query.pairs(pair(*(self._rows(k, step) for k in self.keys)))]
        elif step is not None and self.keys:
            lines = [(step, (row, None)) for row in query.rows(self._rows(self.keys[0], step))]
        self.more.setVisible(any(v is not None for v in self._next.values()))
        self.step_info.setText(f"{len(lines)} matches loaded" if self.words() else self._step_text(step))
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

