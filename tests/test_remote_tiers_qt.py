"""A run the app's store lacks is charted from its agent's tiers (a real agent, a real trainer,
offscreen Qt): drawn per pixel column with the spike where it is, asked on the fetch thread,
and charted from the store once the store holds the run."""

from __future__ import annotations

import os
import socket
import time
from pathlib import Path

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")

import numpy as np
import pytest

pytest.importorskip("PySide6")
pytest.importorskip("pytestqt")

from support.messages import batch_fields
from support.processes import AgentProcess, start_trainer
from support.sockets import free_port
from support.waiting import wait_until

from pilothouse.gui._qt.charts import ChartsPanel
from pilothouse.gui.local_store import LocalStore
from pilothouse.gui.remote_tiers import RemoteSeries, RemoteTiers
from pilothouse.gui.tiers import draw
from pilothouse.node.journal import Store
from pilothouse.store.tiers import level_for, levels
from pilothouse.wire.records import REC_METRICS

TRAINER = """
run = ph.init(project="remote", name="never-seen", agent=URL)
print(run.id, flush=True)
for step in range(int(ARGS[0])):
    run.log({"loss": math.sin(step / 3000.0) + (25.0 if step == 54_321 else 0.0), "lr": 0.1}, step=step)
    if step % 5000 == 0:
        time.sleep(0.01)
run.finish()
"""


def test_a_run_the_store_lacks_is_drawn_from_the_agents_tiers_then_from_the_store(qtbot, tmp_path):
    agent = AgentProcess(tmp_path / "agent", free_port()).start()
    remote = RemoteTiers()
    store = LocalStore(tmp_path / "app.sqlite")
    try:
        trainer = start_trainer(tmp_path, TRAINER, agent.url, "120000")
        run = trainer.stdout.readline().strip()
        assert trainer.wait(120) == 0, trainer.stderr.read()
        with agent.client() as client:
            wait_until(lambda: next(r for r in client.runs() if r["id"] == run)["points"] == 240_000,
                       what="every point stored")
            store.put_runs(agent.url, client.runs())  # the run list, as a link's first refresh: no points yet
            steps, vals, times = client.series(run, "loss")
        answered: list[str] = []
        remote.on_answer = answered.append  # on the fetch thread: the app turns it into a signal
        panel = ChartsPanel()
        qtbot.addWidget(panel)
        panel.resize(1200, 800)
        panel.show()
        panel.model.remote = remote
        panel.model.remote_gap = 1000  # the store lacks 240 K points: drawn from the agent (the app waits for 1 M)
        panel.show_runs([(agent.url, run)], store)
        qtbot.wait(200)  # the grid settles: the charts keep their width
        assert panel.model.remote_keys == {(agent.url, run)} and set(panel.charts) == {"loss", "lr"}
        chart = panel.charts["loss"]
        curve = chart.curves[run]
        assert isinstance(curve.series, RemoteSeries)
        qtbot.waitUntil(lambda: curve.series.x_range() == (0.0, 119_999.0), timeout=10_000)  # the extent came
        chart.set_follow(True)

        def shown() -> tuple[float, float, int]:
            (x0, x1), _ = chart.getViewBox().viewRange()
            return x0, x1, max(int(chart.getViewBox().width() * chart.devicePixelRatioF()), 1)

        def drawn() -> bool:  # an answer that serves the range and width now shown has come and is drawn
            panel.remote_answered(agent.url)
            chart.flush()
            return curve.series.answered(*shown())
        qtbot.waitUntil(drawn, timeout=10_000)
        got = remote.answer((agent.url, run, "loss"))
        x0, x1, pixels = shown()
        assert got.x0 <= x0 and x1 <= got.x1 and abs(got.pixels - pixels) <= 0.1 * pixels + 2  # padded a little
        chart.redraw()
        xs, ys = curve.raw.getData()
        x0, x1, pixels = got.x0, got.x1, got.pixels
        level = max(level_for(x0, x1, pixels), 0)
        want = draw(dict(levels(steps, vals, times))[level], level, x0, x1, pixels)  # the fold of the raw points
        assert got.level == level and len(got.records) <= pixels  # folded per column by the agent
        assert np.array_equal(xs, want.xs) and np.array_equal(ys, want.ys)
        assert len(xs) <= 5 * pixels  # per pixel column, not per point
        assert xs[ys == ys.max()].tolist() == [54_321.0] and ys.max() == pytest.approx(25.0, abs=1.0)  # the spike
        assert answered and set(answered) == {agent.url}

        chart.setXRange(54_000, 55_000, padding=0)  # zoomed: a new answer, asked while the old one is drawn
        qtbot.waitUntil(lambda: curve.series.answered(*shown()), timeout=10_000)
        assert 53_000 < remote.answer((agent.url, run, "loss")).x0 <= 54_000  # this range's answer, not the run's
        chart.redraw()
        xs, ys = curve.raw.getData()
        assert 54_321.0 in xs.tolist() and len(xs) < 1000

        with agent.client() as client:  # the link's feed catches up: the store now holds the run
            for page in client.history(run):
                store.write_page(agent.url, page.entries, page.cursor)
        assert panel.model.remote_filled(store)
        panel.show_runs([(agent.url, run)], store)
        assert not panel.model.remote_keys and not isinstance(panel.charts["loss"].curves[run].series, RemoteSeries)
    finally:
        remote.close()
        store.close()
        agent.stop()


