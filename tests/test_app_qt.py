"""The app end to end, offscreen: a real agent, a real trainer process, the real window."""

from __future__ import annotations

import os
import tempfile

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
os.environ["XDG_CONFIG_HOME"] = tempfile.mkdtemp(prefix="pilothouse-qt-config-")  # QSettings stays in tests

import pytest  # noqa: E402

pytest.importorskip("PySide6")
pytest.importorskip("pytestqt")

from support.dialogs import answer_next_box  # noqa: E402
from support.processes import finish, start_trainer  # noqa: E402

from pilothouse.client import Client  # noqa: E402
from pilothouse.gui._qt.app import EMPTY  # noqa: E402

TRAINER = """
run = ph.init(project="app", name="watched", agent=URL, config={"lr": 1e-3}, heartbeat=0.2)
print(run.id, flush=True)
for step in range(100000):
    ctl = run.sync(step)
    if ctl.stop:
        break
    run.log({"reward/mean": step / 100.0, "reward/std": 1.0, "loss": 1.0 / (step + 1)}, step=step)
    time.sleep(0.01)
run.finish()
"""


def test_empty_state_says_what_to_do(window):
    w = window([])
    w._redraw()
    assert w.center.currentWidget() is w.empty and "pilothouse agent" in EMPTY


def test_live_run_is_listed_charted_and_paused_from_the_ui(window, qtbot, tmp_path, agent_proc):
    trainer = start_trainer(tmp_path, TRAINER, agent_proc.url)
    run_id = trainer.stdout.readline().strip()
    w = window([agent_proc.url])
    try:
        qtbot.waitUntil(lambda: any(w.table_model.row_at(i).run_id == run_id
                                    for i in range(w.table_model.rowCount())), timeout=15000)
        row = next(i for i in range(w.table_model.rowCount()) if w.table_model.row_at(i).run_id == run_id)
        w.table.selectRow(row)
        qtbot.waitUntil(lambda: "reward/mean" in w.charts.charts, timeout=10000)
        chart = w.charts.charts["reward/mean"]
        qtbot.waitUntil(lambda: len(chart.curves[run_id].series.x) > 20, timeout=10000)
        before = len(chart.curves[run_id].series.x)
        qtbot.waitUntil(lambda: len(chart.curves[run_id].series.x) > before + 10, timeout=10000)  # live
        xs = chart.curves[run_id].series.x
        assert list(xs[:5]) == [0.0, 1.0, 2.0, 3.0, 4.0]  # history and live: no gap, no double
        assert (xs[1:] - xs[:-1] == 1).all()

        w.actions["pause"].trigger()
        qtbot.waitUntil(lambda: "paused at step" in w.statusBar().currentMessage(), timeout=15000)
        with Client(agent_proc.url) as c:
            run = next(r for r in c.runs() if r["id"] == run_id)
            assert run["status"] == "paused"
            step = run["last_step"]
            qtbot.wait(1000)
            assert next(r for r in c.runs() if r["id"] == run_id)["last_step"] == step  # it really holds
        w.actions["resume"].trigger()
        qtbot.waitUntil(lambda: "resumed at step" in w.statusBar().currentMessage(), timeout=15000)
        answer_next_box("Stop", [])  # stop asks first (tests/test_app_stop_qt.py)
        w.actions["stop"].trigger()
        finish(trainer)
    finally:
        if trainer.poll() is None:
            trainer.kill()
        w.close()


def test_two_runs_selected_are_overlaid_and_stay_selected(window, qtbot, agent_proc):
    import pilothouse as ph

    ids = []
    for name, scale in (("lr-a", 1.0), ("lr-b", 2.0)):
        run = ph.init(project="cmp", name=name, agent=agent_proc.url, config={"lr": scale})
        for step in range(50):
            run.log({"reward/mean": scale * step}, step=step)
        assert run.finish()
        ids.append(run.id)
    w = window([agent_proc.url])
    try:
        qtbot.waitUntil(lambda: w.table_model.rowCount() == 2, timeout=15000)
        w.table.selectAll()
        qtbot.waitUntil(lambda: "reward/mean" in w.charts.charts
                        and set(w.charts.charts["reward/mean"].curves) == set(ids), timeout=10000)
        curves = w.charts.charts["reward/mean"].curves
        assert len({c.color for c in curves.values()}) == 2  # a color per run
        assert sorted(curves[ids[1]].series.y.tolist()) == [2.0 * s for s in range(50)]
        w._schedule()
        qtbot.wait(200)  # a redraw re-reads the table: the comparison must survive it
        assert len(w.table.selectionModel().selectedRows()) == 2
    finally:
        w.close()


