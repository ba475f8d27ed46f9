"""A long stored run charted from the store's tiers, offscreen on a real LocalStore: the app holds
only what it draws, spikes and gaps show at every zoom, live points and the crosshair work."""

from __future__ import annotations

import os

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")

import numpy as np
import pytest

pytest.importorskip("PySide6")
pytest.importorskip("pytestqt")

from support.app_store import r1_chunk as chunk

from pilothouse.gui._qt.charts import ChartsPanel
from pilothouse.gui.charts_model import OLD
from pilothouse.gui.groups import band
from pilothouse.gui.local_store import LocalStore
from pilothouse.gui.lod import Ema, Series, ema
from pilothouse.gui.stored_series import StoredGroup, StoredPieces, StoredSeries
from pilothouse.gui.tiers import TierEma
from pilothouse.wire.entries import Entry

A = "tcp://127.0.0.1:7001"
KEY = (A, "r1")
N = 200_000


@pytest.fixture
def store(tmp_path):
    store = LocalStore(tmp_path / "s.sqlite")
    store.put_runs(A, [{"id": "r1", "project": "p", "name": "base", "status": "running", "created": 1.0}])
    steps = np.arange(N)
    loss = np.sin(steps / 5000.0)
    loss[123_457] = 40.0  # one spike among 200k points
    loss[150_000] = np.nan
    store.write_page(A, [chunk(i + 1, "loss", steps[lo: lo + 20_000], loss[lo: lo + 20_000])
                         for i, lo in enumerate(range(0, N, 20_000))]
                     + [chunk(11, "lr", steps[:100], np.full(100, 0.1))], 11)
    yield store
    store.close()


def test_a_long_run_is_drawn_from_the_tiers_with_spikes_gaps_zoom_and_live_points(qtbot, store):
    panel = ChartsPanel()
    qtbot.addWidget(panel)
    panel.resize(1200, 800)
    panel.show()
    panel.model.stored_points = 50_000  # loss is longer: read from the tiers; lr stays in memory
    panel.show_runs([KEY], store)
    chart = panel.charts["loss"]
    curve = chart.curves["r1"]
    assert isinstance(curve.series, StoredSeries) and isinstance(panel.charts["lr"].curves["r1"].series, Series)
    chart.flush()
    xs, ys = curve.raw.getData()
    assert len(xs) <= 5 * chart.width() * chart.devicePixelRatioF()  # per pixel column, not per point
    assert 40.0 in ys and xs[ys == 40.0].tolist() == [123_457.0]  # the spike, where it is
    assert chart._marker_x.size and abs(chart._marker_x - 150_000).min() < N / 100  # the NaN is marked
    assert chart.readout(123_457.2).splitlines()[1] == "base: 40  (x 123457)"  # the crosshair reads the store

    chart.setXRange(123_400, 123_500, padding=0)  # zoomed in: the raw points
    chart.flush()
    xs, ys = curve.raw.getData()
    inside = (xs >= 123_400) & (xs <= 123_500)
    assert xs[inside].tolist() == list(range(123_400, 123_501)) and 40.0 in ys

    steps = np.arange(N, N + 1000)
    live = chunk(12, "loss", steps, np.full(1000, -7.0))
    store.write_page(A, [live], 12)  # the link stores a page before the UI hears of it
    panel.add_entries(A, [live])
    chart.set_follow(True)
    chart.flush()
    xs, ys = curve.raw.getData()
    assert xs.max() == N + 999 and -7.0 in ys and curve.series.y_range() == (-7.0, 40.0)

    panel.smoothing.setValue(60)  # the tiered curve is smoothed over its columns' means, the other over its points
    assert isinstance(curve.ema, TierEma) and isinstance(panel.charts["lr"].curves["r1"].ema, Ema)
    chart.setXRange(0, 100_000, padding=0)
    chart.flush()
    assert 40.0 not in curve.raw.getData()[1]
    xs, ys = curve.smooth.getData()
    assert 100 < len(xs) <= 5 * chart.width() * chart.devicePixelRatioF()
    first = int(np.ceil(xs[0] - curve.series.drawn.weights[0] / 2))  # the first column's first step
    steps = np.arange(first, 100_001)
    want = ema(np.sin(steps / 5000.0), 0.6)[0]  # TensorBoard's EMA of the raw points from there on
    assert np.abs(ys - np.interp(xs, steps, want)).max() < 0.01


