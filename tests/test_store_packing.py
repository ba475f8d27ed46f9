"""The app store packs a followed run's small metric entries, on real SQLite files: every point
comes back bit for bit, charts read the same views, crosshairs and zooms from the packed rows, a
resumed run's attempts stay apart, a packed part's rest above the cursor is left alone, sizes shrink,
a step undone by a full disk changes nothing, and the store writer packs between its writes."""

from __future__ import annotations

import sqlite3
import struct
import threading

import numpy as np
import pytest
from support.disk import fill_disk
from support.tier_records import same_rows
from support.waiting import wait_until

from pilothouse.gui.local_store import LocalStore
from pilothouse.gui.store_packing import StorePacker
from pilothouse.gui.store_writer import StoreWriter, Write
from pilothouse.store.packing import MIN_ROWS
from pilothouse.wire.entries import Entry
from pilothouse.wire.messages import pack

pytest_plugins = ["support.disk"]  # small_disk

A = "tcp://127.0.0.1:7001"
SPECIAL = [np.nan, np.inf, -np.inf, -0.0, 5e-324, struct.unpack("<d", struct.pack("<Q", 0x7FF8DEADBEEF0001))[0]]


def small_entries(first_id: int, metric: str, steps: np.ndarray, vals: np.ndarray, times: np.ndarray,
                  per: int = 1, run: str = "r1") -> list[Entry]:
    """One entry per ``per`` points, as a followed run's pages bring them."""
    return [Entry(first_id + i, run, "m", metric, i % 2, len(steps[at:at + per]), steps[at:at + per].tobytes(),
                  vals[at:at + per].tobytes(), times[at:at + per].tobytes(), None)
            for i, at in enumerate(range(0, len(steps), per))]


def pack_all(store: LocalStore) -> int:
    store.fold_tiers()  # as the writer does within FOLD_SECONDS: waiting entries are not packed
    packer = StorePacker(store)
    joined = 0
    while packer.pending():
        joined += packer.step()
    return joined


def seen(store: LocalStore) -> dict:
    """What readers of the store get: every point, views at three zooms, a crosshair, the tiers."""
    out = {}
    for metric in ("loss", "gpu/util"):
        steps, vals, times = store.series(A, "r1", metric)
        out[metric] = (steps.tobytes(), vals.tobytes(), times.tobytes())
        for x0, x1, pixels in ((0, 6000, 500), (1000, 1400, 300), (2500, 2520, 100)):
            view = store.view(A, "r1", metric, x0, x1, pixels)
            out[metric, x0] = (view.level, view.xs.tobytes(), view.ys.tobytes(), view.marks.tobytes())
        out[metric, "nearest"] = store.nearest(A, "r1", metric, 2503.4)
    return out


def test_packing_keeps_every_point_and_every_view_and_shrinks_the_store(tmp_path):
    rng = np.random.default_rng(3)
    steps = np.arange(6000, dtype=np.int64)
    vals = rng.standard_normal(6000)
    vals[rng.integers(0, 6000, len(SPECIAL))] = SPECIAL
    times = 1.7e9 + steps * 0.5
    store = LocalStore(tmp_path / "s.sqlite")
    store.put_runs(A, [{"id": "r1", "status": "running"}])
    page = small_entries(1, "loss", steps[:3000], vals[:3000], times[:3000])
    page.append(Entry(3001, "r1", "m", "loss", 0, 1000, steps[3000:4000].tobytes(), vals[3000:4000].tobytes(),
                      times[3000:4000].tobytes(), None))  # a large entry between small ones stays as it is
    page += small_entries(3002, "loss", steps[4000:], vals[4000:], times[4000:])
    page += small_entries(6000, "gpu/util", steps, np.round(vals * 10) ** 2, times, per=5)
    store.write_page(A, page, 7199)
    rest = small_entries(7200, "gpu/util", steps[:2] + 10_000, vals[:2], times[:2], per=2)
    store.write_page(A, rest, 7199)  # above the cursor: a packed entry's part, its rest still to come
    before, size = seen(store), store.run_sizes()[(A, "r1")]
    rows = store.db.execute("SELECT COUNT(*) FROM entries").fetchone()[0]

    assert pack_all(store) == 3000 + 2000 + 1200  # every small entry at or below the cursor
    assert seen(store) == before  # every point bit for bit, every view and crosshair the same
    packed = store.db.execute("SELECT COUNT(*) FROM entries").fetchone()[0]
    assert packed < rows / 50 and store.run_sizes()[(A, "r1")] < size / 3
    assert store.db.execute("SELECT n, vals IS NOT NULL FROM entries WHERE id=3001").fetchone() == (1000, 1)
    assert store.db.execute("SELECT n, vals IS NOT NULL FROM entries WHERE id=7200").fetchone() == (2, 1)
    assert pack_all(store) == 0  # nothing left worth packing
    store.write_page(A, [rest[0]._replace(n=1, steps=rest[0].steps[8:], vals=rest[0].vals[8:],
                                          times=rest[0].times[8:])], 7200)  # the part's rest: still appended
    assert store.series(A, "r1", "gpu/util")[0][-3:].tolist() == [10_000, 10_001, 10_001]
    store.close()


