"""The run list as a Qt table: a thin QAbstractTableModel over ``pilothouse.gui.models.RunsModel``."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from PySide6.QtCore import QAbstractTableModel, QModelIndex, QPersistentModelIndex, Qt
from PySide6.QtGui import QColor

from ..alerts import Alert
from ..models import RunKey, RunRow, RunsModel
from .legend import swatch
from .theme import qcolor

COLUMNS = ("status", "alerts", "run", "step", "key metric", "host", "lost")
STATUS_COLORS = {"crashed": "#d64545", "stale": "#d98a1c", "running": "#3a9b5c", "paused": "#3f7fd0",
                 "finished": "#8a8f98"}

Index = QModelIndex | QPersistentModelIndex

# role constants looked up once: each lookup of a PySide6 enum member costs microseconds
DISPLAY, FOREGROUND, TOOLTIP = Qt.ItemDataRole.DisplayRole, Qt.ItemDataRole.ForegroundRole, Qt.ItemDataRole.ToolTipRole
DECORATION = Qt.ItemDataRole.DecorationRole
ROLES = (DISPLAY, FOREGROUND, TOOLTIP, DECORATION)
RUN_COLUMN = COLUMNS.index("run")

class RunsTableModel(QAbstractTableModel):
    def __init__(self, runs: RunsModel, firing: Callable[[RunKey], list[Alert]] = lambda key: []):
        super().__init__()
        self.runs = runs
        self.firing = firing  # a run's firing alerts, for the badge's tooltip
        self._rows: list[RunRow] = []
        self.slots: dict[RunKey, int] = {}  # the compared runs' color slots: a swatch by their name

    def set_slots(self, slots: dict[RunKey, int]) -> None:
        """The compared runs' colors (as the charts draw them); other runs show none."""
        self.slots = dict(slots)
        if self._rows:
            self.dataChanged.emit(self.index(0, RUN_COLUMN), self.index(len(self._rows) - 1, RUN_COLUMN), [DECORATION])

    def refresh(self) -> None:
        """Re-read the view model (after new runs, a filter change)."""
        self.beginResetModel()
        self._rows = self.runs.rows()
        self.endResetModel()

    def row_at(self, index: int) -> RunRow:
        return self._rows[index]

    def rowCount(self, parent: Index = QModelIndex()) -> int:  # noqa: N802 (Qt's name)
        return 0 if parent.isValid() else len(self._rows)

    def columnCount(self, parent: Index = QModelIndex()) -> int:  # noqa: N802
        return 0 if parent.isValid() else len(COLUMNS)

    def headerData(self, section: int, orientation: Qt.Orientation, role: int = DISPLAY) -> Any:  # noqa: N802
        if role == DISPLAY and orientation == Qt.Horizontal:
            return COLUMNS[section]
        return None

    def data(self, index: Index, role: int = DISPLAY) -> Any:
        if role not in ROLES:  # Qt asks for many roles per cell, per redraw: answer the rest at once
            return None
        row = self._rows[index.row()]
        column = COLUMNS[index.column()]
        if role == DISPLAY:
            return _cell(row, column)
        if role == DECORATION:
            slot = self.slots.get(row.key) if column == "run" else None
            return swatch(slot) if slot is not None else None
        if role == FOREGROUND and column == "status":
            return QColor(STATUS_COLORS.get(row.status, "#8a8f98"))
        if role == FOREGROUND and column == "alerts":
            return qcolor("alert_text")  # the theme's alert red, as on the charts
        if role == TOOLTIP:
            if column == "alerts" and row.alerts:
                return "\n".join(f"⚠ {a.rule}: {a.summary()}" for a in self.firing(row.key))
            return f"{row.title} ({row.run_id}) on {row.host or '?'} via {row.agent}"
        return None


def _cell(row: RunRow, column: str) -> str:
    if column == "status":
        return row.status  # its icon is drawn by status_icons.StatusDelegate: no font has to hold it
    if column == "alerts":
        return f"⚠ {row.alerts}" if row.alerts else ""
    if column == "run":
        return row.title
    if column == "step":
        return "" if row.step is None else str(row.step)
    if column == "key metric":
        return "" if row.key_value is None else f"{row.key_metric} {row.key_value:.4g}"
    if column == "host":
        return row.host
    return str(row.lost_records) if row.lost_records else ""
