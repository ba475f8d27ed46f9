"""DistributionChart: each run's reward quantiles over steps as nested bands, TensorBoard's
"distributions": min–max light, p10–p90 darker, the median (p50) a line.

The median is an ordinary curve of the chart, named as the run's curve is on every chart, so the
legend's hide and highlight, smoothing, the x range it follows and the readout treat it as any
run's; the four edges are the bands' (``chart.Band``), drawn per pixel column each frame like a
group's, from whatever source the Charts model gave them (memory, the store's or an agent's tiers).
The fill is one path a band a frame (``chart._band_path``), not pyqtgraph's ``FillBetweenItem``,
which joins its edges' paths in Python on every change.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field

import pyqtgraph as pg
from PySide6 import QtGui

from pilothouse.gui.curves import CurveSource
from pilothouse.gui.distribution import BANDS, LINE

from .chart import DIM_FACTOR, Band, ChartWidget

OUTER_ALPHA = 40  # min–max
INNER_ALPHA = 85  # p10–p90
MEDIAN_WIDTH = 2.0  # the median drawn over its own color's bands
FAINT_FACTOR = 0.4  # a run's superseded steps: their bands fainter still


@dataclass
class _Quantiles:
    """One run's quantile curves (its superseded ones are another run's, faint) and the bands made
    of them so far (a band once both its edges arrived, in whatever order the model adds them)."""

    color: str
    faint: bool
    sources: dict[str, CurveSource] = field(default_factory=dict)
    bands: dict[tuple[str, str], Band] = field(default_factory=dict)


class DistributionChart(ChartWidget):
    """A ChartWidget whose runs are quantile bands (see the module docstring)."""

    def __init__(self, parent=None, redraw_ms: int = 30, axisItems: dict | None = None) -> None:
        super().__init__(parent, redraw_ms, axisItems)
        self.quantiles: dict[str, _Quantiles] = {}  # by the run's curve name (that of its median)

    def add_quantile(self, name: str, part: str, series: CurveSource, color: str, label: str,
                     dashed: bool = False, faint: bool = False) -> None:
        """One quantile of a run's curve ``name`` (``min``, ``p10``, ``p50``, ``p90`` or ``max``): the
        median becomes the curve, a band is made once both its edges are here."""
        q = self.quantiles.setdefault(name, _Quantiles(color, faint))
        q.sources[part] = series
        if part == LINE:
            self.add_curve(name, color, f"{label} {LINE}", dashed, faint, series)
        hidden = name in self.curves and self.hidden(name)
        for lo, hi in BANDS:
            if (lo, hi) not in q.bands and lo in q.sources and hi in q.sources:
                band = q.bands[(lo, hi)] = self.new_band(q.sources[lo], q.sources[hi])
                for item in (band.lo_edge, band.hi_edge, band.fill):
                    item.setVisible(not hidden)
        self._fill(name)
        self.schedule_redraw()

    def set_hidden(self, name: str, hidden: bool) -> None:
        """A run hidden in the legend: its bands with its median."""
        for band in self.quantiles[name].bands.values() if name in self.quantiles else ():
            for item in (band.lo_edge, band.hi_edge, band.fill):
                item.setVisible(not hidden)
        super().set_hidden(name, hidden)

    def spread(self, name: str, x: float) -> str:
        """The readout of a run's median adds its p10–p90 and min–max at the nearest step."""
        q = self.quantiles.get(name)
        if q is None:
            return super().spread(name, x)
        parts = []
        for lo, hi in reversed(BANDS):
            ends = [q.sources[p].nearest(x) if p in q.sources else None for p in (lo, hi)]
            if ends[0] is not None and ends[1] is not None:
                parts.append(f"{lo}–{hi} {ends[0][1]:.6g} … {ends[1][1]:.6g}")
        return f" ({'; '.join(parts)})" if parts else ""

    def drawn_bands(self) -> Iterator[Band]:
        yield from super().drawn_bands()
        for q in self.quantiles.values():
            yield from q.bands.values()

    def _style(self, name: str, curve) -> None:
        super()._style(name, curve)
        if curve.ema is None:  # unsmoothed: the median itself is the line, wider to stand out of its bands
            pen = QtGui.QPen(curve.raw.opts["pen"])
            pen.setWidthF(max(pen.widthF(), MEDIAN_WIDTH))
            curve.raw.setPen(pen)
        self._fill(name)

    def _fill(self, name: str) -> None:
        """The bands' brushes in the run's color: dimmed while another run is highlighted."""
        q = self.quantiles.get(name)
        if q is None:
            return
        dim = (DIM_FACTOR if self.emphasis is not None and name != self.emphasis else 1.0) * \
            (FAINT_FACTOR if q.faint else 1.0)
        for (lo, _), band in q.bands.items():
            color = pg.mkColor(q.color)
            color.setAlpha(round((OUTER_ALPHA if lo == BANDS[0][0] else INNER_ALPHA) * dim))
            band.fill.setBrush(color)
