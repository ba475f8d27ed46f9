"""A chart's line answers the view's questions about its data's bounds exactly as pyqtgraph's curve
does (it asks two or three of them of every redrawn curve each live frame, so the line answers faster)."""

from __future__ import annotations

import os

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")

import numpy as np  # noqa: E402
import pyqtgraph as pg  # noqa: E402
import pytest  # noqa: E402

from pilothouse.gui._qt.line import Line  # noqa: E402

X = np.arange(10.0)
CASES = {
    "plain": (X, np.sin(X)),
    "nan gaps": (X, np.where(X % 3 == 0, np.nan, X * 2)),
    "infinities": (X, np.where(X == 4, np.inf, np.where(X == 7, -np.inf, X))),
    "all nan": (X, np.full(10, np.nan)),
    "all infinite": (X, np.full(10, np.inf)),
    "one point": (np.array([3.0]), np.array([-1.5])),
    "x with nan": (np.where(X == 0, np.nan, X), X),
}
PENS = {"cosmetic": pg.mkPen("w"), "thick, not cosmetic": pg.mkPen("w", width=3, cosmetic=False)}


@pytest.mark.parametrize("pen", PENS)
@pytest.mark.parametrize("case", CASES)
def test_a_lines_data_bounds_are_pyqtgraphs(qapp, case, pen):
    line = Line(pen=PENS[pen])
    line.setData(*CASES[case])
    for log_y in (False, True):
        line.setLogMode(False, log_y)
        for ax in (0, 1):
            for ortho in (None, (2.0, 5.0), (100.0, 200.0), (-2.0, 0.5)):
                line.invalidateBounds()
                expected = pg.PlotCurveItem.dataBounds(line, ax, 1.0, ortho)
                line.invalidateBounds()
                np.testing.assert_equal(line.dataBounds(ax, 1.0, ortho), expected, err_msg=f"{ax} {ortho} {log_y}")
