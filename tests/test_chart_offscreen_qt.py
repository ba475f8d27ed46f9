"""A chart the user cannot see (scrolled out of the grid's view, on a hidden tab) skips its live
redraws and catches up when it comes back into sight, and a chart whose frames cost much draws
fewer of them, a pan or zoom still at once: the UI thread draws what is seen, at what it can afford."""

from __future__ import annotations

import os
import time

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")

import numpy as np  # noqa: E402
from PySide6.QtWidgets import QScrollArea, QVBoxLayout, QWidget  # noqa: E402

from pilothouse.gui._qt.chart import ChartWidget  # noqa: E402


def drawn(chart: ChartWidget) -> int:
    xs, _ = chart.curves["r"].raw.getData()
    return 0 if xs is None else len(xs)


def test_a_chart_scrolled_out_of_view_is_drawn_when_it_is_scrolled_to(qtbot):
    host = QWidget()
    column = QVBoxLayout(host)
    charts = [ChartWidget(redraw_ms=10) for _ in range(2)]
    for chart in charts:
        chart.setMinimumHeight(400)
        column.addWidget(chart)
    scroll = QScrollArea(widgetResizable=True)
    scroll.setWidget(host)
    scroll.resize(500, 300)  # the first chart in view, the second below it
    qtbot.addWidget(scroll)
    scroll.show()
    qtbot.waitExposed(scroll)
    series = [chart.add_curve("r") for chart in charts]
    for s, chart in zip(series, charts):
        s.append(np.arange(100.0), np.sin(np.arange(100.0)))
        chart.schedule_redraw()
    qtbot.waitUntil(lambda: drawn(charts[0]) > 0, timeout=3000)
    qtbot.wait(100)
    assert drawn(charts[1]) == 0  # out of sight: skipped
    scroll.ensureWidgetVisible(charts[1])
    qtbot.waitUntil(lambda: drawn(charts[1]) > 0, timeout=3000)  # painted again: drawn


def test_a_chart_of_a_window_not_shown_draws_as_before(qtbot):
    chart = ChartWidget(redraw_ms=10)  # tests and tools that never show a window read what it drew
    qtbot.addWidget(chart)
    chart.add_curve("r").append(np.arange(10.0), np.arange(10.0))
    chart.schedule_redraw()
    qtbot.waitUntil(lambda: drawn(chart) == 10 or drawn(chart) > 0, timeout=3000)


def test_a_chart_painting_slowly_on_a_busy_ui_thread_draws_less_often_but_a_pan_at_once(qtbot, monkeypatch):
    """While the UI thread is behind, live redraws come DRAW_SHARE times what a paint costs apart (fewer
    frames, not a backlog); a pan or zoom is redrawn at once, the next one of a drag the shortest gap
    after it."""
    import pyqtgraph as pg

    from pilothouse.gui._qt import chart as module

    paint = pg.PlotWidget.paintEvent

    def slow_paint(self, event) -> None:
        time.sleep(0.01)  # a paint of 10 ms
        paint(self, event)

    monkeypatch.setattr(pg.PlotWidget, "paintEvent", slow_paint)
    chart = ChartWidget(redraw_ms=10)
    qtbot.addWidget(chart)
    chart.show()
    qtbot.waitExposed(chart)
    series = chart.add_curve("r")
    series.append(np.arange(100.0), np.arange(100.0))
    chart.schedule_redraw()
    qtbot.wait(100)  # drawn and painted once (benchmarks/bench_app.py: a thread that keeps up keeps 30 ms gaps)
    qtbot.waitUntil(lambda: not chart._timer.isActive())  # a resize's redraw too (late on a loaded machine)
    series.append(np.arange(100.0, 110.0), np.arange(100.0, 110.0))  # live points: this frame paints
    before = time.monotonic()
    chart.schedule_redraw()
    time.sleep(module.SLOWEST_MS / 1000 + 0.1)  # the UI thread busy elsewhere: the redraw comes late, whatever its gap
    qtbot.waitUntil(lambda: module.FRAMES._last.get(id(chart), (0.0, 0.0))[0] > before)  # and is painted
    chart.schedule_redraw()
    assert chart._timer.interval() >= 10 * module.DRAW_SHARE  # about 150 ms, not 10
    drawn = chart._drawn
    chart.setXRange(10, 20, padding=0)  # the user zooms just after a live frame: redrawn at once all the same
    assert chart._drawn > drawn and not chart._timer.isActive() and not chart._busy
    drawn, last = chart._drawn, chart._panned
    chart.setXRange(11, 21, padding=0)  # and drags on: the next frame a shortest gap after the last
    if chart._drawn == drawn:
        assert chart._timer.isActive() and chart._timer.interval() <= 10
    else:  # redrawn at once only once the gap went by (a loaded machine)
        assert chart._panned - last >= 0.01
    qtbot.waitUntil(lambda: not chart._timer.isActive())
    time.sleep(0.02)  # a quiet spell
    drawn = chart._drawn
    chart.setXRange(12, 22, padding=0)  # the next zoom: redrawn at once, before any queued event
    assert chart._drawn > drawn and not chart._timer.isActive()


def test_charts_on_a_busy_ui_thread_space_their_frames_by_what_all_of_them_cost(qtbot, monkeypatch):
    """Behind, every chart waits DRAW_SHARE times what the charts' latest frames cost together: ten
    charts take the share of the UI thread one would, not ten times it."""
    import pyqtgraph as pg

    from pilothouse.gui._qt import chart as module

    paint = pg.PlotWidget.paintEvent

    def slow_paint(self, event) -> None:
        time.sleep(0.01)  # a paint of 10 ms
        paint(self, event)

    monkeypatch.setattr(pg.PlotWidget, "paintEvent", slow_paint)
    host = QWidget()
    column = QVBoxLayout(host)
    charts = [ChartWidget(redraw_ms=10) for _ in range(3)]
    for chart in charts:
        column.addWidget(chart)
        chart.add_curve("r").append(np.arange(100.0), np.arange(100.0))
    qtbot.addWidget(host)
    host.show()
    qtbot.waitExposed(host)
    for chart in charts:
        chart.schedule_redraw()
    qtbot.waitUntil(lambda: not any(chart._timer.isActive() for chart in charts))  # drawn (and resized) once
    before = time.monotonic()
    for chart in charts:
        chart.add_curve("s").append(np.arange(100.0), np.arange(100.0))  # live points: these frames paint
        chart.schedule_redraw()
    time.sleep(module.SLOWEST_MS / 1000 + 0.1)  # the UI thread busy elsewhere: their redraws come late
    qtbot.waitUntil(lambda: all(module.FRAMES._last.get(id(chart), (0.0, 0.0))[0] > before for chart in charts))
    monkeypatch.setattr(module, "DRAW_SHARE", 5)  # under SLOWEST_MS: the gap is what the frames cost, times 5
    own = module.FRAMES._last[id(charts[0])][1]  # its latest frame: its redraw and paint
    charts[0].schedule_redraw()
    assert own >= 0.01 and charts[0]._timer.interval() >= 5 * 1000 * (own + 0.02)  # the others' 10 ms paints count