def test_charts_switch_to_wall_time_and_pan_together(window, qtbot, agent_proc):
    import pilothouse as ph

    run = ph.init(project="axes", name="two-metrics", agent=agent_proc.url)
    for step in range(100):
        run.log({"loss": 1.0 / (step + 1), "kl": 0.01 * step}, step=step)
    assert run.finish()
    w = window([agent_proc.url])
    try:
        qtbot.waitUntil(lambda: w.table_model.rowCount() == 1, timeout=15000)
        w.table.selectRow(0)
        qtbot.waitUntil(lambda: set(w.charts.charts) == {"loss", "kl"}, timeout=10000)
        loss, kl = w.charts.charts["loss"], w.charts.charts["kl"]
        loss.setXRange(10, 20, padding=0)
        qtbot.wait(50)
        assert kl.getViewBox().viewRange()[0] == pytest.approx([10, 20])  # linked pan/zoom
        w.charts.x_axis.setCurrentText("wall time")
        qtbot.waitUntil(lambda: "loss" in w.charts.charts and w.charts.charts["loss"] is not loss, timeout=5000)
        xs = w.charts.charts["loss"].curves[run.id].series.x
        assert xs[0] > 1e9 and (xs[1:] >= xs[:-1]).all()  # seconds since the epoch, in order
    finally:
        w.close()


def test_theme_and_shortcuts(window, qtbot):
    from PySide6.QtGui import QPalette
    from PySide6.QtWidgets import QApplication

    w = window([])

    def window_lightness() -> int:
        return QApplication.palette().color(QPalette.ColorRole.Window).lightness()

    w.dark.setChecked(False)
    assert window_lightness() > 200
    w.dark.setChecked(True)
    assert window_lightness() < 100
    from PySide6.QtGui import QAction, QKeySequence

    by_key = {a.shortcut().toString(): a for a in w.findChildren(QAction) if not a.shortcut().isEmpty()}
    assert {"Ctrl+P", "Ctrl+R", "Ctrl+S", "Ctrl+N", "Ctrl+F", "Ctrl+E", "Alt+3"} <= set(by_key)
    by_key[QKeySequence("Alt+3").toString()].trigger()
    assert w.tabs.currentWidget() is w.rollouts


def test_the_app_opens_on_the_live_runs_of_the_newest_project_then_on_the_last_selection(window, qtbot,
                                                                                          agent_proc):
    import pilothouse as ph

    old = ph.init(project="old", name="done", agent=agent_proc.url)
    old.log({"loss": 1.0}, step=0)
    assert old.finish()
    live = [ph.init(project="new", name=name, agent=agent_proc.url, heartbeat=0.2) for name in ("a", "b")]
    ended = ph.init(project="new", name="c-finished", agent=agent_proc.url)
    ended.log({"loss": 1.0}, step=0)
    assert ended.finish()
    for run in live:
        run.log({"reward": 1.0, "loss": 0.5}, step=0)
        assert run.flush()
    w = window([agent_proc.url])
    try:
        qtbot.waitUntil(lambda: len(w.runs.selected()) == 2, timeout=15000)  # nobody clicked anything
        assert {key[1] for key in w.runs.selected()} == {run.id for run in live}
        qtbot.waitUntil(lambda: {"reward", "loss"} <= set(w.charts.charts), timeout=10000)
        assert w.charts.grid.itemAtPosition(0, 0).widget() is w.charts.charts["reward"]  # first, before loss
        row = next(i for i in range(w.table_model.rowCount()) if w.table_model.row_at(i).run_id == old.id)
        w.table.selectRow(row)  # the user's own choice...
        qtbot.waitUntil(lambda: [k[1] for k in w.runs.selected()] == [old.id], timeout=5000)
    finally:
        w.close()
    again = window([agent_proc.url])  # ...is what the app opens on next time
    try:
        qtbot.waitUntil(lambda: [k[1] for k in again.runs.selected()] == [old.id], timeout=15000)
    finally:
        again.close()
        for run in live:
            run.finish()


