"""ChartWidget: live metric curves drawn from ``Series.view()``, so a frame costs per pixel.

pyqtgraph's own downsampling re-scans every point each frame; here each curve asks its
``Series`` for at most a few points per pixel column of the visible x range, on a coalescing
30 ms timer, so a burst of appends and range changes produces one redraw.

The widget follows the data (x range = all points) until the x range is changed by anyone else
(pan, zoom, ``setXRange``); ``set_follow(True)`` or the plot's auto-range button brings it back.

A group of runs (``add_group``) is a curve of its mean plus a translucent band between its runs'
min and max: two more Series, drawn per pixel column like the curves (each column's lowest min
and highest max), with the area between them filled (one path a frame, built in numpy).
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np
import pyqtgraph as pg
from PySide6 import QtCore, QtGui, QtWidgets

from pilothouse.gui.curves import AlertMark, CurveSource
from pilothouse.gui.lod import Ema, Series
from pilothouse.gui.stored_series import StoredGroup
from pilothouse.gui.tiers import TierEma

from ..palette import PALETTE
from .line import Line
from .log_axis import ReadableAxis
from .theme import current, is_restyle, style_plot

FAINT_ALPHA = 70  # the raw curve behind a smoothed one
SUPERSEDED_ALPHA = 130  # a run's points a later attempt logged again: dotted, still readable
DIM_FACTOR = 0.22  # while one run is highlighted, the others keep this much of their opacity
EMPHASIS_WIDTH = 2.5
MARKER_COLOR = "#d62728"  # the ticks of non-finite values (a mark, not text)
MAX_ALERT_LINES = 50  # a flapping rule must not bury the curves: the newest are drawn
BAND_ALPHA = 60  # a group's min/max band behind its mean curve
DRAW_SHARE = 15  # behind, a chart's live redraws come this many times what the charts' frames cost apart
SLOWEST_MS = 500  # but at least twice a second
RECENT_S = 1.0  # a chart that drew a frame this recently counts in what the charts' frames cost


class FrameCosts:
    """What the latest frame (redraw and paint) of each chart drawing lately cost, summed: while the UI
    thread is behind, a chart spaces its live frames by what all of them cost, so ten charts draw their
    frames in DRAW_SHARE-th of the thread, as one would (each spaced by its own cost, ten charts of 16
    runs took 40-60 % of it, the largest share of the UI thread at 16 agents x 500 points/s)."""

    def __init__(self) -> None:
        self._last: dict[int, tuple[float, float]] = {}  # id(chart) -> (when, seconds)

    def note(self, chart: object, seconds: float) -> None:
        self._last[id(chart)] = (time.monotonic(), seconds)

    def total(self) -> float:
        since = time.monotonic() - RECENT_S
        self._last = {k: v for k, v in self._last.items() if v[0] >= since}
        return sum(cost for _, cost in self._last.values())


FRAMES = FrameCosts()  # the UI thread's charts (every chart lives on it)


@dataclass
class _Curve:
    series: CurveSource
    color: str
    raw: Line
    ema: Ema | TierEma | None = None
    label: str = ""  # what the legend and the readout call it (a run's name)
    dashed: bool = False
    faint: bool = False  # points a later attempt superseded: dotted, behind the run's curve
    shown: tuple[np.ndarray, np.ndarray] | None = None  # what ``raw`` was last given
    smooth: Line | None = None  # the smoothed copy, made once smoothing is on (``ChartWidget._style``)


@dataclass
class Band:
    """The area between two edges: a group's min and max over its runs, per x of its mean curve, and
    how many runs count there; or two of a run's reward quantiles (``pilothouse.gui._qt.distribution``)."""

    lo: CurveSource  # a group's Series; a quantile's source of any kind (``distribution``)
    hi: CurveSource
    count: np.ndarray
    lo_edge: Line
    hi_edge: Line
    fill: QtWidgets.QGraphicsPathItem


