"""The Charts model without a display, on a real LocalStore: where each curve's points come from (memory,
the store's tiers, each attempt's tiers, a group's runs' tiers, the agent's tiers), the x axis, groups,
runs added and removed, and live chunks (a curve read from tiers never decodes one)."""

from __future__ import annotations

import numpy as np
import pytest

from pilothouse.gui.charts_model import GROUP, OLD, ChartsModel
from pilothouse.gui.curves import Axis
from pilothouse.gui.local_store import LocalStore
from pilothouse.gui.lod import Series
from pilothouse.gui.remote_tiers import RemoteSeries, RemoteTiers
from pilothouse.gui.stored_series import StoredGroup, StoredPieces, StoredSeries
from pilothouse.wire.entries import Entry
from pilothouse.wire.messages import pack

A = "tcp://127.0.0.1:7001"
LONG = 500  # points of "loss": more than the model's stored_points below, so read from the tiers
T0 = 1.7e9


def chunk(id: int, run: str, metric: str, steps, vals, t0: float = T0) -> Entry:
    steps = np.asarray(steps, np.int64)
    vals = np.asarray(vals, np.float64)
    return Entry(id, run, "m", metric, 0, len(steps), steps.tobytes(), vals.tobytes(),
                 (t0 + steps).astype(np.float64).tobytes(), None)


def run_dict(run: str, lr: int = 1, seed: int = 1, **more) -> dict:
    return {"id": run, "project": "p", "name": f"lr{lr}-seed{seed}", "status": "running", "created": 1.0,
            "config": {"lr": lr, "seed": seed}, **more}


@pytest.fixture
def store(tmp_path):
    """Runs r0..r3 (lr 1, 1, 2, 2; seed 1, 2, 1, 2), each a long "loss" and a short "lr"."""
    store = LocalStore(tmp_path / "s.sqlite")
    store.put_runs(A, [run_dict(f"r{i}", lr, seed) for i, (lr, seed) in enumerate([(1, 1), (1, 2), (2, 1), (2, 2)])])
    steps = np.arange(LONG)
    page = [e for i in range(4) for e in (chunk(2 * i + 1, f"r{i}", "loss", steps, np.sin(steps / 50) + i),
                                         chunk(2 * i + 2, f"r{i}", "lr", steps[:10], np.full(10, 0.1)))]
    store.write_page(A, page, len(page))
    yield store
    store.close()


def model_of(store: LocalStore, runs: list[str], **settings) -> ChartsModel:
    model = ChartsModel()
    model.stored_points = 100
    for name, value in settings.items():
        setattr(model, name, value)
    model.show_runs([(A, r) for r in runs], store)
    return model


def sources(model: ChartsModel, metric: str) -> dict[str, type]:
    return {name: type(c.source) for name, c in model.curves[metric].items()}


def test_a_long_metric_is_read_from_the_store_and_a_short_one_held(store):
    model = model_of(store, ["r0", "r1"])
    assert sources(model, "loss") == {"r0": StoredSeries, "r1": StoredSeries}
    assert sources(model, "lr") == {"r0": Series, "r1": Series}
    assert model.curves["loss"]["r0"].source.x_range() == (0.0, LONG - 1.0)
    model.stored_points = LONG  # no longer longer than that: held in memory on the next read
    model.reload()
    assert sources(model, "loss") == {"r0": Series, "r1": Series} and len(model.curves["loss"]["r0"].source) == LONG


def test_the_x_axis_is_a_value_and_every_curve_follows_it(store):
    model = model_of(store, ["r0"])
    assert model.axis is Axis.STEP and model.curves["lr"]["r0"].source.x_range() == (0.0, 9.0)
    model.set_axis(Axis.TIME)
    assert model.curves["lr"]["r0"].source.x_range() == (T0, T0 + 9)  # read again at wall times
    assert model.curves["loss"]["r0"].source.by_time
    model.set_group_by("config:lr")  # groups align their runs by step
    assert model.axis is Axis.STEP


