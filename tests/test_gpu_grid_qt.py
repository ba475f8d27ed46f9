"""pilothouse.gui._qt.gpu_grid and the System tab with several nodes: the painted grid, its marks,
its tooltip, and a click that charts one GPU's history and opens its node's charts."""

from __future__ import annotations

import os
import time

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")

import numpy as np  # noqa: E402
import pytest  # noqa: E402

pytest.importorskip("pytestqt")
pytest.importorskip("PySide6")

from PySide6.QtCore import QEvent, QObject, QPoint, QPointF, Qt  # noqa: E402
from PySide6.QtGui import QColor, QHelpEvent  # noqa: E402
from PySide6.QtWidgets import QApplication, QToolTip  # noqa: E402
from support.app_store import copy_all  # noqa: E402
from support.gpus import sample, start_gpu_agent  # noqa: E402
from support.waiting import wait_until  # noqa: E402

from pilothouse.client import Client  # noqa: E402
from pilothouse.gui._qt.gpu_grid import MISSING_FILL, GpuGridPanel, GpuGridView  # noqa: E402
from pilothouse.gui._qt.system import SystemPanel  # noqa: E402
from pilothouse.gui.gpu_grid import HOT, MISSING, TEMPERATURE, UTILIZATION, GpuGrid, Thresholds  # noqa: E402
from pilothouse.gui.local_store import LocalStore  # noqa: E402
from pilothouse.wire.checks import SYSTEM_RUN_PREFIX  # noqa: E402

NODES = [("tcp://127.0.0.1:1", SYSTEM_RUN_PREFIX + f"node{i}") for i in range(3)]


def filled() -> GpuGrid:
    """Three nodes of 4 GPUs, 20 s of readings; node1's gpu2 hot, node2 silent since t=10."""
    grid = GpuGrid(Thresholds(missing_after=5))
    for t in range(20):
        for node in NODES[:2]:
            sample(grid, 1000.0 + t, gpus=4, node=node, util=float(t))
        if t <= 10:
            sample(grid, 1000.0 + t, gpus=4, node=NODES[2])
    grid.add(NODES[1], "gpu2/temp_c", np.array([1019.0]), np.array([93.0]))
    return grid


def center(view, row: int, gpu: int) -> QPoint:
    return view.cell_rect(row, gpu).center().toPoint()


def shown_panel(qtbot, grid: GpuGrid | None = None) -> GpuGridPanel:
    """The grid's panel shown and refreshed at the last reading's time."""
    panel = GpuGridPanel(grid or filled())
    qtbot.addWidget(panel)
    panel.show()
    panel.refresh(now=1019.0)
    return panel


def test_click_charts_that_gpus_history_and_the_metric_switches_it(qtbot):
    grid = filled()
    panel = shown_panel(qtbot, grid)
    view = panel.view
    assert [host for _, host, _ in view.rows] == ["node0", "node1", "node2"]
    assert "12 GPUs on 3 nodes" in panel.title.text() and "4 missing" in panel.title.text()
    assert panel.history.isHidden()

    qtbot.mouseClick(view, Qt.MouseButton.LeftButton, pos=center(view, 1, 2))
    assert view.selection == (NODES[1], 2) and panel.history.isVisible()
    xs, ys = panel.curve.getData()
    assert xs.tolist() == [1000.0 + t for t in range(20)] and ys.tolist() == [float(t) for t in range(20)]
    assert "node1 gpu2: utilization" in panel.history.getPlotItem().titleLabel.text

    panel.metric.setCurrentText(TEMPERATURE)
    assert view.shown == TEMPERATURE and panel.curve.getData()[1][-1] == 93.0
    qtbot.mouseClick(view, Qt.MouseButton.LeftButton, pos=view.cell_rect(0, 0).topLeft().toPoint() - QPoint(3, 3))
    assert view.selection == (NODES[1], 2)  # the gap between cells selects nothing


def test_tooltip_gives_the_exact_values(qtbot):
    panel = shown_panel(qtbot)
    view = panel.view
    pos = center(view, 1, 2)
    QApplication.sendEvent(view, QHelpEvent(QHelpEvent.Type.ToolTip, pos, view.mapToGlobal(pos)))
    text = QToolTip.text()
    assert text.startswith("node1  gpu2") and "temperature 93 °C" in text and f"⚠ {HOT}" in text
    assert "utilization 19 %" in text and "memory 10.0 / 80.0 GB (12 %)" in text and "power 200 W" in text


def test_marks_are_shapes_not_only_colors(qtbot):
    panel = shown_panel(qtbot)
    view = panel.view
    image = view.grab().toImage()
    missing, hot, plain = view.cell_rect(2, 1), view.cell_rect(1, 2), view.cell_rect(0, 1)
    ratio = view.devicePixelRatioF()

    def pixel(x: float, y: float) -> str:
        return QColor(image.pixel(int(x * ratio), int(y * ratio))).name()

    assert pixel(missing.center().x(), missing.center().y()) == "#ffffff"  # the cross, over the grey
    assert pixel(missing.left() + 1, missing.center().y()) == MISSING_FILL.name()
    assert pixel(hot.right() - 2, hot.top() + 2) == "#ffffff"  # the corner triangle
    assert pixel(plain.right() - 2, plain.top() + 2) == view.color(view.rows[0][2][1].value(UTILIZATION)).name()


