"""The Rollouts tab's group view: the step's GRPO groups, each with its rows' rewards and advantages.

Why a tree: a group is read as a whole (size, mean, spread) and then row by row; a group whose
rewards are all equal teaches GRPO nothing and is marked so (``step_groups.NO_SIGNAL``, dimmed).
Rows within a group are listed as logged or by advantage; clicking one shows it in the transcript.
Which rows and in what order is ``pilothouse.gui.step_groups``'.
"""

from __future__ import annotations

from collections.abc import Sequence

from PySide6.QtCore import QEvent, Qt, Signal
from PySide6.QtGui import QFont
from PySide6.QtWidgets import QComboBox, QHBoxLayout, QLabel, QTreeWidget, QTreeWidgetItem, QVBoxLayout, QWidget

from ..rollouts import Row
from ..step_groups import NO_SIGNAL, GroupLine, group_lines
from ..transcript import cells
from .theme import is_restyle, qcolor

ORDER_LABELS = {"logged": "rows as logged", "desc": "advantage ↓", "asc": "advantage ↑"}
COLUMNS = ["row", "reward", "advantage", "completion"]  # a group's own line spans them


def _number(value: float | None) -> str:
    return "" if value is None else f"{value:.3g}"


class GroupsView(QWidget):
    """Groups of the step shown, per run shown; ``picked`` says which row was clicked."""

    picked = Signal(int, object)  # (index of the run among those shown, the row)

    def __init__(self) -> None:
        super().__init__()
        self.runs: list[tuple[str, list[Row]]] = []  # (run name, the step's rows) per run shown
        self.lines: list[list[GroupLine]] = []  # per run, its groups as shown
        self.step: int | None = None
        self.title = QLabel()
        self.order = QComboBox(toolTip="order of the rows within each group")
        for key, label in ORDER_LABELS.items():
            self.order.addItem(label, key)
        self.order.currentIndexChanged.connect(self._fill)
        self.tree = QTreeWidget(columnCount=len(COLUMNS), uniformRowHeights=True)
        self.tree.setHeaderLabels(COLUMNS)
        self.tree.currentItemChanged.connect(self._on_item)
        top = QHBoxLayout()
        top.addWidget(self.title, 1)
        top.addWidget(self.order)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.addLayout(top)
        layout.addWidget(self.tree)

    def show_step(self, step: int | None, runs: Sequence[tuple[str, list[Row]]]) -> None:
        self.runs = list(runs)
        self.step = step
        self._fill()

    def changeEvent(self, event: QEvent) -> None:  # noqa: N802 (Qt's name)
        if is_restyle(event) and getattr(self, "runs", None):
            self._fill()  # the no-signal marks are the theme's colors
        super().changeEvent(event)

    def _fill(self, *_: object) -> None:
        order = self.order.currentData()
        self.lines = [group_lines(rows, order) for _, rows in self.runs]
        self.tree.blockSignals(True)
        self.tree.clear()
        named = len(self.runs) > 1
        for run, ((name, _), groups) in enumerate(zip(self.runs, self.lines)):
            for group in groups:
                self.tree.addTopLevelItem(self._group_item(run, f"{name} · " * named, group))
        for i in range(self.tree.topLevelItemCount()):
            self.tree.topLevelItem(i).setFirstColumnSpanned(True)
        self.tree.expandAll()
        self.tree.blockSignals(False)
        self.tree.setColumnWidth(0, 2 * self.tree.indentation() + self.fontMetrics().horizontalAdvance("row 00000"))
        for column in (1, 2):  # the groups' spanned lines do not widen the rows' first column
            self.tree.resizeColumnToContents(column)
        count = sum(len(groups) for groups in self.lines)
        flat = sum(g.all_equal for groups in self.lines for g in groups)
        self.title.setText("" if self.step is None else
                           f"step {self.step}: {count} groups" + (f", {flat} with no signal" if flat else ""))

    def _group_item(self, run: int, prefix: str, group: GroupLine) -> QTreeWidgetItem:
        """A group's line spans the columns: its stats first (they are what is compared), then the
        prompt; a group with no signal says so first, in the alert color."""
        stats = f"{group.size} rows · mean {_number(group.mean)} · std {_number(group.std)}"
        flag = f"⊘ {NO_SIGNAL} · " if group.all_equal else ""
        item = QTreeWidgetItem([f"{prefix}{flag}{stats} — {group.label}"])
        item.setToolTip(0, group.label)
        font = QFont()
        font.setBold(True)
        item.setFont(0, font)
        if group.all_equal:
            item.setForeground(0, qcolor("alert_text"))
        for member in group.members:
            child = QTreeWidgetItem([f"row {member.index}", _number(member.reward), _number(member.advantage),
                                     cells(member.row)[1]])
            child.setData(0, Qt.UserRole, (run, member.row))
            item.addChild(child)
        return item

    def mark(self, rows: Sequence[Row | None]) -> None:
        """Select the item of the first row of ``rows`` (one per run shown) found in a group, without
        saying so: the table's selection is shown here, not picked again."""
        self.tree.blockSignals(True)
        self.tree.setCurrentItem(None)
        for item in self.items():
            run, row = item.data(0, Qt.UserRole)
            if run < len(rows) and rows[run] is not None and row == rows[run]:
                self.tree.setCurrentItem(item)
                self.tree.scrollToItem(item)
                break
        self.tree.blockSignals(False)

    def items(self) -> list[QTreeWidgetItem]:
        """The row items, group by group."""
        return [g.child(i) for g in map(self.tree.topLevelItem, range(self.tree.topLevelItemCount()))
                for i in range(g.childCount())]

    def _on_item(self, item: QTreeWidgetItem | None, *_: object) -> None:
        data = item.data(0, Qt.UserRole) if item is not None else None
        if data is not None:
            self.picked.emit(*data)
