"""The Rollouts tab: a run's sampled prompts, completions and rewards, step by step.

One selected run shows its rows; two show side by side, the same prompt's completions in one
line.  The panel asks the local store for the shown runs' steps (counts and mean rewards, no
text), the rows of the step shown, and a search's matches a page at a time (SEARCH_PAGE, newest
first, "more" for the next): it never loads a whole run's text.  Live entries of the shown runs
above the cursor taken when they were opened make it list the steps again.  What is shown of the
rows loaded (reward range, order, pairing) is decided by ``pilothouse.gui.rollouts``.

Agentic rows (chat prompts and trajectories with tool calls) are summed up in one line per cell;
below the table, the selected line reads as a transcript (``.transcript``), beside it its step's
GRPO groups (``.rollout_groups``) and its prompt at every step it was sampled (``.prompt_history``,
one bounded search of the local store per selection); the step's rewards are a histogram beside
the table (``.reward_histogram``).

Live steps never move what is being read: the selected line is found again by its step and rows
(not its table index) whenever the table is rebuilt, and "follow latest" (on until the user picks a
line or moves to an older step) decides whether a new step is shown or only grows the slider.
"""

from __future__ import annotations

import bisect

from PySide6.QtCore import QModelIndex, Qt
from PySide6.QtGui import QDoubleValidator
from PySide6.QtWidgets import (
    QAbstractItemView,
    QCheckBox,
    QComboBox,
    QHBoxLayout,
    QHeaderView,
    QLabel,
    QLineEdit,
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
from ..rollouts import Pair, Place, Query, Row, hit_pairs, merge_steps, pair, place, same_line
from ..transcript import sections
from .prompt_history import HistoryView
from .reward_histogram import RewardHistogram
from .rollout_groups import GroupsView
from .rollouts_model import Line, RolloutsModel
from .transcript import TranscriptView

SEARCH_PAGE = 200  # matches a search loads per run at a time
ORDER_LABELS = {"logged": "as logged", "asc": "reward ↑", "desc": "reward ↓"}


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
        self._loaded: dict[tuple[RunKey, int], list[Row]] = {}  # steps' rows read since the last refresh
        self._context: int | None = None  # the step the group view and histogram show
        self._restoring = False  # a selection put back after a rebuild: not the user's pick

        self.slider = QSlider(Qt.Horizontal, minimum=0, maximum=0)
        self.slider.valueChanged.connect(self._on_slider)
        self.step_box = QSpinBox(minimum=0, maximum=0, keyboardTracking=False, toolTip="step")
        self.step_box.valueChanged.connect(self._on_step_box)
        self.follow = QCheckBox("follow latest", checked=True,
                                toolTip="show each new step as it arrives; off once you pick a line or an older step")
        self.follow.toggled.connect(self._on_follow)
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
        self.detail = TranscriptView()  # the selected line, or the group row or history line picked
        self.histogram = RewardHistogram()
        self.groups = GroupsView()
        self.groups.picked.connect(self._show_member)
        self.history = HistoryView()
        self.history.picked.connect(self._pick_line)
        self.hint = QLabel("Select a run that logs rollouts (run.log_rollouts); select two to compare them.",
                           alignment=Qt.AlignCenter)

        steps = QHBoxLayout()
        steps.addWidget(QLabel("step"))
        steps.addWidget(self.slider)
        steps.addWidget(self.step_box)
        steps.addWidget(self.follow)
        steps.addWidget(self.step_info)
        filters = QHBoxLayout()
        filters.addWidget(self.search, 1)
        filters.addWidget(self.reward_min)
        filters.addWidget(self.reward_max)
        filters.addWidget(self.order)
        filters.addWidget(self.more)
        top = QSplitter(Qt.Horizontal)  # the step: its rows, and their rewards at a glance
        top.addWidget(self.table)
        top.addWidget(self.histogram)
        top.setStretchFactor(0, 4)
        top.setStretchFactor(1, 1)
        side = QSplitter(Qt.Vertical)  # the selection's context: its group, its prompt over the steps
        side.addWidget(self.groups)
        side.addWidget(self.history)
        bottom = QSplitter(Qt.Horizontal)
        bottom.addWidget(self.detail)
        bottom.addWidget(side)
        bottom.setStretchFactor(0, 3)
        bottom.setStretchFactor(1, 2)
        split = QSplitter(Qt.Vertical)
        split.addWidget(top)
        split.addWidget(bottom)
        split.setStretchFactor(0, 2)
        split.setStretchFactor(1, 3)
        for splitter, shares in ((top, [4, 1]), (bottom, [3, 2]), (split, [2, 3])):
            splitter.setSizes([1000 * n for n in shares])  # scaled to the space there is
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
        """Live rollout batches of the shown runs: with "follow latest" on the newest step is shown,
        else only the slider grows; the selected line stays selected either way."""
        floor = self.seen.get(agent)
        grown = {(agent, e.run) for e in entries if e.kind == KIND_ROLLOUTS and (agent, e.run) in self.step_rows
                 and (floor is None or e.id > floor)}
        if not grown or self.store is None:
            return
        before = {key: dict((s, n) for s, n, _ in self.step_rows[key]) for key in grown}
        for key in grown:
            self.step_rows[key] = self.store.rollout_steps(*key)
        self._loaded = {k: rows for k, rows in self._loaded.items() if k[0] not in grown}
        added = {s for key in grown for s, n, _ in self.step_rows[key] if before[key].get(s) != n}
        shown = self.current_step()
        self._update_steps(follow=self.follow.isChecked())
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
        if i != len(self._steps) - 1:  # a reader went back to an older step: stop following
            self.follow.setChecked(False)
        self.step_box.blockSignals(True)
        self.step_box.setValue(self._steps[i] if self._steps else 0)
        self.step_box.blockSignals(False)
        self.refresh()

    def _on_follow(self, on: bool) -> None:
        if on and self._steps:
            self.slider.setValue(len(self._steps) - 1)

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
        self._hits, self._next, self._loaded = {}, {}, {}
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
        """The step's rows, read once for the table, the groups and the histogram alike."""
        if self.store is None:
            return []
        if (key, step) not in self._loaded:
            self._loaded[key, step] = self.store.rollout_rows(*key, step)
        return self._loaded[key, step]

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
        """Rebuild the table from what is loaded, the selected line selected again if still there."""
        selected = self.selected_line()
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
        self.detail.show_sections([])
        self.history.clear()
        self._show_context(None if self.words() else step, again=True)
        at = same_line(self.model.lines, selected) if selected is not None else None
        if at is not None:
            self._restoring = True
            try:
                self.table.selectRow(at)
            finally:
                self._restoring = False

    def selected_line(self) -> Place | None:
        """Where the selected line is, to select it again after a rebuild (see ``rollouts.place``)."""
        rows = self.table.selectionModel().selectedRows()
        return place(self.model.lines, rows[0].row()) if rows else None

    def _show_context(self, step: int | None, again: bool = False) -> None:
        """The group view and histogram of ``step`` (the step shown; when searching, the selected
        line's): its rows are those the table read.  Unchanged unless the step or the rows did."""
        if step == self._context and not again:
            return
        self._context = step
        runs = [(k, self._rows(k, step) if step is not None else []) for k in self.keys]
        self.groups.show_step(step, [(self.labels[k], rows) for k, rows in runs])
        self.histogram.show_step(step, [(self.slots.get(k), rows) for k, rows in runs])

    def _show_detail(self, current: QModelIndex, *_: object) -> None:
        """The selected line in full, its group marked, and its prompt's history (one bounded search
        of the local store per selection)."""
        if not current.isValid():
            return
        if not self._restoring:  # the user picked a line to read: new steps must not move it
            self.follow.setChecked(False)
        step, (a, b) = self.model.lines[current.row()]
        self._show_line((step, (a, b)))
        self._show_context(step)
        self.groups.mark([a, b])
        if self.store is not None:
            first = a if a is not None else b
            self.history.load(self.store, self.keys, self.model.names, self.model.slots, first.get("prompt"))

    def _pick_line(self, line: Line) -> None:
        self.follow.setChecked(False)
        self._show_line(line)

    def _show_line(self, line: Line) -> None:
        step, pair_ = line
        self.detail.show_sections(sections(step, list(zip(self.model.names, pair_))))

    def _show_member(self, run: int, row: Row) -> None:
        """A group's row clicked: that run's row of the step the groups show."""
        if self._context is not None:
            self.follow.setChecked(False)
            sides: Pair = (row, None) if run == 0 else (None, row)
            self._show_line((self._context, sides))


def _bound(value: str) -> float | None:
    """An empty box is no bound; QDoubleValidator lets partial input ("-", "1e") through."""
    try:
        return float(value.replace(",", "."))
    except ValueError:
        return None