def test_a_long_run_on_the_wall_time_axis_is_drawn_from_the_tiers(qtbot, tmp_path):
    """Wall time with jitter and an hour's pause: the tiers' first and last times place every column,
    the spike is drawn within a column of its time, the crosshair and the finest zoom read real points."""
    rng = np.random.default_rng(4)
    steps = np.arange(N)
    times = 1.7e9 + steps * 0.5 + rng.random(N) * 0.4 + np.where(steps > 100_000, 3600.0, 0.0)
    loss = np.sin(steps / 5000.0)
    loss[123_457] = 40.0
    loss[150_000] = np.nan
    store = LocalStore(tmp_path / "s.sqlite")
    store.put_runs(A, [{"id": "r1", "project": "p", "name": "base", "status": "running", "created": 1.0}])
    store.write_page(A, [Entry(i + 1, "r1", "m", "loss", 0, 20_000, steps[lo: lo + 20_000].tobytes(),
                               loss[lo: lo + 20_000].tobytes(), times[lo: lo + 20_000].tobytes(), None)
                         for i, lo in enumerate(range(0, N, 20_000))], 10)
    panel = ChartsPanel()
    qtbot.addWidget(panel)
    panel.resize(1200, 800)
    panel.show()
    panel.model.stored_points = 50_000
    panel.x_axis.setCurrentText("wall time")
    panel.show_runs([KEY], store)
    chart = panel.charts["loss"]
    curve = chart.curves["r1"]
    assert isinstance(curve.series, StoredSeries) and curve.series.by_time
    chart.flush()
    xs, ys = curve.raw.getData()
    pixels = chart.getViewBox().width() * chart.devicePixelRatioF()
    assert len(xs) <= 5 * pixels and xs.min() >= times[0] and xs.max() <= times[-1]
    column = (times[-1] - times[0]) / pixels
    assert abs(xs[ys == 40.0][0] - times[123_457]) < column  # the spike, where it happened
    assert not ((xs > times[100_000] + column) & (xs < times[100_001] - column)).any()  # nothing in the pause
    assert abs(chart._marker_x - times[150_000]).min() < column  # the NaN is marked
    assert curve.series.nearest(times[123_457] + 0.1) == (times[123_457], 40.0)  # the crosshair reads the store
    assert curve.series.nearest(times[100_000] + 1000) == (times[100_000], loss[100_000])  # inside the pause
    chart.setXRange(times[123_400], times[123_500], padding=0)  # zoomed in: the raw points at their times
    chart.flush()
    xs, ys = curve.raw.getData()
    inside = (xs >= times[123_400]) & (xs <= times[123_500])
    assert xs[inside].tolist() == times[123_400:123_501].tolist() and 40.0 in ys
    store.close()


def test_groups_of_long_runs_are_drawn_from_their_tiers_with_exact_bands(qtbot, tmp_path):
    """Two groups of two long runs each: a group's metric longer than ``stored_points`` is read per
    frame from its runs' tiers (no point held in memory): its band is exact per column, its mean the
    runs' mean, the readout says how many runs count, zoomed in it is ``band`` of the raw points, and a
    live page shows in the next frame; a short metric of the same runs stays in memory."""
    store = LocalStore(tmp_path / "s.sqlite")
    steps = np.arange(100_000)
    runs, page, values = [], [], {}
    for i, (lr, seed) in enumerate([(1, 1), (1, 2), (2, 1), (2, 2)]):
        run = f"r{i}"
        runs.append({"id": run, "project": "p", "name": f"lr{lr}-seed{seed}", "status": "running",
                     "created": float(i), "config": {"lr": lr, "seed": seed}})
        loss = lr * 10 + seed + np.sin(steps / 5000.0) * seed
        if i == 1:
            loss[70_001] = 40.0
        values[run] = loss
        page += [chunk(2 * i + 1, "loss", steps, loss)._replace(run=run),
                 chunk(2 * i + 2, "lr", steps[:100], np.full(100, lr))._replace(run=run)]
    store.put_runs(A, runs)
    store.write_page(A, page, len(page))
    panel = ChartsPanel()
    qtbot.addWidget(panel)
    panel.resize(1200, 800)
    panel.show()
    panel.model.stored_points = 50_000
    panel.show_runs([(A, r["id"]) for r in runs], store)
    panel.group_box.setCurrentIndex(panel.group_box.findData("config:lr"))
    panel.group_box.activated.emit(panel.group_box.currentIndex())
    chart = panel.charts["loss"]
    assert set(chart.curves) == {"group:lr=1", "group:lr=2"} and "loss" not in panel.model.points
    group = chart.curves["group:lr=1"].series
    assert isinstance(group, StoredGroup) and isinstance(panel.charts["lr"].curves["group:lr=1"].series, Series)
    chart.flush()
    lo, hi, count = group.edges()
    members = np.stack([values["r0"], values["r1"]])
    for x, low, high, n in zip(lo.x, lo.y, hi.y, count):  # each column: the runs' extremes over its steps
        view = chart.curves["group:lr=1"].series.parts[0].drawn
        column = np.searchsorted(view.starts, x, "right") - 1
        inside = slice(int(view.starts[column]), int(view.stops[column]))
        assert (low, high, n) == (members[:, inside].min(), members[:, inside].max(), 2)
    assert hi.y.max() == 40.0 and abs(hi.x[hi.y == 40.0][0] - 70_001) < 100_000 / 1000  # the spike, in its column
    xs, ys = chart.curves["group:lr=1"].raw.getData()
    calm = np.abs(xs - 70_001) > 500  # the spike's column: its mean holds the spike
    assert len(xs) <= 5 * chart.width() and np.abs(ys - (11.5 + 1.5 * np.sin(xs / 5000.0)))[calm].max() < 0.01
    assert ys[~calm].max() > 11.5 + 1.5 * np.sin(70_001 / 5000.0) + 0.01
    assert "(" in chart.readout(50_000.0) and "2 runs)" in chart.readout(50_000.0)

    chart.setXRange(20_000, 20_100, padding=0)  # zoomed in: the band of the raw points, step by step
    chart.flush()
    xs, mean, low, high, n = band([(steps, values["r0"]), (steps, values["r1"])])
    lo, hi, count = group.edges()
    inside = (xs >= 19_990) & (xs <= 20_110)
    shown = (lo.x >= 19_990) & (lo.x <= 20_110)
    assert lo.x[shown].tolist() == xs[inside].tolist() and lo.y[shown].tolist() == low[inside].tolist()
    assert hi.y[shown].tolist() == high[inside].tolist() and count[shown].tolist() == [2] * int(inside.sum())

    live = chunk(9, "loss", np.arange(100_000, 100_500), np.full(500, 99.0))._replace(run="r0")
    store.write_page(A, [live], 9)  # the link stores a page before the UI hears of it
    panel.add_entries(A, [live])
    chart.set_follow(True)
    chart.flush()
    lo, hi, count = group.edges()
    assert lo.x.max() > 100_000 and hi.y.max() == 99.0 and count[-1] == 1


