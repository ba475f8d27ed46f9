"""The Charts panel offscreen on a real LocalStore: pins, search and flat charts folded, live."""

from __future__ import annotations

import os

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")

import numpy as np
import pytest

pytest.importorskip("PySide6")
pytest.importorskip("pytestqt")

from pilothouse.gui._qt.charts import ChartsPanel
from pilothouse.gui.local_store import LocalStore
from pilothouse.wire.entries import Entry

A = "tcp://127.0.0.1:7001"
KEY = (A, "r1")


def chunk(id: int, metric: str, steps, vals) -> Entry:
    steps = np.asarray(steps, np.int64)
    vals = np.asarray(vals, np.float64)
    return Entry(id, "r1", "m", metric, 0, len(steps), steps.tobytes(), vals.tobytes(),
                 (1.7e9 + steps).astype(np.float64).tobytes(), None)


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