class ChartWidget(pg.PlotWidget):
    """Named curves, each backed by a Series; redraws only what the pixels can show."""

    def __init__(self, parent=None, redraw_ms: int = 30, axisItems: dict | None = None) -> None:
        super().__init__(parent, axisItems={"left": ReadableAxis("left"), **(axisItems or {})})
        self.curves: dict[str, _Curve] = {}
        self.bands: dict[str, Band] = {}  # the groups' bands, by the name of their mean curve
        self._smoothing = 0.0
        self._follow = True
        self._setting_range = False
        self._marker_x = np.empty(0)
        self.alert_lines: list[pg.InfiniteLine] = []
        self._alert_marks: list[AlertMark] = []
        self.emphasis: str | None = None  # the curve drawn on top, the others dimmed
        plot = self.getPlotItem()
        self._vb = plot.getViewBox()
        self._vb.disableAutoRange(pg.ViewBox.XAxis)  # x is ours: the curves only hold the visible part
        self._vb.setAutoVisible(y=True)
        self._timer = QtCore.QTimer(self)
        self._timer.setSingleShot(True)
        self._timer.setInterval(redraw_ms)
        self._timer.timeout.connect(self._timed_redraw)
        self._stale = False  # a redraw was skipped while the chart was out of sight
        self._redraw_ms = redraw_ms  # the shortest gap between live redraws (and a pan's or zoom's)
        self._cost = 0.0  # seconds the last live redraw took, until its paint adds its own (``FRAMES``)
        self._due = 0.0  # when the redraw timer was due to fire
        self._drawn = 0.0  # when the last timed redraw ended
        self._panned = 0.0  # when the last pan or zoom was (or is to be) redrawn
        self._busy = False  # it fired more than a gap late: the UI thread is behind
        self._vb.sigXRangeChanged.connect(self._range_changed)
        self._vb.sigYRangeChanged.connect(self._place_markers)
        self._vb.sigResized.connect(self.schedule_redraw)
        plot.autoBtn.clicked.connect(self._auto_clicked)
        self.markers = pg.ScatterPlotItem(symbol="|", size=10, pen=pg.mkPen(MARKER_COLOR, width=2),
                                          brush=None)
        plot.addItem(self.markers, ignoreBounds=True)
        self._vline = pg.InfiniteLine(angle=90, movable=False, pen=pg.mkPen("#888", style=QtCore.Qt.PenStyle.DashLine))
        self._vline.hide()  # until the pointer is over the plot: a dashed line at x=0 reads as data
        self.readout_label = pg.TextItem(anchor=(0, 0))
        self.readout_label.hide()  # with the line: a visible label moved itself on every range change (each frame)
        plot.addItem(self._vline, ignoreBounds=True)
        plot.addItem(self.readout_label, ignoreBounds=True)
        self.hidden_label = pg.TextItem(anchor=(1, 1))  # on log y: how many points ≤ 0 it cannot draw
        self.hidden_label.setParentItem(self._vb)  # in the view's pixels: a fixed corner, whatever the range
        self.hidden_label.hide()
        self.scene().sigMouseMoved.connect(self._mouse_moved)
        self._built = True
        self.restyle()

    def add_curve(self, name: str, color: str | None = None, label: str | None = None,
                  dashed: bool = False, faint: bool = False, series: CurveSource | None = None) -> CurveSource:
        """A new curve, empty (a ``Series`` that ``append`` fills) or drawn from ``series`` (points held
        in memory, or read from the store's or an agent's tiers), colored ``color`` (default: the next palette color), called ``label`` in the readout
        (default: its name); ``faint``: dotted and see-through."""
        if name in self.curves:
            raise ValueError(f"curve {name!r} exists")
        color = color or PALETTE[len(self.curves) % len(PALETTE)]
        raw = Line(name=label or name)
        self.addItem(raw)
        series = Series() if series is None else series
        curve = _Curve(series, color, raw, None if faint else _ema(series, self._smoothing), label or name,
                       dashed, faint)
        self.curves[name] = curve
        self._style(name, curve)
        return curve.series

    def add_group(self, name: str, color: str | None = None, label: str | None = None,
                  dashed: bool = False, series: CurveSource | None = None) -> None:
        """A new group: a mean curve ``name`` (smoothed, hidden and emphasized like a run's) and its
        min/max band; ``set_group`` gives it its points, or ``series`` (a ``StoredGroup``) draws it from
        its runs' tiers each frame."""
        self.add_curve(name, color, label, dashed, series=series)
        self.bands[name] = self.new_band(Series(), Series())
        self._style(name, self.curves[name])

    def new_band(self, lo: CurveSource, hi: CurveSource) -> Band:
        """A band's items on the plot: the area between ``lo`` and ``hi``, filled behind the curves
        (``_draw_band`` each frame), and their edges as invisible lines in the y range."""
        edges = [Line(pen=pg.mkPen(None)) for _ in range(2)]
        for edge in edges:
            self.addItem(edge)  # invisible lines, but in the y range: it includes the band
        fill = QtWidgets.QGraphicsPathItem()
        fill.setPen(QtGui.QPen(QtCore.Qt.PenStyle.NoPen))
        fill.setZValue(-1)  # behind the curves
        self.addItem(fill, ignoreBounds=True)
        return Band(lo, hi, np.empty(0, np.int64), *edges, fill)

    def set_group(self, name: str, mean: Series, lo: np.ndarray, hi: np.ndarray, count: np.ndarray) -> None:
        """Replace a group's points with ``pilothouse.gui.groups.band``'s (xs, mean, lo, hi, count), its
        mean a Series of (xs, mean) (the Charts model's curve): a band is recomputed from its runs, not
        appended to. Costs O(points) (three pyramids and the EMA when smoothing), so call it on a
        timer, not on every append. xs must increase."""
        xs = mean.x
        lo, hi = np.asarray(lo, np.float64), np.asarray(hi, np.float64)
        if not len(xs) == len(lo) == len(hi) == len(count):
            raise ValueError("a group's mean, lo, hi and count differ in length")
        if (np.diff(xs) <= 0).any():  # the readout finds a point's count by its x
            raise ValueError("a group's xs must increase")
        gap = ~(np.isfinite(lo) & np.isfinite(hi))  # one gap for both edges: the fill pairs their pieces
        curve, band = self.curves[name], self.bands[name]
        curve.series = mean
        curve.ema = _ema(mean, self._smoothing)
        self._style(name, curve)
        band.lo, band.hi = Series.of(xs, np.where(gap, np.nan, lo)), Series.of(xs, np.where(gap, np.nan, hi))
        band.count = np.asarray(count)
        self.schedule_redraw()

    def set_emphasis(self, name: str | None) -> None:
        """Draw curve ``name`` wide and on top and dim the others (a hovered legend entry); None: all alike."""
        emphasis = name if name in self.curves else None
        if emphasis == self.emphasis:
            return  # every curve is styled for it (a new curve styles itself): adding runs stays linear
        self.emphasis = emphasis
        for key, curve in self.curves.items():
            self._style(key, curve)

    def set_hidden(self, name: str, hidden: bool) -> None:
        """Hide or show a curve (and its smoothed copy); the y range follows the visible ones."""
        curve = self.curves[name]
        curve.raw.setVisible(not hidden)
        if curve.smooth is not None:
            curve.smooth.setVisible(not hidden and curve.ema is not None)
        if name in self.bands:
            band = self.bands[name]
            for item in (band.lo_edge, band.hi_edge, band.fill):
                item.setVisible(not hidden)
        self._vb.updateAutoRange()
        self.schedule_redraw()  # what it hid on a log axis no longer counts

    def hidden(self, name: str) -> bool:
        return not self.curves[name].raw.isVisible()

    def restyle(self) -> None:
        """Colors of the current theme: background, axes, title, readout, alert labels."""
        style_plot(self)
        self.readout_label.setColor(current().chart_fg)
        self.hidden_label.setColor(current().dim_text)
        self.set_alert_marks(self._alert_marks)

    def changeEvent(self, event: QtCore.QEvent) -> None:
        if is_restyle(event) and getattr(self, "_built", False) and self.getPlotItem() is not None:
            self.restyle()  # not while pyqtgraph builds or tears the plot down
        super().changeEvent(event)

    def append(self, name: str, xs: np.ndarray, ys: np.ndarray) -> None:
        """Add points to a curve held in memory; the redraw comes from the coalescing timer."""
        series = self.curves[name].series
        if not isinstance(series, Series):
            raise TypeError(f"curve {name!r} is read from tiers: its points are in the store")
        series.append(xs, ys)
        self.schedule_redraw()

    def set_alert_marks(self, marks: list[AlertMark]) -> None:
        """Replace the marks' lines (alerts, resumes, applied commands: each its color and dash; its
        tooltip on hover).  They are a handful of static items (not redrawn per frame) and do not
        count in the x range the chart follows."""
        plot = self.getPlotItem()
        for line in self.alert_lines:
            plot.removeItem(line)
        self.alert_lines = []
        self._alert_marks = list(marks)
        theme = current()
        for i, mark in enumerate(marks[-MAX_ALERT_LINES:]):
            color = theme.status_paused if mark.steering else \
                theme.alert_text if mark.firing and not mark.resume else theme.dim_text  # text on the chart
            style = QtCore.Qt.PenStyle.DashDotLine if mark.resume else QtCore.Qt.PenStyle.DashLine if mark.steering \
                else QtCore.Qt.PenStyle.SolidLine if mark.firing else QtCore.Qt.PenStyle.DotLine
            line = pg.InfiniteLine(pos=mark.x, angle=90, movable=False, pen=pg.mkPen(color, width=1.5, style=style),
                                   label=mark.label.replace("{", "{{").replace("}", "}}"),  # a format string
                                   labelOpts={"position": 0.92 - 0.08 * (i % 4), "color": color})  # staggered
            line.setToolTip(mark.tooltip)
            plot.addItem(line, ignoreBounds=True)
            self.alert_lines.append(line)

    def schedule_redraw(self, *_: object) -> None:
        """Redraw soon.  While the UI thread is behind (the last redraw came more than a gap late),
        live points wait DRAW_SHARE times what the charts' latest frames took to redraw and paint
        (``FrameCosts``), up to SLOWEST_MS: charts of many runs on a busy thread draw fewer frames rather
        than keep batches waiting behind them; on time, every gap is the shortest (one run's chart keeps
        its 30 ms frames)."""
        if not self._timer.isActive():
            gap = max(self._redraw_ms, min(SLOWEST_MS, round(FRAMES.total() * 1000 * DRAW_SHARE))) if self._busy \
                else self._redraw_ms
            self._due = time.perf_counter() + gap / 1000
            self._timer.start(gap)

    def redraw_soon(self) -> None:
        """A pan or zoom, or the answer to one, whatever live frames cost: redrawn now when the last pan's
        redraw is the shortest gap old, else that gap after it (a drag draws one frame a gap).  Not in the
        event loop's next turn, where a batch and other charts' paints queued before it came first, nor a
        gap after the last live frame (a pan waited for its paint 95-128 ms p50 at 16 agents x 500
        points/s, bench_load.py --app)."""
        now = time.perf_counter()
        gap = max(0, round(self._redraw_ms - (now - self._panned) * 1000))
        if gap == 0:
            self._timer.stop()
            self._due = self._panned = now  # on time: not a sign of a busy thread
            self._timed_redraw()
        elif not self._timer.isActive() or self._timer.remainingTime() > gap:
            self._panned = now + gap / 1000
            self._timer.start(gap)

    def _timed_redraw(self) -> None:
        """Redraw, unless the user cannot see the chart now (its window is shown, the chart is on
        another tab or scrolled out of the grid's view): with 10 charts of 64 runs each, drawing the
        hidden ones was most of the UI thread's time.  It redraws when it is painted again."""
        if self._out_of_sight():
            self._stale = True
            return
        started = time.perf_counter()
        self._busy = started - self._due > self._redraw_ms / 1000  # the UI thread came late
        self.redraw()
        self._drawn = time.perf_counter()
        self._cost = self._drawn - started  # and its paint, added when it comes

    def _out_of_sight(self) -> bool:
        """Whether the chart's window is shown but the chart is not: hidden (another tab) or outside
        the view of the scroll area holding it (the charts' grid).  A window not shown (tests, tools)
        draws as always."""
        if not self.window().isVisible():
            return False
        if not self.isVisible():
            return True
        area = self.parentWidget()
        while area is not None and not isinstance(area, QtWidgets.QAbstractScrollArea):
            area = area.parentWidget()
        if area is None:
            return False
        view = area.viewport()
        return not view.rect().intersects(QtCore.QRect(self.mapTo(view, QtCore.QPoint(0, 0)), self.size()))

    def paintEvent(self, event: QtGui.QPaintEvent) -> None:
        if self._stale:  # back in sight (scrolled to, its tab shown): the points it skipped, next frame
            self._stale = False
            self.schedule_redraw()
        started = time.perf_counter()
        super().paintEvent(event)
        FRAMES.note(self, self._cost + time.perf_counter() - started)
        self._cost = 0.0  # a paint with no redraw before it (a hover, an expose) costs only itself

    def flush(self) -> None:
        """Redraw now if a redraw is pending (tests and benchmarks, which cannot wait 30 ms), and fit
        the y range to it as the next paint would: pyqtgraph auto-ranges lazily, before a paint, so
        without this the range read after a flush is the last painted one's."""
        if self._timer.isActive() or self._stale:  # a redraw skipped out of sight is pending too
            self._timer.stop()
            self._stale = False
            self.redraw()
        self._vb.prepareForPaint()

    def set_smoothing(self, alpha: float) -> None:
        """TensorBoard-style EMA weight in [0, 1); 0 turns smoothing off. The smoothed copy of an
        in-memory curve is a second Series, so smoothing doubles its memory while it is on; a curve
        read from tiers is smoothed over its columns' means each frame (``TierEma``)."""
        self._smoothing = alpha
        for name, curve in self.curves.items():
            curve.ema = None if curve.faint else _ema(curve.series, alpha)  # faint: as logged
            self._style(name, curve)
        self.schedule_redraw()

    def set_log_y(self, on: bool) -> None:
        """Log y axis; pyqtgraph takes log10 of what view() returned (min/max survive log)."""
        self.getPlotItem().setLogMode(x=False, y=on)
        self.schedule_redraw()

    def set_follow(self, on: bool) -> None:
        """Follow the data (x range = every point) or keep the user's pan/zoom."""
        self._follow = on
        if on:
            self.schedule_redraw()

    def _style(self, name: str, curve: _Curve) -> None:
        """Pens from the curve's state: faint raw data behind a smoothed copy, dimmed or wide
        while a curve is emphasized, dashed for a run past the palette's colors."""
        dim = DIM_FACTOR if self.emphasis is not None and name != self.emphasis else 1.0
        wide = name == self.emphasis
        style = QtCore.Qt.PenStyle.DotLine if curve.faint else \
            QtCore.Qt.PenStyle.DashLine if curve.dashed else QtCore.Qt.PenStyle.SolidLine
        raw = pg.mkColor(curve.color)
        raw.setAlpha(round((SUPERSEDED_ALPHA if curve.faint else FAINT_ALPHA if curve.ema is not None else 255) * dim))
        smooth = pg.mkColor(curve.color)
        smooth.setAlpha(round(255 * dim))
        curve.raw.setPen(pg.mkPen(raw, width=EMPHASIS_WIDTH if wide and curve.ema is None else 1, style=style))
        curve.raw.setZValue(1 if wide else 0)
        if curve.smooth is None and curve.ema is not None:  # a second item per curve only while smoothing: making
            curve.smooth = Line()  # both cost 1.4 ms a curve, 440 ms for 32 runs' 10 charts
            self.addItem(curve.smooth)
        if curve.smooth is not None:
            curve.smooth.setPen(pg.mkPen(smooth, width=EMPHASIS_WIDTH if wide else 1.5, style=style))
            curve.smooth.setZValue(1 if wide else 0)
            curve.smooth.setVisible(curve.ema is not None and curve.raw.isVisible())
        if name in self.bands:
            fill = pg.mkColor(curve.color)
            fill.setAlpha(round(BAND_ALPHA * dim))
            self.bands[name].fill.setBrush(fill)

    def _range_changed(self, *_: object) -> None:
        if not self._setting_range:  # a pan, zoom or setXRange: keep that range
            self._follow = False
            self.redraw_soon()

    def _auto_clicked(self, *_: object) -> None:
        self._vb.disableAutoRange(pg.ViewBox.XAxis)  # the button turned it on; x is ours
        self.set_follow(True)

    def redraw(self) -> None:
        """Give every curve the points for the current x range and pixel width."""
        if self._follow:
            self._fit_x()
        (x0, x1), _ = self._vb.viewRange()
        pixels = max(int(self._vb.width() * self.devicePixelRatioF()), 1)  # device pixels
        bad = []
        for curve in self.curves.values():
            xs, ys = curve.series.view(x0, x1, pixels)
            # the very arrays of last time (a RemoteSeries awaiting its answer): the curve stands, the view moves
            if curve.shown is None or xs is not curve.shown[0] or ys is not curve.shown[1]:
                curve.raw.setData(xs, ys)
                curve.shown = (xs, ys)
            if curve.ema is not None:
                curve.smooth.setData(*curve.ema.update().view(x0, x1, pixels))
            bad.append(curve.series.nonfinite(x0, x1))
        for band in self.drawn_bands():
            self._draw_band(band, x0, x1, pixels)
        self._show_hidden(x0, x1)
        marks = np.concatenate(bad) if bad else np.empty(0)
        if len(marks) and x1 > x0:  # one tick per pixel column is enough
            column = np.floor((marks - x0) / (x1 - x0) * pixels)
            marks = marks[np.unique(column, return_index=True)[1]]
        self._marker_x = marks
        self._place_markers()

    def hidden_points(self, x0: float, x1: float) -> tuple[int, bool]:
        """Points of the shown curves in [x0, x1] that a log y axis cannot draw (≤ 0), and whether that
        is exact: a curve held in memory counts its points; one read from tiers only what its view
        shows (each pixel column's min and max), so its count is a lower bound."""
        n, exact = 0, True
        for curve in self.curves.values():
            if not curve.raw.isVisible():
                continue
            series = curve.series
            if isinstance(series, Series):
                a = np.searchsorted(series.x, min(x0, x1), "left")
                ys = series.y[a:np.searchsorted(series.x, max(x0, x1), "right")]
            else:
                ys = curve.shown[1] if curve.shown is not None else np.empty(0)
            with np.errstate(invalid="ignore"):
                hidden = int(np.count_nonzero(ys <= 0))
            n += hidden
            exact = exact and (isinstance(series, Series) or not hidden)  # a column's min > 0: none there
        return n, exact

    def _show_hidden(self, x0: float, x1: float) -> None:
        """On a log y axis, say how many points it leaves out: values ≤ 0 must not vanish silently."""
        log_y = any(c.raw.log_y for c in self.curves.values())  # the plot's, whoever set it
        n, exact = self.hidden_points(x0, x1) if log_y else (0, True)
        if not n:
            self.hidden_label.hide()
            return
        self.hidden_label.setText(f"{'' if exact else 'at least '}{n} point{'' if n == 1 else 's'} ≤ 0 not shown "
                                  "(log y)")
        self.hidden_label.setPos(self._vb.width() - 4, self._vb.height() - 4)
        self.hidden_label.show()

    def drawn_bands(self) -> Iterator[Band]:
        """The bands a frame draws: each group's (one read from its runs' tiers with the frame just read)."""
        for name, band in self.bands.items():
            group = self.curves[name].series
            if isinstance(group, StoredGroup):
                band.lo, band.hi, band.count = group.edges()
            yield band

    def _draw_band(self, band: Band, x0: float, x1: float, pixels: int) -> None:
        """The band's edges for this range: per pixel column the lowest min and the highest max,
        with the same gaps on both (on a log axis also where an edge is not positive)."""
        xs, lo = _edge(*band.lo.view(x0, x1, pixels), np.fmin)
        hi_xs, hi = _edge(*band.hi.view(x0, x1, pixels), np.fmax)
        if len(hi_xs) != len(xs) or (hi_xs != xs).any():  # two metrics' edges, one of them a point behind
            hi = np.interp(xs, hi_xs, hi, left=np.nan, right=np.nan) if len(hi_xs) else np.full(len(xs), np.nan)
        if band.lo_edge.log_y:  # the plot's log y, whoever set it
            with np.errstate(invalid="ignore"):
                gap = (lo <= 0) | (hi <= 0)
            lo, hi = np.where(gap, np.nan, lo), np.where(gap, np.nan, hi)
        band.lo_edge.setData(xs, lo)
        band.hi_edge.setData(xs, hi)
        if band.lo_edge.log_y:
            lo, hi = np.log10(lo), np.log10(hi)  # where the edges are drawn (not positive: a gap already)
        band.fill.setPath(_band_path(xs, lo, hi))

    def _fit_x(self) -> None:
        ranges = [r for c in self.curves.values() if (r := c.series.x_range())]
        if not ranges:
            return
        lo, hi = min(r[0] for r in ranges), max(r[1] for r in ranges)
        if hi == lo:
            lo, hi = lo - 0.5, hi + 0.5
        self._setting_range = True
        try:
            self._vb.setXRange(lo, hi, padding=0.0)
        finally:
            self._setting_range = False

    def _place_markers(self, *_: object) -> None:
        """Non-finite values have no y: tick them along the bottom of the view.  None, as in most frames:
        nothing to set (an empty scatter item set anew each frame and y range change took 28 of the UI
        thread's 651 py-spy samples at 4 agents x 2,000 points/s)."""
        if not len(self._marker_x) and not len(self.markers.data):
            return
        _, (y0, y1) = self._vb.viewRange()
        y = np.full(len(self._marker_x), y0 + 0.02 * (y1 - y0))
        self.markers.setData(self._marker_x, y)

    def readout(self, x: float) -> str:
        """Crosshair text: x and each curve's value at its nearest point (a group's: its mean, then
        its runs' min … max there and how many runs have a value)."""
        lines = [f"x = {x:.6g}"]
        for name, curve in self.curves.items():
            point = curve.series.nearest(x) if curve.raw.isVisible() else None
            if point is None:
                continue
            spread = self.spread(name, point[0])
            lines.append(f"{curve.label}: {point[1]:.6g}{spread}  (x {point[0]:.6g})")
        return "\n".join(lines)

    def spread(self, name: str, x: float) -> str:
        """What the readout adds after a curve's value at its point x: for a group its runs' min, max
        and count there."""
        if name not in self.bands:
            return ""
        band = self.bands[name]
        i = int(np.searchsorted(band.lo.x, x))
        n = int(band.count[i])
        return f" ({band.lo.y[i]:.6g} … {band.hi.y[i]:.6g}, {n} run{'' if n == 1 else 's'})"

    def _mouse_moved(self, pos: QtCore.QPointF) -> None:
        if not self._vb.sceneBoundingRect().contains(pos):
            return
        x = self._vb.mapSceneToView(pos).x()
        self._vline.setPos(x)
        self._vline.show()
        self.readout_label.setText(self.readout(x))
        (x0, _), (_, y1) = self._vb.viewRange()
        self.readout_label.setPos(x0, y1)
        self.readout_label.show()

    def leaveEvent(self, event: QtCore.QEvent) -> None:  # noqa: N802 (Qt's name)
        """The pointer left the chart: its line and readout go with it (left behind, they read as data)."""
        self._vline.hide()
        self.readout_label.hide()
        super().leaveEvent(event)


