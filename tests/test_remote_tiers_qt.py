"""A run the app's store lacks is charted from its agent's tiers (a real agent, a real trainer,
offscreen Qt): drawn per pixel column with the spike where it is, asked on the fetch thread,
and charted from the store once the store holds the run."""

from __future__ import annotations

import os

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")

import numpy as np
import pytest

pytest.importorskip("PySide6")
pytest.importorskip("pytestqt")

from conftest import AgentProcess, free_port, start_trainer, wait_until

from pilothouse.gui._qt.charts import ChartsPanel
from pilothouse.gui.local_store import LocalStore
from pilothouse.gui.remote_tiers import RemoteSeries, RemoteTiers
from pilothouse.gui.tiers import draw
from pilothouse.tiers import level_for, levels

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
            steps, vals, _ = client.series(run, "loss")
        answered: list[str] = []
        remote.on_answer = answered.append  # on the fetch thread: the app turns it into a signal
        panel = ChartsPanel()
        qtbot.addWidget(panel)
        panel.resize(1200, 800)
        panel.show()
        panel.remote = remote
        panel.remote_gap = 1000  # the store lacks 240 K points: drawn from the agent (the app waits for 1 M)
        panel.show_runs([(agent.url, run)], store)
        qtbot.wait(200)  # the grid settles: the charts keep their width
        assert panel.remote_keys == {(agent.url, run)} and set(panel.charts) == {"loss", "lr"}
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
        want = draw(dict(levels(steps, vals))[level], level, x0, x1, pixels)  # the fold of the raw points
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
        assert panel.remote_filled(store)
        panel.show_runs([(agent.url, run)], store)
        assert not panel.remote_keys and not isinstance(panel.charts["loss"].curves[run].series, RemoteSeries)
    finally:
        remote.close()
        store.close()
        agent.stop()
