"""The run list as a Qt table: a thin QAbstractTableModel over ``pilothouse.gui.models.RunsModel``,
and its header (click to sort, right-click to choose the config and summary columns).

The model can hold its row order (``refresh(hold=True)``): a run paused under the pointer must not
jump away, taking another run's row to where the user is about to click (``runs_pane.OrderHold``
decides when); the rows re-sort once the hold ends, the selection on the same runs."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from PySide6.QtCore import QAbstractTableModel, QModelIndex, QObject, QPersistentModelIndex, QPoint, QSettings, Qt
from PySide6.QtGui import QFont
from PySide6.QtWidgets import QMenu, QTableView

from pilothouse.wire.watched import STEER_HOW

from ..alerts import Alert
from ..models import RunKey, RunRow, RunsModel, held_order
from ..run_columns import CONFIG, FIXED, FIXED_NAMES, SUMMARY, Column, cell_text
from .legend import swatch
from .theme import qcolor, status_color

COLUMNS = FIXED_NAMES  # the fixed columns; the extra ones (config keys, last values) come after them
SETTING = "runs/columns"  # QSettings key of the extra columns chosen (absent: the default ones)

Index = QModelIndex | QPersistentModelIndex

# role constants looked up once: each lookup of a PySide6 enum member costs microseconds
DISPLAY, FOREGROUND, TOOLTIP = Qt.ItemDataRole.DisplayRole, Qt.ItemDataRole.ForegroundRole, Qt.ItemDataRole.ToolTipRole
DECORATION, FONT = Qt.ItemDataRole.DecorationRole, Qt.ItemDataRole.FontRole
ROLES = (DISPLAY, FOREGROUND, TOOLTIP, DECORATION)
RUN_COLUMN = COLUMNS.index("run")
SORT_HINT = "click: sort (again: descending, a third time: by severity) · right-click: choose columns"

class RunsTableModel(QAbstractTableModel):
    def __init__(self, runs: RunsModel, firing: Callable[[RunKey], list[Alert]] = lambda key: []):
        super().__init__()
        self.runs = runs
        self.firing = firing  # a run's firing alerts, for the badge's tooltip
        self._rows: list[RunRow] = []
        self._extra: list[Column] = []  # the columns after the fixed ones, as of the last refresh
        self._titles: dict[RunKey, str] = {}  # the run column's text: titles told apart where they collide
        self.held = False  # the last refresh kept an order that the sort would change
        self.slots: dict[RunKey, int] = {}  # the compared runs' color slots: a swatch by their name
        self._italic = QFont()
        self._italic.setItalic(True)  # a summary column's header: a last value, not a config key

    def set_slots(self, slots: dict[RunKey, int]) -> None:
        """The compared runs' colors (as the charts draw them); other runs show none."""
        self.slots = dict(slots)
        if self._rows:
            self.dataChanged.emit(self.index(0, RUN_COLUMN), self.index(len(self._rows) - 1, RUN_COLUMN), [DECORATION])

    def refresh(self, hold: bool = False) -> bool:
        """Re-read the view model (after new runs, a filter change); True when the rows or columns
        changed (a reset: the view loses its selection), False when only values or the order did
        (the cells are repainted; a new order moves the rows, the selection with them).  ``hold``:
        the listed runs keep their rows (new ones come last, gone ones go); ``held`` says whether
        the sort would move some."""
        rows, extra = self.runs.rows(), self.runs.extra_columns()
        self._titles = self.runs.titles()
        now = [r.key for r in self._rows]
        wanted = [r.key for r in rows]
        if hold and extra == self._extra:
            rows = held_order(rows, now)
        self.held = [r.key for r in rows] != wanted
        keys = [r.key for r in rows]
        if extra == self._extra and keys == now:
            self._rows = rows
            if rows:
                self.dataChanged.emit(self.index(0, 0), self.index(len(rows) - 1, self.columnCount() - 1))
            return False
        if extra == self._extra and len(keys) == len(now) and set(keys) == set(now):
            self._move(rows)
            return False
        self.beginResetModel()
        self._rows, self._extra = rows, extra
        self.endResetModel()
        return True

    def _move(self, rows: list[RunRow]) -> None:
        """The same runs in a new order: a layout change, so the view's selection and current row
        stay on their runs (a reset would drop them)."""
        self.layoutAboutToBeChanged.emit()
        where = {r.key: i for i, r in enumerate(rows)}
        old = self.persistentIndexList()
        self.changePersistentIndexList(old, [self.index(where[self._rows[i.row()].key], i.column()) for i in old])
        self._rows = rows
        self.layoutChanged.emit()

    def row_at(self, index: int) -> RunRow:
        return self._rows[index]

    def column_at(self, section: int) -> Column:
        return FIXED[section] if section < len(FIXED) else self._extra[section - len(FIXED)]

    def section(self, column: Column) -> int:
        """The section showing ``column``, -1 where none does."""
        shown = [*FIXED, *self._extra]
        return shown.index(column) if column in shown else -1

    def rowCount(self, parent: Index = QModelIndex()) -> int:  # noqa: N802 (Qt's name)
        return 0 if parent.isValid() else len(self._rows)

    def columnCount(self, parent: Index = QModelIndex()) -> int:  # noqa: N802
        return 0 if parent.isValid() else len(FIXED) + len(self._extra)

    def headerData(self, section: int, orientation: Qt.Orientation, role: int = DISPLAY) -> Any:  # noqa: N802
        if orientation != Qt.Horizontal or not 0 <= section < len(FIXED) + len(self._extra):
            return None
        column = self.column_at(section)
        if role == DISPLAY:
            return column.header
        if role == TOOLTIP:
            return _header_tip(column)
        if role == FONT and column.source == SUMMARY:
            return self._italic
        return None

    def data(self, index: Index, role: int = DISPLAY) -> Any:
        if role not in ROLES:  # Qt asks for many roles per cell, per redraw: answer the rest at once
            return None
        row = self._rows[index.row()]
        if index.column() >= len(COLUMNS):
            return self._extra_data(row, self._extra[index.column() - len(COLUMNS)], role)
        column = COLUMNS[index.column()]
        if role == DISPLAY:
            return _cell(row, column, self._titles.get(row.key, row.title))
        if role == DECORATION:
            slot = self.slots.get(row.key) if column == "run" else None
            return swatch(slot) if slot is not None else None
        if role == FOREGROUND and column == "status":
            return status_color(row.status)
        if role == FOREGROUND and column == "alerts":
            return qcolor("alert_text")  # the theme's alert red, as on the charts
        if role == TOOLTIP:
            if column == "alerts" and row.alerts:
                return "\n".join(f"⚠ {a.rule}: {a.summary()}" for a in self.firing(row.key))
            return _run_tip(row)
        return None

    def _extra_data(self, row: RunRow, column: Column, role: int) -> Any:
        if role == DISPLAY:
            return cell_text(row.value(column))
        return _run_tip(row) if role == TOOLTIP else None


