"""Run-status icons drawn with QPainter, so no font has to have them: "⏸" (U+23F8) is missing from
DejaVu and most Linux fonts and showed as a missing-glyph box in the run list.

``StatusDelegate`` paints the status column of the run list: the icon in the status's color (the
theme's ``status_*``; the selected text's color on a selected row), then the status word (the
model's text mark in front of it is left out: the icon says it).
"""

from __future__ import annotations

from PySide6.QtCore import QModelIndex, QPersistentModelIndex, QPointF, QRectF, QSize, Qt
from PySide6.QtGui import QBrush, QColor, QIcon, QPainter, QPainterPath, QPen, QPixmap
from PySide6.QtWidgets import QStyle, QStyledItemDelegate, QStyleOptionViewItem

from .theme import status_color

SIZE = 12  # logical pixels: about a lower-case letter's height beside the status word
SCALES = (1, 2, 3)  # device pixel ratios drawn for (1x screens, HiDPI)
SHAPES = {"running": "dot", "paused": "bars", "finished": "ring", "crashed": "cross", "stale": "dashed"}

Index = QModelIndex | QPersistentModelIndex


def draw_status(painter: QPainter, status: str, color: QColor, box: QRectF) -> None:
    """The status's shape in ``box``: a dot (running), two bars (paused), a ring (finished), a cross
    (crashed), a dashed ring (stale), a hollow diamond (anything else)."""
    side = min(box.width(), box.height())
    r = QRectF(0, 0, side, side)
    r.moveCenter(box.center())
    line = max(side / 6, 1.0)
    painter.save()
    painter.setRenderHint(QPainter.RenderHint.Antialiasing)
    pen = QPen(color, line, Qt.PenStyle.SolidLine, Qt.PenCapStyle.RoundCap, Qt.PenJoinStyle.RoundJoin)
    inner = r.adjusted(line, line, -line, -line)
    shape = SHAPES.get(status)
    if shape == "dot":
        painter.setPen(Qt.PenStyle.NoPen)
        painter.setBrush(QBrush(color))
        painter.drawEllipse(r.adjusted(side * 0.08, side * 0.08, -side * 0.08, -side * 0.08))
    elif shape == "bars":
        painter.setPen(Qt.PenStyle.NoPen)
        painter.setBrush(QBrush(color))
        bar = side * 0.28
        for left in (r.left() + side * 0.14, r.right() - side * 0.14 - bar):
            painter.drawRoundedRect(QRectF(left, r.top() + side * 0.1, bar, side * 0.8), bar * 0.25, bar * 0.25)
    elif shape == "ring":
        painter.setPen(pen)
        painter.setBrush(Qt.BrushStyle.NoBrush)
        painter.drawEllipse(inner)
    elif shape == "dashed":
        pen.setCapStyle(Qt.PenCapStyle.FlatCap)
        painter.setPen(pen)
        for k in range(8):  # eight even dashes; a dotted pen spaces them unevenly around a circle
            painter.drawArc(inner, int((k * 45 + 11.25) * 16), int(22.5 * 16))
    elif shape == "cross":
        pen.setWidthF(line * 1.5)
        painter.setPen(pen)
        a = inner.adjusted(line * 0.5, line * 0.5, -line * 0.5, -line * 0.5)
        painter.drawLine(a.topLeft(), a.bottomRight())
        painter.drawLine(a.topRight(), a.bottomLeft())
    else:
        painter.setPen(pen)
        painter.setBrush(Qt.BrushStyle.NoBrush)
        c = inner.center()
        half = inner.width() / 2
        diamond = QPainterPath(QPointF(c.x(), c.y() - half))
        for point in ((c.x() + half, c.y()), (c.x(), c.y() + half), (c.x() - half, c.y())):
            diamond.lineTo(*point)
        diamond.closeSubpath()
        painter.drawPath(diamond)
    painter.restore()


_icons: dict[tuple[str, str], QIcon] = {}


def status_icon(status: str, color: QColor | str) -> QIcon:
    """The status's icon in ``color``, sharp at every scale in SCALES (made once per status and color)."""
    color = QColor(color)
    key = (status, color.name(QColor.NameFormat.HexArgb))
    icon = _icons.get(key)
    if icon is None:
        icon = QIcon()
        for scale in SCALES:
            pixmap = QPixmap(SIZE * scale, SIZE * scale)
            pixmap.setDevicePixelRatio(scale)
            pixmap.fill(Qt.GlobalColor.transparent)
            painter = QPainter(pixmap)
            draw_status(painter, status, color, QRectF(0, 0, SIZE, SIZE))
            painter.end()
            icon.addPixmap(pixmap)
        icon = _icons[key] = icon
    return icon


class StatusDelegate(QStyledItemDelegate):
    """The run list's status cell: a drawn icon and the status word, in the model's status color."""

    def initStyleOption(self, option: QStyleOptionViewItem, index: Index) -> None:  # noqa: N802 (Qt's name)
        super().initStyleOption(option, index)
        model = index.model()
        row_at = getattr(model, "row_at", None)
        status = row_at(index.row()).status if row_at is not None else option.text.rpartition(" ")[2]
        color = index.data(Qt.ItemDataRole.ForegroundRole)
        if option.state & QStyle.StateFlag.State_Selected:
            # on the selection's color (the paused blue) a status-colored icon would vanish: it goes
            # the way the selected text goes
            color = option.palette.highlightedText().color()
        elif not isinstance(color, QColor):
            color = status_color(status)
        option.text = status
        option.icon = status_icon(status, color)
        option.decorationSize = QSize(SIZE, SIZE)
        option.features |= QStyleOptionViewItem.ViewItemFeature.HasDecoration
