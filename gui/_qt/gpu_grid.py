"""Every GPU of every node as one grid: a row per node, a cell per GPU, colored by the chosen metric.

Why one widget that paints everything: 64 nodes x 8 GPUs are 512 cells; 512 widgets cost a layout
and an event each, one ``paintEvent`` costs a rectangle each.  The grid reads the plain model
``pilothouse.gui.gpu_grid.GpuGrid`` only in ``refresh()``, which the app's 30 ms coalescing timer
calls, so a burst of readings is one repaint.

What stands out does not rest on color alone: a missing GPU is crossed out, a hot or throttling one
has a triangle in its corner, an idle one a ring, one whose memory is nearly full a bar along its
bottom; the legend above draws the same marks.  Hovering a cell gives its exact values; a click
selects it (``selected``), and ``GpuGridPanel`` charts that GPU's history below the grid.
"""

from __future__ import annotations

import math

import numpy as np
import pyqtgraph as pg
from PySide6.QtCore import QEvent, QPointF, QRect, QRectF, Qt, Signal
from PySide6.QtGui import QBrush, QColor, QFontMetrics, QPainter, QPalette, QPen, QPolygonF
from PySide6.QtWidgets import QComboBox, QHBoxLayout, QLabel, QScrollArea, QToolTip, QVBoxLayout, QWidget

from ..gpu_grid import HOT, IDLE, MEM_FULL, MISSING, POWER_DRAW, SHOWN, TEMPERATURE, Cell, GpuGrid, NodeKey
from ..palette import PALETTE
from .theme import current, is_restyle

CELL_W, CELL_H, GAP = 26, 18, 2
LABEL_MAX = 180  # px for a host name; longer ones are elided
LEGEND_H = 26
SCALE_W = 120
GRID_MAX_H = 440  # px of grid before it scrolls: the history chart stays in view below it
UNITS = {"utilization": "%", "memory": "% used", "power": "W", "temperature": "°C"}
FIXED_SCALE = {"utilization": (0.0, 100.0), "memory": (0.0, 100.0), "temperature": (30.0, 90.0)}
MISSING_FILL, NO_VALUE_FILL = QColor("#55585e"), QColor("#8a8d93")
MARK_FILL, MARK_EDGE = QColor("#ffffff"), QColor("#000000")  # white on a black outline: seen on any color
_LUT = [QColor(*map(int, rgb[:3])) for rgb in pg.colormap.get("viridis").getLookupTable(nPts=256)]


def scale_of(shown: str, cells: list[Cell]) -> tuple[float, float]:
    """The value range the colors span: fixed for %, and for power 0 to the highest power drawn, rounded
    up to 100 W (a scale that moved with every reading would repaint the whole grid each time)."""
    if shown in FIXED_SCALE:
        return FIXED_SCALE[shown]
    finite = [v for v in (c.value(shown) for c in cells) if math.isfinite(v)]
    return 0.0, 100.0 * max(1, math.ceil(max(finite, default=0.0) / 100.0))


def draw_marks(p: QPainter, rect: QRectF, flags: frozenset[str]) -> None:
    """The shapes that say what stands out (the grid's cells and the legend share them)."""
    p.setPen(QPen(MARK_EDGE, 1))
    p.setBrush(MARK_FILL)
    if MISSING in flags:
        for pen in (QPen(MARK_EDGE, 4), QPen(MARK_FILL, 2)):
            p.setPen(pen)
            p.drawLine(rect.topLeft() + QPointF(4, 3), rect.bottomRight() - QPointF(4, 3))
            p.drawLine(rect.bottomLeft() + QPointF(4, -3), rect.topRight() + QPointF(-4, 3))
        return
    if HOT in flags:
        r = rect.topRight()
        p.drawPolygon(QPolygonF([r + QPointF(-13, 0), r, r + QPointF(0, 13)]))
    if IDLE in flags:
        p.setBrush(Qt.BrushStyle.NoBrush)
        for pen in (QPen(MARK_EDGE, 4), QPen(MARK_FILL, 2)):
            p.setPen(pen)
            p.drawEllipse(rect.center(), 4.5, 4.5)
    if MEM_FULL in flags:
        p.setPen(QPen(MARK_EDGE, 1))
        p.setBrush(MARK_FILL)
        p.drawRect(QRectF(rect.left() + 2, rect.bottom() - 4, rect.width() - 4, 3))