def _run_tip(row: RunRow) -> str:
    via = ", ".join(dict.fromkeys(agent for agent, _ in row.members)) or row.agent
    attempts = f", attempt {row.attempts}" if row.attempts > 1 else ""
    watched = f"\nwatched from its framework's files: it cannot be steered; {STEER_HOW}" if row.watched else ""
    return f"{row.title} ({row.run_id}) on {row.host or '?'} via {via}{attempts}{watched}"


def _header_tip(column: Column) -> str:
    """Says what a header names: a config key and a metric's last value would otherwise read alike."""
    if column.source == CONFIG:
        return f"config: {column.header}\n{SORT_HINT}"
    if column.source == SUMMARY:
        return f"{column.header}: the last value logged\n{SORT_HINT}"
    return SORT_HINT


def _cell(row: RunRow, column: str, title: str) -> str:
    if column == "status":
        return row.status  # its icon is drawn by status_icons.StatusDelegate: no font has to hold it
    if column == "alerts":
        return f"⚠ {row.alerts}" if row.alerts else ""
    if column == "run":
        return f"{title} (watched)" if row.watched else title
    if column == "step":
        attempt = f" ↻{row.attempts}" if row.attempts > 1 else ""  # resumed: attempt 2, 3, ...
        return ("" if row.step is None else str(row.step)) + attempt
    if column == "key metric":
        return "" if row.key_value is None else f"{row.key_metric} {row.key_value:.4g}"
    if column == "host":
        return row.host
    return str(row.lost_records) if row.lost_records else ""


