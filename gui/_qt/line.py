"""A chart's line: pyqtgraph's ``PlotCurveItem``, with the plot's log y done here.

Why not ``PlotDataItem``: it makes a ``ScatterPlotItem`` (symbols) beside every curve and passes
each frame's points through both; a window charting 128 runs x 10 metrics made 1,280 of them, the
UI thread's largest cost while a 16-agent job's first points came in (``bench_load.py --app``), at
0.7 ms a curve where a ``PlotCurveItem`` takes 0.2 ms.  A line needs only the curve: the plot's
``setLogMode`` reaches it here, and it draws log10 of the values it is given (a value ≤ 0 is a
gap, as a NaN is), so ``getData`` returns what is drawn, as ``PlotDataItem``'s does.
"""

from __future__ import annotations

import math

import numpy as np
import pyqtgraph as pg
from PySide6 import QtCore


class Line(pg.PlotCurveItem):
    log_y = False  # the plot's log y (``PlotItem.setLogMode`` calls ``setLogMode`` on each of its items)
    _values: tuple[np.ndarray, np.ndarray] = (np.empty(0), np.empty(0))  # as given, before any log

    def __init__(self, name: str | None = None, pen: object = "w") -> None:
        super().__init__(connect="finite", name=name, pen=pen)
        self._bounds: dict[tuple, tuple] = {}  # dataBounds' answers since the data or pen changed

    def dataBounds(self, ax: int, frac: float = 1.0, orthoRange: object = None) -> tuple:  # noqa: N802, N803
        """pyqtgraph's, kept per question until the data or pen changes: a frame asks several (the
        bounding rect's x and y, the y range over the visible x) and its cache keeps one answer per
        axis, dropped on every view change too, so each frame scanned every curve's points four times."""
        key = (ax, frac, None if orthoRange is None else (orthoRange[0], orthoRange[1]))
        got = self._bounds.get(key)
        if got is None:
            got = self._bounds[key] = self._data_bounds(ax, frac, orthoRange)
        return got

    def _data_bounds(self, ax: int, frac: float, ortho: object) -> tuple:
        """pyqtgraph's answer for a line's usual case (the whole range, no fill, a cosmetic pen) with
        ``fmin``/``fmax``, which skip NaNs without the warnings filter that ``nanmin``/``nanmax`` need
        there: 2 µs where it took 10, and a live frame asks every redrawn curve two or three times."""
        pens = [p for p in (self.opts["pen"], self.opts["shadowPen"]) if p is not None]
        if frac < 1.0 or self.opts.get("stepMode") or self.opts["fillLevel"] not in (None, "enclosed") or any(
                not p.isCosmetic() and p.style() != QtCore.Qt.PenStyle.NoPen for p in pens):
            return super().dataBounds(ax, frac, ortho)
        x, y = self.getData()
        if x is None or len(x) == 0:
            return (None, None)
        d, other = (x, y) if ax == 0 else (y, x)
        if ortho is not None:
            d = d[(other >= ortho[0]) & (other <= ortho[1])]
            if len(d) == 0:
                return (None, None)
        low, high = float(np.fmin.reduce(d)), float(np.fmax.reduce(d))
        if math.isinf(low) or math.isinf(high):
            d = d[np.isfinite(d)]
            if len(d) == 0:
                return (None, None)
            low, high = float(d.min()), float(d.max())
        return low, high

    def invalidateBounds(self) -> None:  # noqa: N802 (data, pen, fill: pyqtgraph calls it on each)
        self._bounds = {}
        super().invalidateBounds()

    def viewTransformChanged(self) -> None:  # noqa: N802
        """The view moved or zoomed: the data's bounds hold, only the bounding rect's pixel padding changes."""
        self._boundingRect = None
        self.prepareGeometryChange()

    def setLogMode(self, x: bool, y: bool) -> None:  # noqa: N802 (pyqtgraph's name)
        if bool(y) != self.log_y:
            self.log_y = bool(y)
            self.setData(*self._values)

    def updateData(self, *args: object, **kwargs: object) -> None:  # noqa: N802
        if len(args) == 2:
            (kwargs["x"], kwargs["y"]), args = args, ()
        if kwargs.get("y") is not None:
            x = kwargs.get("x")
            self._values = (np.arange(len(kwargs["y"]), dtype=float) if x is None else x, kwargs["y"])
            if self.log_y:
                y = np.asarray(kwargs["y"], np.float64)
                with np.errstate(divide="ignore", invalid="ignore"):
                    kwargs["y"] = np.where(y > 0, np.log10(y), np.nan)
        super().updateData(*args, **kwargs)