class PaintRects(QObject):
    def __init__(self) -> None:
        super().__init__()
        self.rects: list = []

    def eventFilter(self, watched: QObject, event: QEvent) -> bool:  # noqa: N802 (Qt's name)
        if event.type() == QEvent.Type.Paint:
            self.rects.append(event.rect())
        return False


def test_a_new_reading_repaints_its_row_only_and_in_its_new_color(qtbot):
    grid = filled()
    view = GpuGridView(grid)
    qtbot.addWidget(view)
    view.show()
    qtbot.waitExposed(view)
    view.refresh(now=1019.0)
    QApplication.processEvents()
    seen = PaintRects()
    view.installEventFilter(seen)
    sample(grid, 1019.5, gpus=4, node=NODES[1], util=99.0)
    view.refresh(now=1019.5)
    QApplication.processEvents()
    row = view.cell_rect(1, 0)
    assert seen.rects and all(r.top() >= row.top() - 2 and r.bottom() <= row.bottom() + 2 for r in seen.rects)
    image = view.grab().toImage()
    ratio = view.devicePixelRatioF()
    spot = view.cell_rect(1, 0).topLeft() + QPointF(2, 2)
    assert QColor(image.pixel(int(spot.x() * ratio), int(spot.y() * ratio))).name() == view.color(99.0).name()
    assert view.color(99.0).name() != view.color(19.0).name()


def test_several_nodes_from_real_agents_show_the_grid_and_a_click_opens_that_node(qtbot, tmp_path, monkeypatch):
    agents = [start_gpu_agent(tmp_path, monkeypatch, name, gpus, state)[0]
              for name, gpus, state in (("a", 2, {}), ("b", 3, {"1": {"temp": 95}}))]
    try:
        store = LocalStore(tmp_path / "app.sqlite")
        panel = SystemPanel()
        qtbot.addWidget(panel)
        panel.show()
        for agent in agents:
            with Client(agent.url) as client:
                wait_until(lambda: any(r["kind"] == "system" for r in client.runs()), what="a system run")
                copy_all(client, store, agent.url)
        panel.show_agents(store)
        assert panel.many and panel.grid_panel.isVisible() and len(panel.nodes) == 1  # one node's charts built
        for agent in agents:  # live readings on top of the stored ones
            with Client(agent.url) as client:
                cursor = store.cursor(agent.url)
                wait_until(lambda: client.ping()["head"] > cursor, what="new readings")
                panel.add_entries(agent.url, copy_all(client, store, agent.url, after=cursor))
        panel.redraw()
        view = panel.grid_panel.view
        rows = {key[0]: cells for key, _, cells in view.rows}
        assert [len(rows[a.url]) for a in agents] == [2, 3]
        assert [c.flags for c in rows[agents[1].url]] == [frozenset(), {HOT}, frozenset()]
        assert all(c.heard > time.time() - 5 for cells in rows.values() for c in cells)

        row = next(i for i, (key, _, _) in enumerate(view.rows) if key[0] == agents[1].url)
        qtbot.mouseClick(view, Qt.MouseButton.LeftButton, pos=center(view, row, 1))
        key_b = view.rows[row][0]
        assert list(panel.nodes) == [key_b] and panel.choice_keys[panel.choice.currentIndex()] == key_b  # b's charts replace a's
        assert set(panel.nodes[key_b].charts["GPU temperature (°C)"].curves) == {"gpu0", "gpu1", "gpu2"}
        xs, ys = panel.grid_panel.curve.getData()
        assert len(xs) >= 2 and set(ys.tolist()) == {41.0}  # the fake's gpu1 utilization, every reading
        panel.grid_panel.metric.setCurrentText(TEMPERATURE)
        assert set(panel.grid_panel.curve.getData()[1].tolist()) == {95.0}

        panel.grid.thresholds = Thresholds(missing_after=1.0)
        agents[0].stop()  # node a goes away; b goes on
        time.sleep(1.5)
        with Client(agents[1].url) as client:
            cursor = store.cursor(agents[1].url)
            wait_until(lambda: client.ping()["head"] > cursor, what="new readings of b")
            panel.add_entries(agents[1].url, copy_all(client, store, agents[1].url, after=cursor))
        panel.redraw()
        flags = {key[0]: [c.flags for c in cells] for key, _, cells in view.rows}
        assert flags == {agents[0].url: [{MISSING}] * 2, agents[1].url: [frozenset(), {HOT}, frozenset()]}
        assert "2 missing" in panel.grid_panel.title.text()

        row_a = next(i for i, (key, _, _) in enumerate(view.rows) if key[0] == agents[0].url)
        qtbot.mouseClick(view, Qt.MouseButton.LeftButton, pos=center(view, row_a, 0))
        assert list(panel.nodes) == [view.rows[row_a][0]]  # a gone silent: its stored charts still open
        panel.forget(agents[0].url)  # the user stops following a: one node left, today's single-node view
        assert list(panel.hosts) == [key_b] and list(panel.nodes) == [key_b] and not panel.many
        assert panel.grid_panel.isHidden() and panel.choice_row.isHidden()
        assert [key for key, _, _ in panel.grid.rows()] == [key_b]
    finally:
        for agent in agents:
            agent.stop()