def test_runs_added_and_removed_keep_their_colors(store):
    model = model_of(store, ["r0"])
    slot = model.slots[(A, "r0")]
    model.show_runs([(A, "r0"), (A, "r2")], store)
    assert set(model.curves["lr"]) == {"r0", "r2"} and model.slots[(A, "r0")] == slot
    assert [label for _, label, _ in model.legend()] == ["lr1-seed1", "lr2-seed1"]
    model.show_runs([(A, "r2")], store)
    assert set(model.curves["lr"]) == set(model.curves["loss"]) == {"r2"} and model.keys == [(A, "r2")]
    model.show_runs([], store)
    assert model.curves == {} and model.legend() == []


def test_groups_read_long_metrics_from_their_runs_tiers_and_band_short_ones_in_memory(store):
    model = model_of(store, ["r0", "r1", "r2", "r3"])
    assert model.group_keys == ["lr", "seed"]  # the config keys that tell the runs apart
    assert model.set_group_by("config:lr") and not model.set_group_by("config:lr")
    names = {GROUP + "lr=1", GROUP + "lr=2"}
    assert sources(model, "loss") == dict.fromkeys(names, StoredGroup) and "loss" not in model.points
    assert set(model.curves["lr"]) == names and set(model.points["lr"]) == {(A, f"r{i}") for i in range(4)}
    bands, _ = model.update_bands()
    mean = model.curves["lr"][GROUP + "lr=1"].source
    assert len(bands) == 2 and mean.x_range() == (0.0, 9.0) and mean.y_range() == (0.1, 0.1)
    assert model.constant["lr"] == 0.1  # every group's mean holds one value: folded
    assert [text for _, text, _ in model.legend()] == ["lr=1 · 2 runs", "lr=2 · 2 runs"]

    model.set_group_by("name:seed(")  # a bad pattern: said, and the runs drawn ungrouped
    assert "bad name pattern" in model.group_note and set(model.curves["lr"]) == {"r0", "r1", "r2", "r3"}
    model.set_group_by(None)
    assert model.group_note == "" and sources(model, "loss")["r0"] is StoredSeries


def test_a_run_the_store_lacks_is_drawn_from_its_agents_tiers_on_the_step_axis(store):
    store.put_runs(A, [run_dict("far", points=10_000, summary={"loss": 1.0, "acc": 0.5})])
    remote = RemoteTiers(timeout=0.2)  # no agent answers: the curves stand empty meanwhile
    try:
        model = model_of(store, ["far", "r0"], remote=remote, remote_gap=1000)
        assert model.remote_keys == {(A, "far")} and sources(model, "acc") == {"far": RemoteSeries}
        assert sources(model, "loss") == {"far": RemoteSeries, "r0": StoredSeries}
        assert model.remote_answered(A) == ["acc", "loss"] and not model.remote_filled(store)
        model.set_axis(Axis.TIME)  # the agent answers steps only: read from the store instead
        assert not model.remote_keys and "acc" not in model.curves
    finally:
        remote.close()


def test_a_stored_curves_live_chunk_is_not_decoded_and_a_held_ones_is(store):
    model = model_of(store, ["r0"])
    live = chunk(9, "r0", "loss", [LONG], [40.0])
    store.write_page(A, [live], 9)  # the link stores a page before the UI hears of it
    undecodable = live._replace(steps=b"\x00" * 3, vals=b"", times=b"")  # what the UI hears: never read
    change = model.add_entries(A, [undecodable])
    assert model.decoded == 0 and change.grew == {"loss"} and not change.reload
    assert model.curves["loss"]["r0"].source.x_range() == (0.0, float(LONG))  # the store's point, not the chunk's
    assert model.curves["loss"]["r0"].source.y_range()[1] == 40.0

    with pytest.raises(ValueError):  # a held curve's chunk is decoded: this one cannot be
        model.add_entries(A, [chunk(10, "r0", "lr", [10], [0.2])._replace(steps=b"\x00" * 3)])
    change = model.add_entries(A, [chunk(11, "r0", "lr", [10, 11], [0.2, 0.3])])
    assert model.decoded == 1 and change.grew == {"lr"} and len(model.curves["lr"]["r0"].source) == 12
    assert "lr" not in model.constant and change.relayout  # it moved: back in the grid
    assert model.add_entries(A, [chunk(12, "r5", "lr", [1], [1.0])]).grew == set()  # not charted: ignored


