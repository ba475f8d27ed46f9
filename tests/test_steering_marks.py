"""Steering on the charts and the reward distribution chart, without a display: the Charts model's
marks for the commands a run applied (a real trainer steered through a real agent, then journal
bodies in the app's real store) and the one chart of bands the reward quantiles share."""

from __future__ import annotations

import getpass
import socket

import numpy as np
import pytest
from support.app_store import body, copy_all
from support.app_store import r1_chunk as chunk
from support.processes import finish, start_trainer
from support.steering_events import SPREAD, T0, quantiles, steered
from support.waiting import wait_until

from pilothouse.client import Client
from pilothouse.gui import distribution
from pilothouse.gui.alerts import Marker
from pilothouse.gui.charts_model import ChartsModel
from pilothouse.gui.curves import Axis
from pilothouse.gui.local_store import LocalStore
from pilothouse.gui.lod import Series
from pilothouse.gui.stored_series import StoredSeries

A = "tcp://127.0.0.1:7001"
KEY = (A, "r1")
DIST = distribution.CHART

STEERED = """
import os
run = ph.init(project="marks", name="steered", agent=URL, heartbeat=0.2, config={"lr": 3e-4}, tunable={"lr": None})
run.on_checkpoint(lambda step: os.path.join(ARGS[0], f"ckpt-{step}.pt"))
print(run.id, flush=True)
for step in range(100000):
    if run.sync(step).stop:
        break
    run.log({"loss": 1.0 / (step + 1), "rollouts/reward/p50": step / 100}, step=step)
    time.sleep(0.01)
run.finish()
"""


@pytest.fixture
def store(tmp_path):
    store = LocalStore(tmp_path / "app.sqlite")
    store.put_runs(A, [{"id": r, "project": "p", "name": r, "status": "running", "created": 1.0} for r in ("r1", "r2")])
    yield store
    store.close()


def steering(model: ChartsModel, metric: str = "loss") -> list[tuple[float, str]]:
    return [(m.x, m.label) for m in model.marks(metric) if m.steering]


def test_the_commands_a_real_trainer_applied_are_marked_with_what_changed_and_who_asked(tmp_path, agent_proc):
    trainer = start_trainer(tmp_path, STEERED, agent_proc.url, str(tmp_path))
    run_id = trainer.stdout.readline().strip()
    store = LocalStore(tmp_path / "app.sqlite")
    try:
        with Client(agent_proc.url, timeout=10) as c:
            wait_until(lambda: any(r["id"] == run_id and r["last_step"] for r in c.runs()), what="the first steps")
            gui = {"client": "gui"}
            steps = [c.command(run_id, "set", {"lr": 1e-4}, wait=10, who=gui)["step"],
                     c.command(run_id, "set", {"lr": 5e-5}, wait=10)["step"],
                     c.command(run_id, "pause", wait=10, who=gui)["step"],
                     c.command(run_id, "checkpoint", wait=10)["step"],
                     c.command(run_id, "resume", wait=10)["step"]]
            assert c.command(run_id, "set", {"lr": "fast"}, wait=10)["state"] == "rejected"  # asked, never applied
            copy_all(c, store, agent_proc.url)
            model = ChartsModel()
            model.show_runs([(agent_proc.url, run_id)], store)
            me = f"{getpass.getuser()}@{socket.gethostname()}"
            # the first set: the value it replaced is the run's config as the agent held it
            assert steering(model) == [(float(steps[0]), "lr 0.0003 → 0.0001"), (float(steps[1]), "lr 0.0001 → 5e-05"),
                                       (float(steps[2]), "paused"), (float(steps[3]), "checkpoint saved"),
                                       (float(steps[4]), "resumed")]
            tips = [m.tooltip for m in model.marks("loss") if m.steering]
            assert tips[0].startswith(f"steered: lr 0.0003 → 0.0001 at step {steps[0]}\nasked by {me} (gui)\n"
                                      "set lr=0.0001")
            assert f"asked by {me} (cli)" in tips[1] and f"paused at step {steps[2]} by {me} (gui)" in tips[2]
            assert str(tmp_path / f"ckpt-{steps[3]}.pt") in tips[3]
            assert steering(model, DIST) == steering(model)  # every chart of the run, its distribution's too

            cursor = store.cursor(agent_proc.url)  # live: the answer arrives after the charts were built
            late = c.command(run_id, "set", {"lr": 2e-4}, wait=10)["step"]
            change = model.add_entries(agent_proc.url, copy_all(c, store, agent_proc.url, after=cursor))
            assert change.marks and steering(model)[-1] == (float(late), "lr 5e-05 → 0.0002")
            model.reload()  # the same marks read back from the store
            assert steering(model)[-1] == (float(late), "lr 5e-05 → 0.0002") and len(steering(model)) == 6
            c.command(run_id, "stop", wait=10)
        finish(trainer)
    finally:
        store.close()
        if trainer.poll() is None:
            trainer.kill()