METRICS, STEPS = 18, 100_000  # more metrics than one tiers request answers (16): a move is two requests
NAMES = [f"m/{i:02d}" for i in range(METRICS)]


def spike(i: int) -> tuple[int, float]:
    """Metric i's one spike: its step and value (the rest is a sine within ±1)."""
    return 1000 * (i + 1) + 321, 50.0 + i


def journal_with_a_long_run(data: Path) -> str:
    """A finished run of METRICS x STEPS points in the agent's journal at ``data``, written by the
    journal's own ingest of a trainer's record batches (made by the trainer's encoder); its id."""
    store = Store(data / "journal.sqlite")
    store.begin()
    store.upsert_run({"run": "long", "project": "never-seen", "name": "long", "host": socket.gethostname(), "pid": 1,
                      "config": {}}, time.time())
    store.commit()
    chunk = 10_000
    for lo in range(0, STEPS, chunk):
        steps = np.arange(lo, lo + chunk)
        vals = np.sin(steps / 5000.0)[:, None] + np.zeros(METRICS)
        for i in range(METRICS):
            at, value = spike(i)
            if lo <= at < lo + chunk:
                vals[at - lo, i] = value
        records = [[REC_METRICS, int(s), 1.7e9 + s, dict(zip(NAMES, row))] for s, row in zip(steps, vals.tolist())]
        store.begin()
        store.ingest(("long", 0, "s1"), lo + 1, lo + 1, batch_fields(records), time.time())
        store.commit()
    store.begin()
    store.set_status("long", "finished", time.time())
    store.commit()
    store.close()
    return "long"


def test_the_main_window_opens_a_run_it_never_saw_from_the_agents_tiers_then_from_its_store(window, qtbot, tmp_path):
    run = journal_with_a_long_run(tmp_path / "agent")
    agent = AgentProcess(tmp_path / "agent", free_port()).start()
    try:
        w = window([agent.url])  # an empty store: the window's link follows the journal from its start
        w.resize(1400, 2800)  # every chart (9 rows) in sight: a chart scrolled out of view is drawn once scrolled to
        w.charts.model.remote_gap = 1  # drawn from the agent until the store holds every point (the app waits for 1 M)
        # the link stops storing as soon as the run is listed, while the agent's tiers are checked: storing
        # 1.8 M points races the drawing (a fast store filled before the charts were drawn, or before a pan's
        # answer was, even when the link stopped once the run had opened), and the store's points are
        # checked after; the run then opens on its own, from the agent's tiers
        qtbot.waitUntil(lambda: w.runs.row((agent.url, run)) is not None, timeout=30_000)
        w.links.stop()
        qtbot.waitUntil(lambda: w.charts.model.remote_keys == {(agent.url, run)}, timeout=30_000)
        qtbot.waitUntil(lambda: sorted(w.charts.charts) == NAMES, timeout=30_000)
        assert w.charts.model.remote_keys == {(agent.url, run)}

        def shown(chart) -> tuple[float, float, int]:
            (x0, x1), _ = chart.getViewBox().viewRange()
            return x0, x1, max(int(chart.getViewBox().width() * chart.devicePixelRatioF()), 1)

        def drawn() -> bool:  # the window redrew every chart (on its own signal) with an answer serving its view
            if not w.charts.model.remote_keys:
                raise RuntimeError("the store filled before the agent's tiers were drawn")
            return all(c.series.answered(*shown(chart)) and c.shown is not None
                       and c.shown[0] is w.remote.answer(c.series.key).view.xs
                       for chart in w.charts.charts.values() for c in chart.curves.values())

        def held(name: str) -> tuple[np.ndarray, np.ndarray, int]:
            chart = w.charts.charts[name]
            (curve,) = chart.curves.values()
            assert isinstance(curve.series, RemoteSeries)
            return *curve.raw.getData(), shown(chart)[2]

        qtbot.waitUntil(drawn, timeout=20_000)
        for i, name in enumerate(NAMES):
            xs, ys, pixels = held(name)
            assert (xs.min(), xs.max()) == (0, STEPS - 1)  # the run's extent, as generated
            assert len(xs) <= 5 * pixels  # per pixel column, not per point
            assert ys.max() == spike(i)[1] and xs[ys.argmax()] == spike(i)[0]  # the spike, at its step
            assert ys.min() == pytest.approx(-1.0, abs=1e-3)

        at, value = spike(7)
        w.charts.charts[NAMES[0]].setXRange(at - 500, at + 1500, padding=0)  # the linked charts all move
        qtbot.waitUntil(drawn, timeout=20_000)
        xs, ys, pixels = held(NAMES[7])
        assert xs.min() >= at - 600 and xs.max() <= at + 1600 and len(xs) <= 5 * pixels  # this range's answer
        assert ys.max() == value and xs[ys.argmax()] == at
        xs, ys, _ = held(NAMES[0])
        assert ys.max() < 2.0  # metric 0's spike is outside this range

        w.links.start()
        qtbot.waitUntil(lambda: not w.charts.model.remote_keys, timeout=60_000)  # the link stored every point
        for i, name in enumerate(NAMES):
            (curve,) = w.charts.charts[name].curves.values()
            assert not isinstance(curve.series, RemoteSeries) and len(curve.series) == STEPS
        assert not w.remote.errors
    finally:
        agent.stop()