def test_a_new_metric_arriving_live_gets_a_chart_held_in_memory(store):
    model = model_of(store, ["r0"])
    change = model.add_entries(A, [chunk(9, "r0", "acc", [0, 1], [0.5, 0.6])])
    assert [(metric, c.name) for metric, c in change.added] == [("acc", "r0")] and change.relayout
    assert sources(model, "acc") == {"r0": Series}


def resumed_store(tmp_path) -> LocalStore:
    """r1: attempt 1 logs steps 0..299, attempt 2 (an hour later) resumes from step 200 to 399."""
    store = LocalStore(tmp_path / "resumed.sqlite")
    store.put_runs(A, [run_dict("r1", created=T0)])
    resumed = Entry(3, "r1", "e", None, 0, 0, None, None, None,
                    pack({"event": "resumed", "attempt": 2, "host": "h", "after": "crashed", "started": T0 + 3600,
                          "time": T0 + 3600}))
    store.write_page(A, [chunk(1, "r1", "loss", np.arange(300), np.ones(300)),
                         chunk(2, "r1", "lr", np.arange(5), np.ones(5)), resumed,
                         chunk(4, "r1", "loss", np.arange(200, 400), -np.ones(200), T0 + 3600)], 4)
    return store


def test_a_long_resumed_run_is_read_from_each_attempts_tiers(tmp_path):
    store = resumed_store(tmp_path)
    model = model_of(store, ["r1"])
    assert sources(model, "loss") == {"r1": StoredPieces, "r1" + OLD: StoredPieces}
    kept, old = model.curves["loss"]["r1"], model.curves["loss"]["r1" + OLD]
    assert old.faint and kept.source.x_range() == (0.0, 399.0) and old.source.x_range() == (200.0, 299.0)
    assert [m.x for m in model.marks("loss") if m.resume] == [200.0]
    live = chunk(5, "r1", "loss", [400], [-1.0], T0 + 3600)
    store.write_page(A, [live], 5)
    assert model.add_entries(A, [live._replace(steps=b"")]).grew == {"loss"} and model.decoded == 0
    assert kept.source.x_range() == (0.0, 400.0)

    lr = chunk(6, "r1", "lr", [300], [2.0], T0 + 3600)  # attempt 2's first "lr": its tiers join the curve
    store.write_page(A, [lr], 6)
    assert model.add_entries(A, [lr._replace(steps=b"")]).reload and model.decoded == 0
    assert model.curves["lr"]["r1"].source.x_range() == (0.0, 300.0)
    store.close()


def test_a_resume_event_reads_the_charts_again(tmp_path):
    store = resumed_store(tmp_path)
    model = model_of(store, ["r1"], stored_points=10_000)  # every point held: split in memory
    assert sources(model, "loss") == {"r1": Series, "r1" + OLD: Series}
    assert model.curves["loss"]["r1" + OLD].source.x_range() == (200.0, 299.0)
    event = Entry(5, "r1", "e", None, 0, 0, None, None, None,
                  pack({"event": "resumed", "attempt": 3, "host": "h", "after": "crashed", "started": T0 + 7200,
                        "time": T0 + 7200}))
    store.write_page(A, [event], 5)
    assert model.add_entries(A, [event]).reload and len(model.timelines[(A, "r1")].attempts) == 3
    store.close()


def test_pins_are_kept_in_the_store(store):
    model = model_of(store, ["r0"])
    model.pin("lr")
    model.pin("loss")
    model.pin("lr", False)
    assert model.pinned == ["loss"] and store.setting("pinned_charts") == ["loss"]
    assert model_of(store, ["r0"]).pinned == ["loss"]  # the next app start


def test_each_grouping_keeps_its_colors_when_the_user_switches_back_and_forth(store):
    """Ungrouped, by lr, by seed, and back: every run and every group has the color it had the last
    time that view was shown (a color that changes with a toggle reads as another run)."""
    model = model_of(store, ["r0", "r1", "r2", "r3"])
    seen: dict[str | None, dict] = {}
    for mode in (None, "config:lr", "config:seed", None, "config:lr", "config:seed", "config:lr", None):
        model.set_group_by(mode)
        colors = {owner: slot for owner, _, slot in model.legend()}
        assert len(set(colors.values())) == len(colors)  # told apart within the view
        if mode in seen:
            assert colors == seen[mode], mode
        seen[mode] = colors
    assert len(seen[None]) == 4 and len(seen["config:lr"]) == len(seen["config:seed"]) == 2
