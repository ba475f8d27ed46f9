"""The y axis of every chart: pyqtgraph's on a linear scale, ``pilothouse.gui.log_ticks`` on a log
scale (pyqtgraph's own log ticks pile 0.9, 0.8, 0.7 ... into a smear and leave a narrow range
with one label or none)."""

from __future__ import annotations

import pyqtgraph as pg

from ..log_ticks import log_ticks

_MINOR = 0.5  # the spacing reported for the unlabelled level (pyqtgraph only passes it back to us)


class ReadableAxis(pg.AxisItem):
    def __init__(self, orientation: str = "left", **kwargs: object) -> None:
        super().__init__(orientation, **kwargs)
        # values as logged (0.6, not "600" under a "(x0.001)" title): a scale factor in the title was
        # easy to miss and plain wrong on a log axis, whose labels here are the values themselves
        self.enableAutoSIPrefix(False)
        self._labels: dict[float, str] = {}

    def tickValues(self, minVal: float, maxVal: float, size: float) -> list:  # noqa: N802, N803 (Qt's names)
        if not self.logMode:
            return super().tickValues(minVal, maxVal, size)
        ticks = log_ticks(minVal, maxVal, size)
        self._labels = dict(zip(ticks.major, ticks.labels))
        return [(1.0, ticks.major), (_MINOR, ticks.minor)]

    def tickStrings(self, values: list[float], scale: float, spacing: float) -> list[str]:  # noqa: N802
        if not self.logMode:
            return super().tickStrings(values, scale, spacing)
        return [self._labels.get(v, "") if spacing != _MINOR else "" for v in values]
