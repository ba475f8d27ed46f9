"""pilothouse.gui._qt.chart: the ChartWidget draws decimated curves that keep spikes, gaps and markers."""

from __future__ import annotations

import os

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")

import numpy as np
import pytest

pytest.importorskip("pytestqt")
pg = pytest.importorskip("pyqtgraph")

from pilothouse.gui._qt.chart import DIM_FACTOR, EMPHASIS_WIDTH, ChartWidget  # noqa: E402
from pilothouse.gui.palette import PALETTE  # noqa: E402

N = 200_000


@pytest.fixture
def chart(qtbot):
    widget = ChartWidget()
    qtbot.addWidget(widget)
    widget.resize(600, 400)
    widget.show()
    qtbot.waitExposed(widget)
    x = np.arange(N, dtype=float)
    y = np.sin(x / 5000)
    y[123_457] = 50.0
    y[[1000, 150_000]] = [np.nan, np.inf]
    widget.add_curve("a")
    widget.add_curve("b", label="run b")
    for lo in range(0, N, 20_000):  # many appends, one coalesced redraw
        widget.append("a", x[lo:lo + 20_000], y[lo:lo + 20_000])
        widget.append("b", x[lo:lo + 20_000], -y[lo:lo + 20_000])
    qtbot.waitUntil(lambda: widget.curves["a"].raw.xData is not None, timeout=2000)
    return widget


def drawn(item):
    xs, ys = item.getData()
    return np.asarray(xs), np.asarray(ys)


def test_curves_hold_the_spike_with_few_points_per_pixel(chart):
    xs, ys = drawn(chart.curves["a"].raw)
    pixels = chart.getPlotItem().getViewBox().width()
    assert len(xs) <= 4 * pixels
    assert np.nanmax(ys) == 50.0
    assert xs.min() == 0 and xs.max() >= N - 2 * N / pixels  # follows the data: all of it in view
    _, ys_b = drawn(chart.curves["b"].raw)
    assert np.nanmin(ys_b) == -50.0


def test_zooming_in_redraws_from_the_series(chart, qtbot):
    chart.getPlotItem().getViewBox().setXRange(123_000, 124_000, padding=0)
    qtbot.waitUntil(lambda: drawn(chart.curves["a"].raw)[0].min() >= 122_000, timeout=2000)
    xs, ys = drawn(chart.curves["a"].raw)
    assert np.nanmax(ys) == 50.0 and xs.max() <= 124_100


def test_nonfinite_values_are_gaps_with_markers(chart):
    _, ys = drawn(chart.curves["a"].raw)
    assert np.isnan(ys).sum() >= 2
    marks = chart.markers.getData()[0]
    assert any(abs(m - 1000) < N / 100 for m in marks) and any(abs(m - 150_000) < N / 100 for m in marks)


def test_smoothing_and_log_y_toggle(chart, qtbot):
    chart.set_smoothing(0.9)
    chart.flush()
    smooth = chart.curves["a"].smooth
    assert smooth.isVisible() and len(drawn(smooth)[0]) > 0
    assert chart.curves["a"].raw.opts["pen"].color().alpha() < 255
    chart.set_smoothing(0.0)
    chart.flush()
    assert not smooth.isVisible() and chart.curves["a"].raw.opts["pen"].color().alpha() == 255
    chart.set_log_y(True)
    chart.flush()
    assert chart.getPlotItem().ctrl.logYCheck.isChecked()
    _, ys = chart.curves["a"].raw.getData()  # display data: log10 of the values
    assert np.isclose(np.nanmax(ys), np.log10(50.0))
    chart.set_log_y(False)


def test_crosshair_readout_names_curves_by_label_in_palette_order(chart):
    text = chart.readout(123_457.2)
    assert "a: 50" in text and "run b: -50" in text
    assert [c.color for c in chart.curves.values()] == list(PALETTE[:2])


def test_emphasis_dims_the_others_and_hidden_curves_leave_the_readout(chart):
    def pen(name):
        return chart.curves[name].raw.opts["pen"]

    chart.set_emphasis("b")
    assert pen("b").widthF() == EMPHASIS_WIDTH and pen("b").color().alpha() == 255
    assert pen("a").color().alpha() == round(255 * DIM_FACTOR) and chart.curves["b"].raw.zValue() > 0
    chart.set_smoothing(0.5)  # restyling keeps the emphasis
    assert chart.curves["b"].smooth.opts["pen"].widthF() == EMPHASIS_WIDTH
    chart.set_smoothing(0.0)
    chart.set_emphasis(None)
    assert pen("a").color().alpha() == pen("b").color().alpha() == 255 and pen("b").widthF() == 1
    chart.set_hidden("a", True)
    assert chart.hidden("a") and "a: 50" not in chart.readout(123_457.2)
    chart.set_hidden("a", False)
    assert not chart.hidden("a")


def test_many_appends_make_one_redraw(qtbot):
    widget = ChartWidget()
    qtbot.addWidget(widget)
    widget.show()
    qtbot.waitExposed(widget)
    widget.add_curve("a")
    qtbot.wait(100)  # let the first show/resize redraws pass
    redraws = []
    widget.curves["a"].raw.sigPlotChanged.connect(lambda *_: redraws.append(1))
    for i in range(50):
        widget.append("a", [float(i)], [float(i)])
    qtbot.waitUntil(lambda: len(redraws) > 0, timeout=2000)
    qtbot.wait(100)
    assert len(redraws) == 1
    assert len(drawn(widget.curves["a"].raw)[0]) == 50


def test_zoom_stops_following_until_asked(chart, qtbot):
    vb = chart.getPlotItem().getViewBox()
    vb.setXRange(1000, 2000, padding=0)
    chart.append("a", np.arange(N, N + 1000, dtype=float), np.zeros(1000))
    chart.flush()
    assert vb.viewRange()[0] == [1000, 2000]
    chart.set_follow(True)
    chart.flush()
    assert vb.viewRange()[0][1] == N + 999


def test_mouse_move_shows_the_readout(chart):
    vb = chart.getPlotItem().getViewBox()
    chart.scene().sigMouseMoved.emit(vb.sceneBoundingRect().center())
    assert chart.readout_label.toPlainText().startswith("x = ")