def test_a_resumed_runs_attempts_stay_apart_in_packed_rows(tmp_path):
    """Attempt 2 logs steps 300.. again: a packed row may hold both attempts' points, and each
    attempt's tiers still read only their own (the chart's curve and its superseded points)."""
    store = LocalStore(tmp_path / "s.sqlite")
    store.put_runs(A, [{"id": "r1", "status": "running", "created": 1.7e9}])
    one, two = np.arange(600, dtype=np.int64), np.arange(300, 900, dtype=np.int64)
    resumed = Entry(601, "r1", "e", None, 0, 0, None, None, None,
                    pack({"event": "resumed", "attempt": 2, "started": 1.7e9 + 1000.0}))
    store.write_page(A, small_entries(1, "loss", one, np.ones(600), 1.7e9 + one) + [resumed]
                     + small_entries(602, "loss", two, -np.ones(600), 1.7e9 + 1000 + two), 1201)
    views = {key: store.view(A, "r1", key, 280, 320, 50) for key in ("loss", "loss\x1f2")}
    assert pack_all(store) == 1200
    assert store.db.execute("SELECT COUNT(*) FROM entries WHERE kind='m'").fetchone()[0] == 1  # both attempts in one
    for key, view in views.items():
        again = store.view(A, "r1", key, 280, 320, 50)
        assert again.xs.tolist() == view.xs.tolist() and again.ys.tolist() == view.ys.tolist()
    assert set(store.view(A, "r1", "loss\x1f2", 280, 320, 50).ys.tolist()) == {-1.0}
    assert set(store.view(A, "r1", "loss", 290, 320, 50).ys.tolist()) == {1.0}
    store.close()


def test_a_reader_hears_of_a_resume_another_connection_wrote(tmp_path):
    """The UI reads the store through its own connection: a resume the writer stores after the UI
    first read the run still keeps the attempts apart in what the UI reads."""
    writer, reader = LocalStore(tmp_path / "s.sqlite"), LocalStore(tmp_path / "s.sqlite")
    one, two = np.arange(600, dtype=np.int64), np.arange(300, 900, dtype=np.int64)
    writer.write_page(A, small_entries(1, "loss", one, np.ones(600), 1.7e9 + one), 600)
    assert set(reader.view(A, "r1", "loss", 280, 320, 50).ys.tolist()) == {1.0}
    resumed = Entry(601, "r1", "e", None, 0, 0, None, None, None,
                    pack({"event": "resumed", "attempt": 2, "started": 1.7e9 + 1000.0}))
    writer.write_page(A, [resumed] + small_entries(602, "loss", two, -np.ones(600), 1.7e9 + 1000 + two), 1201)
    assert pack_all(writer) == 1200
    assert set(reader.view(A, "r1", "loss", 290, 320, 50).ys.tolist()) == {1.0}
    assert set(reader.view(A, "r1", "loss\x1f2", 290, 320, 50).ys.tolist()) == {-1.0}


