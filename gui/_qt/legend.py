"""Run colors on screen: the swatch icon (runs table, Config and Rollouts headers) and the Charts
tab's legend.

Why one legend for the tab, not one per chart: every chart overlays the same runs in the same
colors, so one row of names says it once and covers no curve.  Hovering an entry highlights
that run on every chart (the others dimmed); clicking hides or shows it.
"""

from __future__ import annotations

from collections.abc import Collection, Hashable

from PySide6.QtCore import QPoint, QRect, QRectF, QSize, Qt, Signal
from PySide6.QtGui import QColor, QEnterEvent, QIcon, QPainter, QPen, QPixmap
from PySide6.QtWidgets import QLayout, QLayoutItem, QToolButton, QWidget, QWidgetItem

from ..palette import color, dashed

SWATCH = 12
_icons: dict[tuple[int, bool], QIcon] = {}


def swatch(slot: int, faded: bool = False) -> QIcon:
    """A run's color as a small square; slots past the palette (dashed curves) are hollow.  On a
    selected row (the highlight's blue) the square has a white ring and is not tinted."""
    key = (slot, faded)
    if key not in _icons:
        icon = QIcon()
        icon.addPixmap(_square(slot, faded, QColor(0, 0, 0, 70)), QIcon.Mode.Normal)
        icon.addPixmap(_square(slot, faded, QColor(255, 255, 255, 230)), QIcon.Mode.Selected)
        _icons[key] = icon
    return _icons[key]


def _square(slot: int, faded: bool, ring: QColor) -> QPixmap:
    pixmap = QPixmap(SWATCH * 2, SWATCH * 2)  # drawn at 2x: sharp on high-DPI screens
    pixmap.setDevicePixelRatio(2)
    pixmap.fill(Qt.GlobalColor.transparent)
    fill = QColor(color(slot))
    if faded:
        fill.setAlpha(70)
    painter = QPainter(pixmap)
    painter.setRenderHint(QPainter.RenderHint.Antialiasing)
    if dashed(slot):
        painter.setPen(QPen(ring, 4.5))
        painter.drawRoundedRect(QRectF(2, 2, SWATCH - 4, SWATCH - 4), 2, 2)
        painter.setPen(QPen(fill, 2.5))
        painter.drawRoundedRect(QRectF(2, 2, SWATCH - 4, SWATCH - 4), 2, 2)
    else:
        painter.setPen(QPen(ring, 1))
        painter.setBrush(fill)
        painter.drawRoundedRect(QRectF(1, 1, SWATCH - 2, SWATCH - 2), 2, 2)
    painter.end()
    return pixmap


class LegendEntry(QToolButton):
    """Swatch and name of one run; says when the pointer enters or leaves it."""

    hovered = Signal(object, bool)  # key, inside

    def __init__(self, key: Hashable, label: str, slot: int) -> None:
        super().__init__(text=label, toolButtonStyle=Qt.ToolButtonStyle.ToolButtonTextBesideIcon, autoRaise=True,
                         toolTip=f"{label}: hover to highlight on every chart, click to hide or show")
        self.key, self.label, self.slot = key, label, slot
        self.setIconSize(QSize(SWATCH, SWATCH))
        self.set_hidden(False)

    def set_hidden(self, hidden: bool) -> None:
        self.hidden = hidden
        self.setIcon(swatch(self.slot, faded=hidden))
        font = self.font()
        font.setStrikeOut(hidden)
        self.setFont(font)

    def enterEvent(self, event: QEnterEvent) -> None:  # noqa: N802 (Qt's name)
        self.hovered.emit(self.key, True)
        super().enterEvent(event)

    def leaveEvent(self, event: object) -> None:  # noqa: N802
        self.hovered.emit(self.key, False)
        super().leaveEvent(event)


class RunLegend(QWidget):
    """The compared runs' names and colors, wrapping onto more lines when they do not fit."""

    highlighted = Signal(object)  # the hovered run's key, or None
    hidden_changed = Signal(object, bool)  # key, hidden

    def __init__(self) -> None:
        super().__init__()
        self.entries: dict[Hashable, LegendEntry] = {}
        self.setLayout(FlowLayout())

    def set_runs(self, runs: list[tuple[Hashable, str, int]], hidden: Collection[Hashable] = ()) -> None:
        """(key, label, slot) per run, in selection order; ``hidden`` ones are struck out."""
        layout = self.layout()
        for entry in self.entries.values():
            layout.removeWidget(entry)
            entry.deleteLater()
        self.entries = {}
        for key, label, slot in runs:
            entry = LegendEntry(key, label, slot)
            entry.set_hidden(key in hidden)
            entry.hovered.connect(self._hovered)
            entry.clicked.connect(lambda _=False, e=entry: self._clicked(e))
            layout.addWidget(entry)
            self.entries[key] = entry
        self.setVisible(bool(self.entries))

    def _hovered(self, key: Hashable, inside: bool) -> None:
        self.highlighted.emit(key if inside else None)

    def _clicked(self, entry: LegendEntry) -> None:
        entry.set_hidden(not entry.hidden)
        self.hidden_changed.emit(entry.key, entry.hidden)


class FlowLayout(QLayout):
    """Widgets left to right, wrapping to the next line (Qt's flow layout example, trimmed)."""

    def __init__(self) -> None:
        super().__init__()
        self._items: list[QLayoutItem] = []
        self.setContentsMargins(0, 0, 0, 0)

    def addItem(self, item: QLayoutItem) -> None:  # noqa: N802 (Qt's name)
        self._items.append(item)

    def addWidget(self, widget: QWidget) -> None:  # noqa: N802
        self.addChildWidget(widget)
        self.addItem(QWidgetItem(widget))

    def count(self) -> int:
        return len(self._items)

    def itemAt(self, index: int) -> QLayoutItem | None:  # noqa: N802
        return self._items[index] if 0 <= index < len(self._items) else None

    def takeAt(self, index: int) -> QLayoutItem | None:  # noqa: N802
        return self._items.pop(index) if 0 <= index < len(self._items) else None

    def expandingDirections(self) -> Qt.Orientation:  # noqa: N802
        return Qt.Orientation(0)

    def hasHeightForWidth(self) -> bool:  # noqa: N802
        return True

    def heightForWidth(self, width: int) -> int:  # noqa: N802
        return self._place(QRect(0, 0, width, 0), move=False)

    def setGeometry(self, rect: QRect) -> None:  # noqa: N802
        super().setGeometry(rect)
        self._place(rect, move=True)

    def sizeHint(self) -> QSize:  # noqa: N802
        return self.minimumSize()

    def minimumSize(self) -> QSize:  # noqa: N802
        size = QSize()
        for item in self._items:
            size = size.expandedTo(item.minimumSize())
        return size

    def _place(self, rect: QRect, move: bool) -> int:
        x, y, line = rect.x(), rect.y(), 0
        gap = 6
        for item in self._items:
            hint = item.sizeHint()
            if x + hint.width() > rect.right() and line > 0:
                x, y, line = rect.x(), y + line + gap // 2, 0
            if move:
                item.setGeometry(QRect(QPoint(x, y), hint))
            x += hint.width() + gap
            line = max(line, hint.height())
        return y + line - rect.y()

