"""The runs pane beside the charts: when its rows may re-sort, and how wide its columns and the pane are.

Why a hold (``OrderHold``): pausing a run changes its status, and the severity order moves it, so
the row under the pointer becomes another run right where the user is about to click again.  As
nvitop and Finder do, the table keeps its order while the pointer is over it and for a few seconds
after a command or a click in it, then re-sorts (the selection stays on its runs either way).

Why fitted widths (``fit_columns``, ``fit_pane``): at the default window size the key metric and the
config keys that differ between runs must show without a horizontal scroll.  Columns that say nothing
for the listed runs are hidden (``models.idle_columns``), a long name or value is elided in the
middle (a run's distinguishing tail and a metric's value stay readable) under a width cap, and the
pane grows to its columns, up to half the window, until the user drags the splitter.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from PySide6.QtCore import QEvent, QObject, Qt, QTimer
from PySide6.QtWidgets import QSplitter, QTableView

from ..models import idle_columns
from .runs_table import COLUMNS, RUN_COLUMN, RunsTableModel

HOLD_S = 3.0  # the order is held this long after a command or a click (a run list comes about once a second)
RECHECK_MS = 400  # while the order is held, whether the hold ended is checked this often
RUN_MAX = 260  # pixels: the widest the run column grows (its name elided in the middle beyond)
COLUMN_MAX = 150  # pixels: the widest any other column grows
PANE_SHARE = 0.5  # the runs pane grows to its columns up to this share of the window


class OrderHold(QObject):
    """Says whether the runs table holds its order now; ``changed()`` is called when a held order
    may be let go (the pointer left, or the hold's time is up), so the window re-sorts."""

    def __init__(self, table: QTableView, changed: Callable[[], None], seconds: float = HOLD_S):
        super().__init__(table)
        self.table, self.changed, self.seconds = table, changed, seconds
        self.until = 0.0
        self.recheck = QTimer(self, singleShot=True, interval=RECHECK_MS, timeout=self._recheck)
        table.installEventFilter(self)
        table.viewport().installEventFilter(self)

    def touch(self) -> None:
        """A command was sent or the user clicked in the table: hold the order for a while."""
        self.until = time.monotonic() + self.seconds

    def holding(self) -> bool:
        return self.table.underMouse() or time.monotonic() < self.until

    def note(self, held: bool) -> None:
        """The table kept an order that its sort would change: look again soon."""
        if held:
            self.recheck.start()

    def _recheck(self) -> None:
        if self.holding():
            self.recheck.start()  # nothing redrawn while the hold lasts
        else:
            self.changed()

    def eventFilter(self, watched: QObject, event: QEvent) -> bool:  # noqa: N802 (Qt's name)
        kind = event.type()
        if kind in (QEvent.Type.MouseButtonPress, QEvent.Type.KeyPress):
            self.touch()
        elif kind == QEvent.Type.Leave and watched is self.table:
            self.recheck.start(0)  # the pointer left: re-sort now (unless a command's hold still runs)
        return False


def hide_idle(table: QTableView, model: RunsTableModel) -> bool:
    """Hide the fixed columns that say nothing for the listed runs, show the others; True when that
    changed (the columns are to be sized again)."""
    header = table.horizontalHeader()
    idle = idle_columns([model.row_at(i) for i in range(model.rowCount())])
    changed = False
    for section, name in enumerate(COLUMNS):
        if header.isSectionHidden(section) != (name in idle):
            header.setSectionHidden(section, name in idle)
            changed = True
    return changed


def fit_columns(table: QTableView, model: RunsTableModel) -> None:
    """Size the shown columns to their contents, each under its cap."""
    header = table.horizontalHeader()
    for section in range(model.columnCount()):
        if not header.isSectionHidden(section):
            header.resizeSection(section, wanted_width(table, section))


def wanted_width(table: QTableView, section: int) -> int:
    """What the column's contents and header ask for, at most its cap."""
    header = table.horizontalHeader()
    cap = RUN_MAX if section == RUN_COLUMN else COLUMN_MAX
    return min(cap, max(table.sizeHintForColumn(section), header.sectionSizeHint(section)))


def columns_width(table: QTableView) -> int:
    """The pane width that shows every shown column without a horizontal scroll (room kept for a
    vertical scroll bar, so a longer list does not bring a horizontal one)."""
    header = table.horizontalHeader()
    need = sum(wanted_width(table, s) for s in range(header.count()) if not header.isSectionHidden(s))
    return need + 2 * table.frameWidth() + table.verticalScrollBar().sizeHint().width()


class PaneFit(QObject):
    """Grows the runs pane (the splitter's first widget) to its table's columns, up to ``PANE_SHARE`` of
    the splitter, never shrinking it, until the user drags the splitter: from then on it is theirs."""

    def __init__(self, splitter: QSplitter, table: QTableView):
        super().__init__(splitter)
        self.splitter, self.table = splitter, table
        self.user = False
        splitter.splitterMoved.connect(self._moved)
        splitter.installEventFilter(self)  # the window is laid out (or resized) after the first fit

    def _moved(self, *_: object) -> None:
        self.user = True

    def eventFilter(self, watched: QObject, event: QEvent) -> bool:  # noqa: N802 (Qt's name)
        if event.type() == QEvent.Type.Resize and not self.user:
            QTimer.singleShot(0, self, self.fit)  # once the splitter has laid itself out at its new size
        return False

    def fit(self) -> None:
        if self.user:
            return
        sizes = self.splitter.sizes()
        total = sum(sizes)
        if total <= 0 or len(sizes) != 2:
            return
        left = min(columns_width(self.table), int(total * PANE_SHARE))
        if left > sizes[0]:
            self.splitter.setSizes([left, total - left])


def elide_middle(table: QTableView) -> None:
    """Long names and values elided in the middle: a run's distinguishing tail stays readable."""
    table.setTextElideMode(Qt.TextElideMode.ElideMiddle)
    table.horizontalHeader().setTextElideMode(Qt.TextElideMode.ElideMiddle)
