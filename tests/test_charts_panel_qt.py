"""The Charts panel offscreen on a real LocalStore: pins, search and flat charts folded, live."""

from __future__ import annotations

import os

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")

import numpy as np
import pytest

pytest.importorskip("PySide6")
pytest.importorskip("pytestqt")

from support.app_store import r1_chunk as chunk

from pilothouse.gui._qt.charts import ChartsPanel
from pilothouse.gui.local_store import LocalStore

A = "tcp://127.0.0.1:7001"
KEY = (A, "r1")


@pytest.fixture
def store(tmp_path):
    store = LocalStore(tmp_path / "s.sqlite")
    store.put_runs(A, [{"id": "r1", "project": "p", "name": "base", "status": "running", "created": 1.0}])
    steps = np.arange(10)
    store.write_page(A, [chunk(1, "reward", steps, steps / 10), chunk(2, "loss", steps, 1 / (steps + 1)),
                         chunk(3, "clip_ratio/low_mean", steps, np.zeros(10)),
                         chunk(4, "clip_ratio/high_max", steps, np.zeros(10)),
                         chunk(5, "kl", steps, np.full(10, np.nan))], 5)  # all NaN: a gap, never folded
    yield store
    store.close()


def grid_order(panel: ChartsPanel) -> list[str]:
    items = [panel.grid.itemAt(i) for i in range(panel.grid.count())]
    by_place = {panel.grid.getItemPosition(panel.grid.indexOf(it.widget()))[:2]: it.widget() for it in items}
    names = {chart: metric for metric, chart in panel.charts.items()}
    return [names[by_place[p]] for p in sorted(by_place)]


def test_flat_charts_fold_into_one_line_and_come_back_when_they_move(qtbot, store):
    panel = ChartsPanel()
    qtbot.addWidget(panel)
    panel.show()
    panel.show_runs([KEY], store)
    assert grid_order(panel) == ["reward", "kl", "loss"]
    assert panel.folded.isVisible() and panel.folded.text().startswith("2 constant charts folded: clip_ratio/")
    assert not panel.charts["clip_ratio/low_mean"].isVisible()

    panel.add_entries(A, [chunk(6, "clip_ratio/low_mean", [10], [0.25])])  # it moved: back in the grid
    assert grid_order(panel) == ["reward", "kl", "loss", "clip_ratio/low_mean"]
    assert panel.folded.text().startswith("1 constant chart folded: clip_ratio/high_max = 0")

    panel.show_constant.setChecked(True)
    assert len(grid_order(panel)) == 5 and not panel.folded.isVisible()


def test_search_narrows_the_grid_and_says_when_nothing_matches(qtbot, store):
    panel = ChartsPanel()
    qtbot.addWidget(panel)
    panel.show()
    panel.show_runs([KEY], store)
    panel.search.setText("clip_ratio/*")  # a search shows flat charts too: the user asked for them
    assert grid_order(panel) == ["clip_ratio/low_mean", "clip_ratio/high_max"]
    assert not panel.charts["reward"].isVisible()
    panel.search.setText("no such metric")
    assert grid_order(panel) == [] and panel.hint.isVisible() and "No chart matches" in panel.hint.text()
    panel.search.clear()
    assert grid_order(panel) == ["reward", "kl", "loss"] and not panel.hint.isVisible()


def test_a_pinned_chart_leads_and_stays_pinned_in_a_new_window(qtbot, store):
    panel = ChartsPanel()
    qtbot.addWidget(panel)
    panel.show_runs([KEY], store)
    panel.pin("loss")
    assert grid_order(panel)[0] == "loss" and panel.charts["loss"].getPlotItem().titleLabel.text == "loss  (pinned)"
    actions = [a.text() for a in panel.charts["loss"].getPlotItem().getViewBox().menu.actions()]
    assert "Pin to top / unpin" in actions  # how a user pins: the chart's right-click menu

    again = ChartsPanel()  # the next app start, on the same store
    qtbot.addWidget(again)
    again.show_runs([KEY], store)
    assert grid_order(again)[0] == "loss"
    again.pin("loss", False)
    assert grid_order(again) == ["reward", "kl", "loss"] and store.setting("pinned_charts") == []


