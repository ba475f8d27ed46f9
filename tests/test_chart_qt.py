"""pilothouse.gui._qt.chart: the ChartWidget draws decimated curves that keep spikes, gaps and markers."""

from __future__ import annotations

import os

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")

import numpy as np
import pytest

pytest.importorskip("pytestqt")
pg = pytest.importorskip("pyqtgraph")

from PySide6.QtCore import QEvent  # noqa: E402
from PySide6.QtWidgets import QApplication  # noqa: E402

from pilothouse.gui._qt.chart import DIM_FACTOR, EMPHASIS_WIDTH, ChartWidget  # noqa: E402
from pilothouse.gui.lod import Series  # noqa: E402
from pilothouse.gui.palette import PALETTE  # noqa: E402

N = 200_000


def _shown(qtbot) -> ChartWidget:
    """An empty chart, 600 x 400, on screen."""
    widget = ChartWidget()
    qtbot.addWidget(widget)
    widget.resize(600, 400)
    widget.show()
    qtbot.waitExposed(widget)
    return widget


@pytest.fixture
def chart(qtbot):
    widget = _shown(qtbot)
    x = np.arange(N, dtype=float)
    y = np.sin(x / 5000)
    y[123_457] = 50.0
    y[[1000, 150_000]] = [np.nan, np.inf]
    widget.add_curve("a")
    widget.add_curve("b", label="run b")
    for lo in range(0, N, 20_000):  # many appends, one coalesced redraw
        widget.append("a", x[lo:lo + 20_000], y[lo:lo + 20_000])
        widget.append("b", x[lo:lo + 20_000], -y[lo:lo + 20_000])
    qtbot.waitUntil(lambda: len(widget.curves["a"].raw.getData()[0]) > 0, timeout=2000)  # the coalesced redraw came
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


def test_mouse_move_shows_the_readout_and_leaving_hides_it(chart):
    vb = chart.getPlotItem().getViewBox()
    assert not chart.readout_label.isVisible()
    chart.scene().sigMouseMoved.emit(vb.sceneBoundingRect().center())
    assert chart.readout_label.toPlainText().startswith("x = ")
    assert chart.readout_label.isVisible() and chart._vline.isVisible()
    QApplication.sendEvent(chart, QEvent(QEvent.Type.Leave))
    assert not chart.readout_label.isVisible() and not chart._vline.isVisible()