def test_compared_runs_have_colors_a_legend_and_readable_themes(window, qtbot, agent_proc):
    """Each run's color in the table and the legend; hovering an entry highlights that run on every
    chart, clicking hides it; a theme switch recolors what was drawn in the other theme's colors."""
    from PySide6.QtCore import QEvent, QPointF, Qt
    from PySide6.QtGui import QColor, QEnterEvent
    from PySide6.QtWidgets import QApplication

    import pilothouse as ph
    from pilothouse.gui._qt.chart import DIM_FACTOR
    from pilothouse.gui.palette import PALETTE
    from pilothouse.gui.themes import DARK, LIGHT

    ids = {}
    for name, lr in (("base", 1e-3), ("tuned", 3e-4)):
        run = ph.init(project="colors", name=name, agent=agent_proc.url, config={"lr": lr})
        for step in range(20):
            run.log({"reward/mean": lr * step, "loss": 1.0 / (step + 1)}, step=step)
        assert run.finish()
        ids[name] = run.id
    w = window([agent_proc.url])
    try:
        qtbot.waitUntil(lambda: w.table_model.rowCount() == 2, timeout=15000)
        w.table.selectAll()
        qtbot.waitUntil(lambda: {"reward/mean", "loss"} <= set(w.charts.charts)
                        and len(w.charts.charts["loss"].curves) == 2, timeout=10000)
        keys = w.runs.selected()
        colors = [w.charts.charts["loss"].curves[k[1]].color for k in keys]
        assert colors == list(PALETTE[:2])  # in selection order: the palette's most distinct pair
        entries = list(w.charts.legend.entries.values())
        assert {e.text() for e in entries} == {"base", "tuned"} and w.charts.legend.isVisible()
        run_column = 2
        swatches = [w.table_model.data(w.table_model.index(i, run_column), Qt.ItemDataRole.DecorationRole)
                    for i in range(2)]
        assert all(s is not None and not s.isNull() for s in swatches)
        assert {w.config.table.horizontalHeaderItem(c).text() for c in range(2)} == {"base", "tuned"}

        first, second = entries
        QApplication.sendEvent(first, QEnterEvent(QPointF(3, 3), QPointF(3, 3), QPointF(3, 3)))
        for chart in w.charts.charts.values():
            assert chart.emphasis == first.key[1]
            assert chart.curves[second.key[1]].raw.opts["pen"].color().alpha() == round(255 * DIM_FACTOR)
        QApplication.sendEvent(first, QEvent(QEvent.Type.Leave))
        assert all(chart.emphasis is None for chart in w.charts.charts.values())
        second.click()
        assert all(chart.hidden(second.key[1]) for chart in w.charts.charts.values()) and second.font().strikeOut()
        second.click()
        assert not any(chart.hidden(second.key[1]) for chart in w.charts.charts.values())

        for theme in (LIGHT, DARK):
            w.dark.setChecked(theme is DARK)
            qtbot.waitUntil(lambda t=theme: w.charts.charts["loss"].backgroundBrush().color() == QColor(t.chart_bg),
                            timeout=2000)
            lr = w.config.rows.index("lr")
            assert w.config.table.item(lr, 0).background().color() == QColor(theme.diff_bg)

        w.table.selectRow(0)  # only compared runs wear a swatch
        assert w.table_model.data(w.table_model.index(0, run_column), Qt.ItemDataRole.DecorationRole) is not None
        assert w.table_model.data(w.table_model.index(1, run_column), Qt.ItemDataRole.DecorationRole) is None
    finally:
        w.close()