def seeds_store(tmp_path) -> LocalStore:
    """Two learning rates, two seeds each: reward = lr * 1000 + seed at every step."""
    store = LocalStore(tmp_path / "seeds.sqlite")
    runs, entries = [], []
    for i, (lr, seed) in enumerate([(1e-3, 1), (1e-3, 2), (2e-3, 1), (2e-3, 2)]):
        run = f"r{i}"
        runs.append({"id": run, "project": "p", "name": f"lr{lr:g}-seed{seed}", "status": "running",
                     "created": float(i), "config": {"opt": {"lr": lr}, "seed": seed}})
        e = chunk(i + 1, "reward", np.arange(5), np.full(5, lr * 1000 + seed))
        entries.append(e._replace(run=run))
    store.put_runs(A, runs)
    store.write_page(A, entries, len(entries))
    return store


def test_runs_grouped_by_a_config_key_are_drawn_as_mean_and_band_and_follow_live_points(qtbot, tmp_path):
    store = seeds_store(tmp_path)
    panel = ChartsPanel()
    qtbot.addWidget(panel)
    keys = [(A, f"r{i}") for i in range(4)]
    panel.show_runs(keys, store)
    choices = [panel.group_box.itemData(i) for i in range(panel.group_box.count())]
    assert choices == [None, "name", "config:opt.lr", "config:seed"]  # the keys that tell the runs apart
    panel.group_box.setCurrentIndex(choices.index("config:opt.lr"))
    panel.group_box.activated.emit(panel.group_box.currentIndex())

    chart = panel.charts["reward"]
    assert set(chart.curves) == {"group:opt.lr=0.001", "group:opt.lr=0.002"}  # groups, not runs
    assert [e.text() for e in panel.legend.entries.values()] == ["opt.lr=0.001 · 2 runs", "opt.lr=0.002 · 2 runs"]
    assert "opt.lr=0.001: 2.5 (2 … 3, 2 runs)" in chart.readout(3.0)
    assert not panel.x_axis.isEnabled()  # groups align their runs by step

    panel.add_entries(A, [chunk(10, "reward", [5], [5.0])._replace(run="r1")])  # one run of a group moves on
    qtbot.waitUntil(lambda: "opt.lr=0.001: 5 (5 … 5, 1 run)" in chart.readout(5.0), timeout=3000)
    store.close()


def test_runs_grouped_by_a_name_pattern_and_a_bad_pattern_says_why(qtbot, tmp_path):
    store = seeds_store(tmp_path)
    panel = ChartsPanel()
    qtbot.addWidget(panel)
    panel.show()
    panel.show_runs([(A, f"r{i}") for i in range(4)], store)
    panel.group_box.setCurrentIndex(panel.group_box.findData("name"))
    panel.group_box.activated.emit(panel.group_box.currentIndex())
    assert panel.name_pattern.isVisible()
    assert set(panel.charts["reward"].curves) == {"group:lr0.001", "group:lr0.002"}

    panel.name_pattern.setText("seed(")  # a typo in the pattern
    panel.name_pattern.editingFinished.emit()
    assert panel.group_note.isVisible() and "bad name pattern" in panel.group_note.text()
    assert set(panel.charts["reward"].curves) == {"r0", "r1", "r2", "r3"}  # drawn ungrouped, nothing lost
    store.close()


def test_axes_are_titled_the_smoothing_says_its_value_and_search_keeps_its_width(qtbot, store):
    panel = ChartsPanel()
    qtbot.addWidget(panel)
    panel.show()
    panel.show_runs([KEY], store)
    plot = panel.charts["loss"].getPlotItem()
    assert plot.getAxis("bottom").labelText == "step" and plot.getAxis("left").labelText == "loss"
    assert plot.getAxis("bottom").label.isVisible()
    panel.x_axis.setCurrentIndex(panel.x_axis.findText("wall time"))
    plot = panel.charts["loss"].getPlotItem()  # the charts are made anew for the other axis
    assert plot.getAxis("bottom").labelText == "wall time" and plot.getAxis("left").labelText == "loss"
    panel.x_axis.setCurrentIndex(panel.x_axis.findText("step"))
    assert panel.charts["reward"].getPlotItem().getAxis("bottom").labelText == "step"

    assert panel.smoothing_value.text() == "0.00"
    panel.smoothing.setValue(60)
    assert panel.smoothing_value.text() == "0.60"

    panel.resize(300, 600)  # far narrower than its controls: the box still fits a metric name
    qtbot.waitUntil(lambda: panel.search.width() > 0)
    assert panel.search.width() >= panel.search.fontMetrics().horizontalAdvance("rollouts/reward/mean")