def group_chart(qtbot, n):
    """A shown chart with one run and a group of n points whose band has a spike at 0.65 n."""
    widget = ChartWidget()
    qtbot.addWidget(widget)
    widget.resize(600, 400)
    widget.show()
    qtbot.waitExposed(widget)
    widget.add_curve("run")
    widget.append("run", np.linspace(0, n, 100), np.zeros(100))
    widget.add_group("g", color=PALETTE[2], label="lr=0.001")
    xs = np.arange(n, dtype=float)
    mean = np.sin(xs / (n / 20))
    lo, hi = mean - 1, mean + 1
    hi[int(0.65 * n)] = 40.0
    gap = [n // 1000, n // 1000 + 1]
    lo[gap] = hi[gap] = mean[gap] = np.nan  # no run has a value there
    widget.set_group("g", Series.of(xs, mean), lo, hi, np.full(n, 3))
    widget.flush()
    return widget


@pytest.fixture
def grouped(qtbot):
    return group_chart(qtbot, 10_000)


def test_a_group_is_a_mean_curve_and_a_band_both_per_pixel(qtbot):
    grouped = group_chart(qtbot, 1_000_000)
    band = grouped.bands["g"]
    pixels = grouped.getPlotItem().getViewBox().width()
    mean_xs, _ = drawn(grouped.curves["g"].raw)
    lo_xs, lo = drawn(band.lo_edge)
    hi_xs, hi = drawn(band.hi_edge)
    assert len(mean_xs) <= 4 * pixels and len(lo_xs) <= 2 * pixels + 8
    assert np.array_equal(lo_xs, hi_xs) and np.array_equal(np.isnan(lo), np.isnan(hi))
    assert np.nanmax(hi) == 40.0 and np.nanmin(lo) == pytest.approx(-2.0, abs=1e-3)
    assert np.isnan(lo).any()  # the gap where no run has a value
    assert not band.fill.path().isEmpty() and band.fill.zValue() < grouped.curves["g"].raw.zValue()
    assert band.fill.brush().color().alpha() < 255
    vb = grouped.getPlotItem().getViewBox()
    qtbot.waitUntil(lambda: vb.viewRange()[1][1] >= 40.0, timeout=2000)  # the y range holds the band


def test_a_hidden_group_hides_its_band_and_leaves_the_y_range(grouped):
    band = grouped.bands["g"]
    grouped.set_hidden("g", True)
    assert grouped.hidden("g") and not any(i.isVisible() for i in (band.lo_edge, band.hi_edge, band.fill))
    assert grouped.getPlotItem().getViewBox().viewRange()[1][1] < 40.0
    assert "lr=0.001" not in grouped.readout(10.0)
    grouped.set_hidden("g", False)
    assert all(i.isVisible() for i in (band.lo_edge, band.hi_edge, band.fill))


def test_group_emphasis_dims_the_band_and_smoothing_smooths_the_mean(grouped):
    band = grouped.bands["g"]
    alpha = band.fill.brush().color().alpha()
    grouped.set_emphasis("run")
    assert band.fill.brush().color().alpha() == round(alpha * DIM_FACTOR)
    grouped.set_emphasis("g")
    assert band.fill.brush().color().alpha() == alpha
    assert grouped.curves["g"].raw.opts["pen"].widthF() == EMPHASIS_WIDTH
    grouped.set_smoothing(0.9)
    grouped.flush()
    assert grouped.curves["g"].smooth.isVisible() and len(drawn(grouped.curves["g"].smooth)[0]) > 0


def test_group_readout_shows_mean_min_max_and_runs(qtbot):
    from pilothouse.gui.groups import band

    widget = ChartWidget()
    qtbot.addWidget(widget)
    widget.add_group("g", label="lr=0.001")
    xs = np.arange(10.0)
    runs = [(xs, np.full(10, 1.0)), (xs, np.full(10, 3.0)), (xs, np.where(xs == 4, np.nan, 2.0))]

    def set_band(runs: list) -> None:
        xs, mean, lo, hi, count = band(runs)
        widget.set_group("g", Series.of(xs, mean), lo, hi, count)

    set_band(runs)
    assert "lr=0.001: 2 (1 … 3, 3 runs)  (x 7)" in widget.readout(7.2)
    assert "lr=0.001: 2 (1 … 3, 2 runs)  (x 4)" in widget.readout(4.0)
    set_band(runs[:1])  # replaced, not appended
    assert "lr=0.001: 1 (1 … 1, 1 run)" in widget.readout(4.0) and len(widget.curves["g"].series) == 10
    with pytest.raises(ValueError, match="differ in length"):
        widget.set_group("g", Series.of(xs, xs), xs, xs, xs[:3])
    with pytest.raises(ValueError, match="must increase"):
        widget.set_group("g", Series.of(np.zeros(10), xs), xs, xs, xs)  # one x twice


def test_group_band_on_a_log_axis_leaves_out_what_log_cannot_place(grouped):
    xs = np.arange(1000.0)
    lo = np.where(xs < 500, -1.0, 0.5)  # no log below 500
    grouped.set_group("g", Series.of(xs, np.ones(1000)), lo, np.full(1000, 40.0), np.full(1000, 2))
    grouped.set_log_y(True)
    grouped.flush()
    band = grouped.bands["g"]
    xs_drawn, lo = drawn(band.lo_edge)
    _, hi = drawn(band.hi_edge)
    assert np.array_equal(np.isnan(lo), np.isnan(hi)) and np.isnan(lo[xs_drawn < 499]).all()
    assert np.nanmax(hi) == pytest.approx(np.log10(40.0)) and np.nanmin(lo) == pytest.approx(np.log10(0.5))
    grouped.set_log_y(False)


def test_log_y_says_how_many_points_it_cannot_draw(qtbot):
    widget = _shown(qtbot)
    x = np.arange(100, dtype=float)
    y = np.linspace(0.01, 1.0, 100)
    y[[10, 20, 30]] = [0.0, -1.0, -5.0]  # KL-like: rare values a log axis cannot place
    y[40] = np.nan  # a gap, not a value ≤ 0: ticked by the markers, not counted here
    widget.add_curve("kl")
    widget.append("kl", x, y)
    widget.flush()
    assert not widget.hidden_label.isVisible()  # linear y draws them all
    widget.set_log_y(True)
    widget.flush()
    assert widget.hidden_label.isVisible() and widget.hidden_label.toPlainText() == "3 points ≤ 0 not shown (log y)"
    widget.setXRange(15, 50, padding=0)  # only what the view shows counts
    widget.flush()
    assert widget.hidden_label.toPlainText() == "2 points ≤ 0 not shown (log y)"
    widget.set_hidden("kl", True)  # a hidden curve hides nothing more
    widget.flush()
    assert not widget.hidden_label.isVisible()
    widget.set_hidden("kl", False)
    widget.set_log_y(False)
    widget.flush()
    assert not widget.hidden_label.isVisible()


def test_a_log_y_axis_labels_readable_ticks_and_linear_is_pyqtgraphs(qtbot):
    """The drawn axis, not only the tick rule: 0.3..3 is labelled 0.5, 1, 2 (pyqtgraph's own piles
    0.4 ... 0.9 under the 1), 0.8..1.2 gets labels above 1 too; a linear axis is left as it was."""

    def labels(widget: ChartWidget) -> list[str]:
        axis = widget.getPlotItem().getAxis("left")
        lo, hi = axis.range
        levels = axis.tickValues(lo, hi, axis.geometry().height())
        return [s for spacing, values in levels for s in axis.tickStrings(values, 1.0, spacing) if s]

    def evenly_spaced_above_one(texts: list[str]) -> bool:
        values = np.array([float(t) for t in texts])
        return len(values) >= 4 and values.max() > 1.05 and np.allclose(np.diff(values), values[1] - values[0])

    for top, bottom, readable in ((3.0, 0.3, lambda texts: texts == ["0.5", "1", "2"]),
                                  (1.2, 0.8, evenly_spaced_above_one)):
        widget = _shown(qtbot)
        widget.add_curve("a")
        widget.append("a", np.arange(500.0), np.geomspace(top, bottom, 500))
        widget.set_log_y(True)
        widget.flush()
        qtbot.waitUntil(lambda w=widget, ok=readable: ok(labels(w)), timeout=5000)
    widget.set_log_y(False)
    axis = widget.getPlotItem().getAxis("left")
    assert not axis.logMode and axis.tickStrings([1.0, 2.0], 1.0, 1.0) == ["1", "2"]  # pyqtgraph's
