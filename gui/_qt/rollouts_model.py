"""The Rollouts tab's table model: lines of (step, pair of rows), one run or two side by side.

Why its own module: the main table and the prompt history list the same kind of lines.  Cells are
worked out once per line (a trajectory's summary reads all its messages) and kept until the lines
change: Qt asks for them on every paint.
"""

from __future__ import annotations

from typing import Any

from PySide6.QtCore import QAbstractTableModel, QModelIndex, QPersistentModelIndex, Qt

from ..rollouts import Pair, Row, reward
from ..transcript import cells as row_cells
from .legend import swatch

CELL_CHARS = 160  # the table shows a line's start; the detail pane shows everything
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
        self._cells: dict[int, list[str]] = {}

    def set_lines(self, lines: list[Line], names: list[str], slots: list[int | None] | None = None) -> None:
        self.beginResetModel()
        self.lines, self.names, self._cells = lines, names, {}
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
        if i not in self._cells:
            step, (a, b) = self.lines[i]
            prompt = _cell(row_cells(a if a is not None else b)[0])
            sides = [a] if len(self.names) < 2 else [a, b]
            self._cells[i] = [str(step), prompt, *(v for row in sides for v in (
                _cell(row_cells(row)[1]) if row else "", _reward_text(row)))]
        return self._cells[i]