def test_a_long_run_resumed_on_the_same_node_is_drawn_from_each_attempts_tiers(qtbot, tmp_path):
    """Attempt 1 logs steps 0..119,999 and crashes; attempt 2 resumes from step 80,000 on the same node.
    Each attempt's points get tiers of their own, so the run's curve reads attempt 1 before step 80,000
    and attempt 2 from there, its superseded points faint, exact at the edge, the resume marked; no
    point is held in memory and no point is read to find where attempt 2 begins."""
    from pilothouse.wire.messages import pack

    first, resumed_at, last = 120_000, 80_000, 200_000
    steps1, steps2 = np.arange(first), np.arange(resumed_at, last)
    times1, times2 = 1.7e9 + steps1 * 0.01, 1.7e9 + 5000 + (steps2 - resumed_at) * 0.01
    vals1, vals2 = 100.0 + np.sin(steps1 / 3000.0), -100.0 + np.sin(steps2 / 3000.0)
    store = LocalStore(tmp_path / "s.sqlite")
    store.put_runs(A, [{"id": "r1", "project": "p", "name": "base", "status": "running", "created": 1.7e9}])
    resumed = Entry(3, "r1", "e", None, 0, 0, None, None, None,
                    pack({"event": "resumed", "attempt": 2, "host": "h", "after": "crashed", "started": 1.7e9 + 4000,
                          "time": 1.7e9 + 4000}))
    store.write_page(A, [Entry(i + 1, "r1", "m", "loss", 0, 60_000, steps1[lo: lo + 60_000].tobytes(),
                               vals1[lo: lo + 60_000].tobytes(), times1[lo: lo + 60_000].tobytes(), None)
                         for i, lo in enumerate(range(0, first, 60_000))] + [resumed]
                     + [Entry(4, "r1", "m", "loss", 0, len(steps2), steps2.tobytes(), vals2.tobytes(),
                              times2.tobytes(), None)], 4)
    assert store.summary(A, "r1", "loss")["count"].tolist() == [first]  # attempt 2 in tiers of its own
    assert store.summary(A, "r1", "loss\x1f2")["count"].tolist() == [len(steps2)]
    store.db.execute("DROP TABLE tiers")  # built again from the entries: the resume is read from its event
    store.db.execute("PRAGMA user_version=0")  # as a file from before the schema was numbered
    store.close()
    store = LocalStore(tmp_path / "s.sqlite")
    assert store.summary(A, "r1", "loss\x1f2")["count"].tolist() == [len(steps2)]
    assert store.points(A, "r1") == first + len(steps2)
    panel = ChartsPanel()
    qtbot.addWidget(panel)
    panel.resize(1200, 800)
    panel.show()
    panel.model.stored_points = 50_000
    panel.show_runs([KEY], store)
    chart = panel.charts["loss"]
    curve, old = chart.curves["r1"], chart.curves["r1" + OLD]
    assert isinstance(curve.series, StoredPieces) and isinstance(old.series, StoredPieces) and old.faint
    chart.flush()
    xs, ys = curve.raw.getData()
    assert xs.min() == 0 and xs.max() == last - 1 and len(xs) <= 5 * chart.width() * chart.devicePixelRatioF()
    assert (ys[xs < resumed_at] > 0).all() and (ys[xs >= resumed_at] < 0).all()  # each step from its attempt
    xs, ys = old.raw.getData()
    assert xs.min() == resumed_at and xs.max() == first - 1 and (ys > 0).all()  # attempt 1's superseded points
    assert [m.x for m in chart._alert_marks if m.resume] == [resumed_at]
    chart.setXRange(resumed_at - 50, resumed_at + 50, padding=0)  # the raw points at the edge
    chart.flush()
    xs, ys = curve.raw.getData()
    inside = (xs >= resumed_at - 50) & (xs <= resumed_at + 50)
    want = np.where(xs < resumed_at, 100.0, -100.0) + np.sin(xs / 3000.0)
    assert inside.sum() == 101 and np.array_equal(ys[inside], want[inside])
    for x0, x1 in ((resumed_at - 3000, resumed_at + 3000), (resumed_at - 90_000, resumed_at + 90_000)):
        chart.setXRange(x0, x1, padding=0)  # columns of points, then of buckets: each from its attempt's points
        chart.flush()
        xs, ys = curve.raw.getData()
        before = xs < resumed_at
        assert np.isin(ys[before], vals1[:resumed_at]).all() and np.isin(ys[~before], vals2).all()
        assert before.any() and (~before).any()
    assert curve.series.nearest(resumed_at + 0.2) == (resumed_at, vals2[0])
    assert old.series.nearest(resumed_at + 0.2) == (resumed_at, vals1[resumed_at])
    panel.x_axis.setCurrentText("wall time")  # the same pieces at their times: attempt 2 an hour later
    chart = panel.charts["loss"]
    curve, old = chart.curves["r1"], chart.curves["r1" + OLD]
    chart.set_follow(True)
    chart.flush()
    xs, ys = curve.raw.getData()
    assert xs.min() == times1[0] and xs.max() == times2[-1]
    assert (ys[xs <= times1[resumed_at - 1]] > 0).all() and (ys[xs >= times2[0]] < 0).all()
    assert not ((xs > times1[resumed_at - 1]) & (xs < times2[0])).any()  # nothing of attempt 1 past step 80,000
    xs, ys = old.raw.getData()
    assert xs.min() == times1[resumed_at] and xs.max() == times1[-1] and (ys > 0).all()
    times3 = times2[-1] + 1 + np.arange(500) * 0.01
    live = Entry(5, "r1", "m", "loss", 0, 500, np.arange(last, last + 500).tobytes(), np.full(500, -7.0).tobytes(),
                 times3.tobytes(), None)
    store.write_page(A, [live], 5)  # attempt 2 goes on: the link stores the page, then the UI hears of it
    panel.add_entries(A, [live])
    chart.flush()
    xs, ys = curve.raw.getData()  # followed: the curve and its extent reach the new points
    assert xs.max() == times3[-1] and -7.0 in ys and curve.series.x_range() == (times1[0], times3[-1])


def test_log_y_on_a_curve_read_from_the_tiers_says_at_least_how_many_points_it_hides(qtbot, store):
    panel = ChartsPanel()
    qtbot.addWidget(panel)
    panel.resize(1200, 800)
    panel.show()
    panel.model.stored_points = 50_000  # loss is read from the tiers: its view holds column extremes only
    panel.show_runs([KEY], store)
    chart = panel.charts["loss"]
    assert isinstance(chart.curves["r1"].series, StoredSeries)
    panel.log_y.setChecked(True)
    chart.flush()
    text = chart.hidden_label.toPlainText()
    assert chart.hidden_label.isVisible() and text.startswith("at least ") and text.endswith("≤ 0 not shown (log y)")
    shown = int(text.split()[2])
    real = int(np.count_nonzero(np.sin(np.arange(N) / 5000.0) <= 0))
    assert 0 < shown <= real  # a lower bound, never more than there are
    lr = panel.charts["lr"]  # 0.1 everywhere: nothing hidden, nothing said
    lr.flush()
    assert not lr.hidden_label.isVisible()