def _ema(series: CurveSource, alpha: float) -> Ema | TierEma | None:
    """The smoothed copy of a curve while smoothing is on."""
    if alpha <= 0:
        return None
    return Ema(series, alpha) if isinstance(series, Series) else TierEma(series, alpha)


def _band_path(xs: np.ndarray, lo: np.ndarray, hi: np.ndarray) -> QtGui.QPainterPath:
    """The area between a band's edges as one path: a closed polygon (along the low edge, back along
    the high one) per stretch where both are finite, made by ``arrayToQPath`` in one call
    (pyqtgraph's ``FillBetweenItem`` joined the edges' paths in Python: a millisecond a chart a frame)."""
    finite = np.isfinite(lo) & np.isfinite(hi)
    xs_parts, ys_parts, joins = [], [], []
    for part in np.split(np.arange(len(xs)), np.flatnonzero(np.diff(finite.astype(np.int8))) + 1):
        if len(part) and finite[part[0]]:
            xs_parts += [xs[part], xs[part][::-1]]
            ys_parts += [lo[part], hi[part][::-1]]
            join = np.ones(2 * len(part), bool)
            join[-1] = False  # the next stretch is a polygon of its own
            joins.append(join)
    if not joins:
        return QtGui.QPainterPath()
    return pg.arrayToQPath(np.concatenate(xs_parts), np.concatenate(ys_parts), connect=np.concatenate(joins))


def _edge(xs: np.ndarray, ys: np.ndarray, reduce: np.ufunc) -> tuple[np.ndarray, np.ndarray]:
    """One point per x of a ``Series.view()``: its column's lowest (``np.fmin``) or highest
    (``np.fmax``) value, so a band edge does not zigzag inside a pixel column; a NaN after it
    where the column holds one keeps the gap."""
    if not len(xs):
        return xs, ys
    first = np.flatnonzero(np.append(True, xs[1:] != xs[:-1]))
    edge = reduce.reduceat(ys, first)
    gap = np.logical_or.reduceat(np.isnan(ys), first)
    points = np.column_stack([edge, np.full(len(edge), np.nan)])
    keep = np.column_stack([np.ones(len(edge), bool), gap])
    return np.repeat(xs[first], 1 + gap), points[keep]