def test_only_applied_answers_are_marks_at_their_step_or_time_and_the_toggle_hides_them(store):
    page = [chunk(1, "loss", range(20), np.ones(20))]
    page += steered(2, "r1", "c1", "set", 5, values={"lr": 3e-4, "warmup": 10})
    page += steered(4, "r1", "c2", "set", 8, state="rejected", values={"lr": -1})  # refused: no mark
    page += steered(6, "r1", "c3", "set", 9, state="scheduled", values={"lr": 1e-4})  # not yet in effect
    page += steered(8, "r1", "c3", "set", 12, values={"lr": 1e-4}, who=None)  # its command read above
    page += steered(10, "r1", "c4", "pause", 15, who=None)  # its command is not in the store
    page += [body(12, "r1", "e", {"event": "checkpoint", "time": T0 + 16, "detail": "saved unasked", "step": 16})]
    store.write_page(A, page, 12)
    model = ChartsModel()
    model.show_runs([KEY], store)
    assert steering(model) == [(5.0, "lr=0.0003, warmup=10"), (12.0, "lr 0.0003 → 0.0001"), (15.0, "paused")]
    assert "asked by alice@laptop (cli)" in model.marks("loss")[1].tooltip
    assert "asked by someone unknown" in model.marks("loss")[2].tooltip

    model.show_steering = False
    assert steering(model) == [] and model.marks("loss") == []
    model.show_steering = True
    model.set_axis(Axis.TIME)
    assert [x for x, _ in steering(model)] == [T0 + 5, T0 + 12, T0 + 15]  # when the agent journaled each answer

    model.alert_markers = {KEY: [Marker(3, "low-reward", "rollouts/reward/p10", "p10 < 0", "firing", T0 + 3)]}
    model.set_axis(Axis.STEP)
    assert [m.label for m in model.marks(DIST) if not m.steering] == ["⚠ low-reward"]  # a quantile's alert
    assert [m.label for m in model.marks("loss") if not m.steering] == []


def test_live_answers_of_charted_runs_are_marked_and_others_ignored(store):
    store.write_page(A, [chunk(1, "loss", range(5), np.ones(5)), *steered(2, "r1", "c1", "set", 2, values={"lr": 1.0})],
                     3)
    model = ChartsModel()
    model.show_runs([KEY], store)
    again = steered(2, "r1", "c1", "set", 2, values={"lr": 1.0})  # already read from the store: below its cursor
    assert not model.add_entries(A, again).marks
    change = model.add_entries(A, steered(4, "r1", "c2", "set", 4, values={"lr": 0.5})
                               + steered(6, "r2", "c3", "pause", 4))  # r2 is not charted
    assert change.marks and steering(model) == [(2.0, "lr=1.0"), (4.0, "lr 1.0 → 0.5")]
    assert not model.add_entries(A, [chunk(8, "loss", [5], [1.0])]).marks


def test_reward_quantiles_share_one_chart_of_bands_and_follow_live_points(store):
    steps = np.arange(30)
    store.write_page(A, quantiles(1, "r1", steps, steps / 30) + quantiles(7, "r2", steps, steps / 60), 12)
    model = ChartsModel()
    model.show_runs([KEY, (A, "r2")], store)
    assert set(model.curves) == {DIST, "rollouts/reward/mean"}  # no line chart per quantile; the mean keeps its own
    assert sorted(model.curves[DIST]) == sorted(f"{r}#{q}" for r in ("r1", "r2") for q in SPREAD)
    for q, d in SPREAD.items():
        source = model.curves[DIST][f"r1#{q}"].source
        assert isinstance(source, Series) and np.array_equal(source.y, steps / 30 + d)
    assert distribution.split("r1#p10") == ("r1", "p10") and distribution.split("r1") == ("r1", None)

    change = model.add_entries(A, [chunk(13, "rollouts/reward/p90", [30], [9.0])])
    assert change.grew == {DIST} and model.curves[DIST]["r1#p90"].source.y[-1] == 9.0
    assert len(model.curves[DIST]["r1#p10"].source) == 30

    model.stored_points = 10  # longer than that: every quantile read from the store's tiers, still one chart
    model.reload()
    assert all(isinstance(c.source, StoredSeries) for c in model.curves[DIST].values())
    assert model.curves[DIST]["r1#max"].source.x_range() == (0.0, 29.0)
    model.stored_points = 10_000
    model.set_group_by(r"name:\d")  # a group's quantile is its runs' mean: line charts, as any metric's
    assert DIST not in model.curves and "rollouts/reward/p10" in model.curves