def test_a_chart_searched_alone_fits_its_x_range_to_its_own_data(qtbot, tmp_path):
    """eval/score logged for 20 steps of a 2000-step run: searched alone it fills its chart, not
    1 % of an x range the hidden train charts set; cleared, the grid zooms as one again."""
    store = LocalStore(tmp_path / "s.sqlite")
    store.put_runs(A, [{"id": "r1", "project": "p", "name": "base", "status": "running", "created": 1.0}])
    long, short = np.arange(2000), np.arange(20)
    store.write_page(A, [chunk(1, "reward", long, long / 2000), chunk(2, "loss", long, 1 / (long + 1)),
                         chunk(3, "eval/score", short, short / 20)], 3)
    panel = ChartsPanel()
    qtbot.addWidget(panel)
    panel.resize(900, 700)
    panel.show()
    panel.show_runs([KEY], store)

    def x_range(metric: str) -> list[float]:
        panel.charts[metric].flush()
        return panel.charts[metric].getPlotItem().getViewBox().viewRange()[0]

    qtbot.waitUntil(lambda: x_range("reward")[1] > 1900, timeout=5000)  # the grid drawn, linked, first
    panel.search.setText("eval/")
    assert grid_order(panel) == ["eval/score"]
    qtbot.waitUntil(lambda: x_range("eval/score")[1] < 25, timeout=5000)  # its own 20 steps
    panel.search.clear()
    panel.charts["reward"].setXRange(100, 200, padding=0)  # zoom one shown chart: the shown others follow
    qtbot.waitUntil(lambda: x_range("loss") == pytest.approx([100, 200]), timeout=5000)
    store.close()


def test_a_batch_of_many_new_curves_is_drawn_over_turns_of_the_event_loop_and_none_is_lost(qtbot, tmp_path):
    """32 runs' first points make 10 charts and 320 curves: drawn TURN_CURVES' worth a turn (a chart
    counting NEW_CHART), so batches of points in between are not held up; points logged meanwhile
    for a curve still to be drawn are on it once drawn."""
    from pilothouse.gui._qt.charts import NEW_CHART, TURN_CURVES

    store = LocalStore(tmp_path / "s.sqlite")
    runs = [f"r{i}" for i in range(40)]
    store.put_runs(A, [{"id": r, "project": "p", "name": r, "status": "running", "created": 1.0} for r in runs])
    panel = ChartsPanel()
    qtbot.addWidget(panel)
    panel.show_runs([(A, r) for r in runs], store)
    metrics = ["loss", "reward", "kl"]
    page = [chunk(1 + i, m, [0, 1], [0.5, float(i)])._replace(run=r) for i, (r, m) in
            enumerate((r, m) for m in metrics for r in runs)]
    panel.add_entries(A, page)
    assert list(panel.charts) == ["loss"] and len(panel.charts["loss"].curves) == 1 + TURN_CURVES - NEW_CHART
    panel.add_entries(A, [chunk(500, "kl", [2], [7.0])._replace(run="r39")])  # its curve is not drawn yet
    assert sum(len(c.curves) for c in panel.charts.values()) == 1 + TURN_CURVES - NEW_CHART  # a turn's share, not a batch's
    qtbot.waitUntil(lambda: sum(len(c.curves) for c in panel.charts.values()) == 120, timeout=5000)
    assert sorted(grid_order(panel)) == sorted(metrics)  # every chart made is in the grid
    panel.charts["kl"].flush()
    xs, ys = panel.charts["kl"].curves["r39"].raw.getData()
    assert list(xs) == [0, 1, 2] and list(ys) == [0.5, 119.0, 7.0]
    store.close()