class RunsHeader(QObject):
    """The runs table's header: a click sorts by its column (ascending, descending, then back to
    severity), a right-click chooses the config and summary columns, remembered across restarts.
    ``changed`` re-reads the table (the window's redraw keeps the selection)."""

    def __init__(self, table: QTableView, model: RunsTableModel, changed: Callable[[], None]):
        super().__init__(table)
        self.model, self.changed = model, changed
        self.header = table.horizontalHeader()
        self.header.setSectionsClickable(True)
        self.header.setSortIndicatorShown(True)
        self.header.setContextMenuPolicy(Qt.ContextMenuPolicy.CustomContextMenu)
        self.header.sectionClicked.connect(self._on_click)
        self.header.customContextMenuRequested.connect(self._on_menu)
        model.modelReset.connect(self.show_sort)
        model.runs.set_extra_columns(load_columns())
        self.show_sort()

    def show_sort(self) -> None:
        """The header's arrow on the sorted column; none in the default order."""
        sort = self.model.runs.sort
        section = -1 if sort is None else self.model.section(sort[0])
        order = Qt.SortOrder.DescendingOrder if sort is not None and sort[1] else Qt.SortOrder.AscendingOrder
        self.header.setSortIndicator(section, order)

    def _on_click(self, section: int) -> None:
        self.model.runs.cycle_sort(self.model.column_at(section))
        self.show_sort()
        self.changed()

    def _on_menu(self, pos: QPoint) -> None:
        menu = self.menu()
        menu.exec(self.header.mapToGlobal(pos))
        menu.deleteLater()

    def menu(self) -> QMenu:
        """Every config key and summary metric of the listed runs, checked where shown."""
        runs = self.model.runs
        shown = runs.extra_columns()
        menu = QMenu(self.header)
        for title, source in (("Config", CONFIG), ("Last values", SUMMARY)):
            sub = menu.addMenu(title)
            for column in dict.fromkeys([*runs.available_columns(), *shown]):
                if column.source == source:
                    action = sub.addAction(column.header.replace("&", "&&"))  # "&" would be a shortcut mark
                    action.setCheckable(True)
                    action.setChecked(column in shown)
                    action.triggered.connect(lambda _=False, c=column: self._choose(c))
            sub.setEnabled(not sub.isEmpty())
        menu.addSeparator()
        default = menu.addAction("Default columns (the config keys that differ)")
        default.setCheckable(True)
        default.setChecked(runs.default_columns)
        default.triggered.connect(lambda _=False: self._choose(None))
        return menu

    def _choose(self, column: Column | None) -> None:
        """Show or hide ``column``; None: back to the default columns."""
        runs = self.model.runs
        if column is None:
            runs.set_extra_columns(None)
        else:
            runs.toggle_column(column)
        save_columns(None if runs.default_columns else runs.extra_columns())
        self.changed()


def load_columns() -> list[Column] | None:
    """The extra columns chosen last time; None where none were (or the setting is unreadable)."""
    try:
        idents = json.loads(str(QSettings("pilothouse", "pilothouse").value(SETTING, "null")))
    except ValueError:
        return None
    if not isinstance(idents, list):
        return None
    return [c for c in map(Column.parse, (i for i in idents if isinstance(i, str))) if c is not None]


def save_columns(columns: list[Column] | None) -> None:
    settings = QSettings("pilothouse", "pilothouse")
    if columns is None:
        settings.remove(SETTING)
    else:
        settings.setValue(SETTING, json.dumps([c.ident for c in columns]))