def test_a_store_opened_again_packs_what_it_held_and_tiers_built_again_read_the_packed_rows(tmp_path):
    path = tmp_path / "s.sqlite"
    store = LocalStore(path)
    steps = np.arange(MIN_ROWS * 3, dtype=np.int64)
    store.write_page(A, small_entries(1, "loss", steps, steps * 0.5, 1.7e9 + steps), len(steps))
    store.close()
    store = LocalStore(path)  # a packer knows nothing of the rows yet: it counts each run's metrics first
    assert pack_all(store) == len(steps)
    tiers = store.db.execute("SELECT * FROM tiers ORDER BY metric, level, block").fetchall()
    store.db.execute("DROP TABLE tiers")
    store.db.execute("PRAGMA user_version=0")  # as a file from before the schema was numbered
    store.close()
    store = LocalStore(path)  # built again from the packed rows: the same blocks, listing the packed entry
    assert same_rows(store.db.execute("SELECT * FROM tiers ORDER BY metric, level, block").fetchall(), tiers, 5)
    assert store.nearest(A, "r1", "loss", 100.2) == (100, 50.0)
    store.close()


def test_a_packing_step_on_a_full_disk_is_undone_whole_and_done_once_space_returns(small_disk):
    store = LocalStore(small_disk / "s.sqlite")
    steps = np.arange(2 * MIN_ROWS, dtype=np.int64)
    store.write_page(A, small_entries(1, "loss", steps, np.sqrt(steps), 1.7e9 + steps), len(steps))
    store.fold_tiers()  # as the writer does within FOLD_SECONDS: waiting entries are not packed
    before = store.series(A, "r1", "loss")
    packer = StorePacker(store)
    packer.step()  # counts the run's metrics (a read)
    fill_disk(small_disk / "filler")
    with pytest.raises(sqlite3.OperationalError, match="full"):
        while packer.pending():
            packer.step()
    assert store.db.execute("SELECT COUNT(*) FROM entries").fetchone()[0] == len(steps)  # nothing half done
    assert all(a.tobytes() == b.tobytes() for a, b in zip(store.series(A, "r1", "loss"), before))
    (small_disk / "filler").unlink()
    while packer.pending():
        packer.step()
    assert store.db.execute("SELECT COUNT(*) FROM entries").fetchone()[0] == 1
    assert all(a.tobytes() == b.tobytes() for a, b in zip(store.series(A, "r1", "loss"), before))
    store.close()


class _Link:
    def __init__(self) -> None:
        self.heard = threading.Event()
        self.errors: list[Exception] = []

    def written(self, entries, cursor, runs) -> None:
        self.heard.set()

    def failed(self, error: Exception) -> None:
        self.errors.append(error)
        self.heard.set()

    def busy(self, message: str) -> None:
        pass

    def stopped(self) -> bool:
        return False


def test_the_store_writer_packs_between_its_writes(tmp_path):
    path = tmp_path / "s.sqlite"
    writer = StoreWriter.acquire(path)
    try:
        steps = np.arange(3000, dtype=np.int64)
        entries = small_entries(1, "loss", steps, np.sin(steps), 1.7e9 + steps)
        for at in range(0, 3000, 500):  # a followed run's pages
            link = _Link()
            writer.write(Write(A, entries[at:at + 500], at + 500, None, link))
            assert link.heard.wait(10) and not link.errors
        # the last pages wait for the tiers, then the writer, idle for IDLE_FOLD, folds and packs them too
        wait_until(lambda: writer.call(lambda store: store.db.execute("SELECT COUNT(*) FROM entries").fetchone()[0])
                   < 100, timeout=15, what="the store writer to fold and pack the run's small entries")
        got = writer.call(lambda store: store.series(A, "r1", "loss"))
        assert got[0].tolist() == steps.tolist() and got[1].tobytes() == np.sin(steps).tobytes()
    finally:
        writer.release()