class GpuGridView(QWidget):
    """The painted grid; see the module docstring."""

    selected = Signal(object, int)  # node key, GPU index

    def __init__(self, model: GpuGrid) -> None:
        super().__init__()
        self.model = model
        self.shown = SHOWN[0]
        self.rows: list[tuple[NodeKey, str, list[Cell]]] = []
        self.selection: tuple[NodeKey, int] | None = None
        self.scale = (0.0, 1.0)
        self._label_w = 60
        self._shape = (0, 0, 0)  # (label width, GPUs of the widest row, rows) the size was set for
        self._hosts: tuple[str, ...] = ()
        self._elided: list[str] = []  # the host names as drawn
        self.setMouseTracking(True)
        self.setSizePolicy(self.sizePolicy().horizontalPolicy(), self.sizePolicy().Policy.Fixed)

    def set_shown(self, shown: str) -> None:
        """Color by another metric: the cells shown are recolored (the next ``refresh`` reads the model)."""
        if shown not in SHOWN:
            raise ValueError(f"unknown metric {shown!r}: one of {', '.join(SHOWN)}")
        self.shown = shown
        self.scale = scale_of(shown, [c for _, _, row in self.rows for c in row])
        self.update()

    def refresh(self, now: float | None = None) -> None:
        """Read the model (the latest readings, flags as of ``now``) and repaint the rows that changed:
        the model hands back the same cell object for a GPU that did not."""
        before = {key: cells for key, _, cells in self.rows}
        self.rows = self.model.rows(now)
        cells = [c for _, _, row in self.rows for c in row]
        scale = scale_of(self.shown, cells)
        hosts = tuple(h for _, h, _ in self.rows)
        whole = scale != self.scale or hosts != self._hosts
        self.scale = scale
        if hosts != self._hosts:  # host names are measured and elided once, not per paint
            self._hosts = hosts
            metrics = QFontMetrics(self.font())
            self._label_w = min(LABEL_MAX, max((metrics.horizontalAdvance(h) for h in hosts), default=40) + 10)
            self._elided = [metrics.elidedText(h, Qt.TextElideMode.ElideMiddle, self._label_w - 6) for h in hosts]
        shape = (self._label_w, max((c.gpu + 1 for c in cells), default=0), len(self.rows))
        if shape != self._shape:
            self._shape = shape
            self.setFixedHeight(LEGEND_H + len(self.rows) * (CELL_H + GAP) + GAP)
            self.setMinimumWidth(max(self._label_w + shape[1] * (CELL_W + GAP), 620))
        if whole:
            self.update()
            return
        for i, (key, _, row) in enumerate(self.rows):
            old = before.get(key)
            if old is None or len(old) != len(row) or any(a is not b for a, b in zip(old, row)):
                self.update(0, LEGEND_H + i * (CELL_H + GAP) - GAP, self.width(), CELL_H + 2 * GAP)

    # --- geometry ----------------------------------------------------------------------------

    def cell_rect(self, row: int, gpu: int) -> QRectF:
        return QRectF(self._label_w + gpu * (CELL_W + GAP), LEGEND_H + row * (CELL_H + GAP), CELL_W, CELL_H)

    def cell_at(self, pos: QPointF) -> Cell | None:
        row = int((pos.y() - LEGEND_H) // (CELL_H + GAP))
        gpu = int((pos.x() - self._label_w) // (CELL_W + GAP))
        if pos.y() < LEGEND_H or pos.x() < self._label_w or not 0 <= row < len(self.rows):
            return None
        cell = next((c for c in self.rows[row][2] if c.gpu == gpu), None)
        return cell if cell is not None and self.cell_rect(row, gpu).contains(pos) else None

    # --- painting ----------------------------------------------------------------------------

    def color(self, value: float) -> QColor:
        lo, hi = self.scale
        if not math.isfinite(value):
            return NO_VALUE_FILL
        return _LUT[int(min(max((value - lo) / (hi - lo or 1.0), 0.0), 1.0) * 255)]

    def paintEvent(self, event: QEvent) -> None:  # noqa: N802 (Qt's name)
        p = QPainter(self)
        p.setRenderHint(QPainter.RenderHint.Antialiasing)
        text = self.palette().color(QPalette.ColorRole.WindowText)
        if event.rect().top() < LEGEND_H:
            self._paint_legend(p, text)
        hatch = QBrush(MARK_EDGE, Qt.BrushStyle.BDiagPattern)
        exposed = event.rect()
        first = max(0, (exposed.top() - LEGEND_H) // (CELL_H + GAP))
        last = min(len(self.rows), (exposed.bottom() - LEGEND_H) // (CELL_H + GAP) + 1)
        for i in range(first, last):  # only the rows Qt asks for: a refresh repaints the rows that changed
            cells = self.rows[i][2]
            top = LEGEND_H + i * (CELL_H + GAP)
            p.setPen(text)
            p.drawText(QRect(0, int(top), self._label_w - 6, CELL_H), Qt.AlignmentFlag.AlignVCenter, self._elided[i])
            for cell in cells:
                rect = self.cell_rect(i, cell.gpu)
                value = cell.value(self.shown)
                p.fillRect(rect, MISSING_FILL if MISSING in cell.flags else self.color(value))
                if not math.isfinite(value) and MISSING not in cell.flags:
                    p.fillRect(rect, hatch)  # no number: NaN or not reported, never a color of the scale
                if cell.flags:
                    draw_marks(p, rect, cell.flags)
        if self.selection is not None:
            self._paint_selection(p, text)
        p.end()

    def _paint_legend(self, p: QPainter, text: QColor) -> None:
        lo, hi = self.scale
        p.setPen(text)
        p.drawText(QRect(0, 0, self._label_w - 6, LEGEND_H - 6), Qt.AlignmentFlag.AlignVCenter,
                   f"{lo:g}–{hi:.0f} {UNITS[self.shown]}")
        x = self._label_w
        for k in range(SCALE_W):
            p.fillRect(QRectF(x + k, 4, 1, LEGEND_H - 12), _LUT[k * 255 // (SCALE_W - 1)])
        x += SCALE_W + 12
        for flag, label in ((MISSING, "missing"), (HOT, "hot / throttling"), (IDLE, "idle (job running)"),
                            (MEM_FULL, "memory full")):
            swatch = QRectF(x, 3, CELL_W, CELL_H)
            p.fillRect(swatch, NO_VALUE_FILL if flag != MISSING else MISSING_FILL)
            draw_marks(p, swatch, frozenset({flag}))
            p.setPen(text)
            width = QFontMetrics(self.font()).horizontalAdvance(label)
            p.drawText(QRectF(x + CELL_W + 4, 0, width + 2, LEGEND_H - 2), Qt.AlignmentFlag.AlignVCenter, label)
            x += CELL_W + width + 16

    def _paint_selection(self, p: QPainter, text: QColor) -> None:
        node, gpu = self.selection
        row = next((i for i, (key, _, _) in enumerate(self.rows) if key == node), None)
        if row is not None:
            p.setBrush(Qt.BrushStyle.NoBrush)
            p.setPen(QPen(text, 2))
            p.drawRect(self.cell_rect(row, gpu).adjusted(-1.5, -1.5, 1.5, 1.5))

    # --- pointer -----------------------------------------------------------------------------

    def event(self, event: QEvent) -> bool:
        if event.type() == QEvent.Type.ToolTip:
            cell = self.cell_at(QPointF(event.pos()))
            if cell is None:
                QToolTip.hideText()
                event.ignore()
            else:
                QToolTip.showText(event.globalPos(), cell.tooltip(), self)
            return True
        return super().event(event)

    def mousePressEvent(self, event: QEvent) -> None:  # noqa: N802 (Qt's name)
        cell = self.cell_at(event.position())
        if cell is None or event.button() != Qt.MouseButton.LeftButton:
            return super().mousePressEvent(event)
        self.select(cell.node, cell.gpu)

    def select(self, node: NodeKey, gpu: int) -> None:
        self.selection = (node, gpu)
        self.update()
        self.selected.emit(node, gpu)


class GpuGridPanel(QWidget):
    """The grid with its metric selector, and the history of the selected GPU below it."""

    def __init__(self, model: GpuGrid) -> None:
        super().__init__()
        self.model = model
        self.view = GpuGridView(model)
        self.metric = QComboBox()
        self.metric.addItems(SHOWN)
        self.metric.currentTextChanged.connect(self._on_metric)
        self.title = QLabel()
        bar = QHBoxLayout()
        bar.addWidget(self.title)
        bar.addStretch()
        bar.addWidget(QLabel("color by"))
        bar.addWidget(self.metric)
        scroll = QScrollArea(widgetResizable=True)
        scroll.setWidget(self.view)
        self.scroll = scroll
        self.history = pg.PlotWidget(axisItems={"bottom": pg.DateAxisItem()})
        self.history.setFixedHeight(170)
        self.history.hide()  # until a GPU is clicked
        self.curve = self.history.plot([], [], pen=pg.mkPen(PALETTE[0], width=1.5))
        self.restyle()
        layout = QVBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.addLayout(bar)
        layout.addWidget(scroll)
        layout.addWidget(self.history)
        layout.addStretch()
        self.view.selected.connect(self._on_selected)

    def changeEvent(self, event: QEvent) -> None:  # noqa: N802 (Qt's name)
        if is_restyle(event):
            self.restyle()
        super().changeEvent(event)

    def restyle(self) -> None:
        """The history chart in the theme's chart colors (the grid reads the palette as it paints)."""
        theme = current()
        self.history.setBackground(theme.chart_bg)
        for name in ("left", "bottom"):
            axis = self.history.getPlotItem().getAxis(name)
            axis.setPen(theme.chart_fg)
            axis.setTextPen(theme.chart_fg)
        self.history.getPlotItem().titleLabel.setAttr("color", theme.chart_fg)

    def refresh(self, now: float | None = None) -> None:
        """Repaint the grid and the selected GPU's history from the model (the coalescing timer calls it)."""
        self.view.refresh(now)
        self.scroll.setFixedHeight(min(GRID_MAX_H, self.view.height() + 2 * self.scroll.frameWidth()))
        cells = [c for _, _, row in self.view.rows for c in row]
        flagged = {flag: sum(flag in c.flags for c in cells) for flag in (MISSING, HOT, IDLE, MEM_FULL)}
        self.title.setText(f"{len(cells)} GPUs on {len(self.view.rows)} nodes" + "".join(
            f" · {n} {flag}" for flag, n in flagged.items() if n))
        self._draw_history()

    def _on_metric(self, shown: str) -> None:
        self.view.set_shown(shown)
        self._draw_history()

    def _on_selected(self, node: NodeKey, gpu: int) -> None:
        self.history.show()
        self._draw_history()

    def _draw_history(self) -> None:
        if self.view.selection is None:
            return
        node, gpu = self.view.selection
        try:
            times, vals = self.model.series(node, gpu, self.view.shown)
            host = self.model.cell(node, gpu).host
        except KeyError:  # its agent was removed
            times, vals, host = np.empty(0), np.empty(0), node[1]
        self.history.setTitle(f"{host} gpu{gpu}: {self.view.shown} ({UNITS[self.view.shown]})")
        self.curve.setData(times, vals, connect="finite")
        if self.view.shown in (POWER_DRAW, TEMPERATURE):
            self.history.enableAutoRange(axis="y")
        else:
            self.history.setYRange(0, 100)
        self.history.enableAutoRange(axis="x")
