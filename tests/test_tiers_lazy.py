"""The app store's tiers fold lazily (``pilothouse.gui.tiers``: a write notes what waits, ``fold_due``
folds it later in one pass): the blocks once folded equal those of folding every page as it comes,
byte for byte; before the fold every view already holds every min and max of the waiting points; a
fold committed by another connection between two reads never drops or doubles a point; and what
waits survives the store being closed and opened again.
"""

from __future__ import annotations

import numpy as np
from support.tier_records import spiky
from test_tiers import A, entries, split, tier_rows

from pilothouse.gui.local_store import LocalStore
from pilothouse.gui.tiers import FOLD_SECONDS


def pages(seed: int, n: int, pieces: int, integers: bool):
    """A spiky metric in pages of a few entries each; ``integers``: values whose sums are exact in any order."""
    rng = np.random.default_rng(seed)
    steps, vals = spiky(rng, n)
    if integers:
        vals = np.where(np.isfinite(vals), np.round(vals * 8), vals)
    page = entries(steps, vals, split(rng, len(steps), pieces))
    sizes = split(rng, len(page), pieces // 4)
    out, at = [], 0
    for size in sizes:
        out.append(page[at: at + size])
        at += size
    return steps, vals, out


def views(store: LocalStore, steps: np.ndarray) -> list[tuple]:
    """Views at four zooms (the raw points, level 0, a middle level, the whole run) and a crosshair."""
    lo, hi = float(steps.min()), float(steps.max())
    out = []
    for x0, x1, px in ((lo, lo + 200, 400), (lo, lo + 20_000, 300), (lo, hi, 50), (lo - 5, hi + 5, 7)):
        v = store.view(A, "r1", "loss", x0, x1, px)
        out.append(tuple(np.asarray(a).tobytes() for a in (v.xs, v.ys, v.marks, v.mins, v.maxs, v.starts, v.stops)))
    out.append(store.nearest(A, "r1", "loss", (lo + hi) / 2))
    out.append(tuple(store.summary(A, "r1", "loss")[0].tolist()))
    return out


def test_lazily_folded_blocks_equal_folding_every_page_byte_for_byte(tmp_path):
    steps, _, written = pages(3, 40_000, 160, integers=True)
    eager, lazy = LocalStore(tmp_path / "eager.sqlite"), LocalStore(tmp_path / "lazy.sqlite")
    for page in written:
        eager.write_page(A, page, page[-1].id)
        eager.fold_tiers()  # the fold of every write, as before folding waited
        lazy.write_page(A, page, page[-1].id)
    assert lazy.db.execute("SELECT COUNT(*) FROM tier_tail").fetchone()[0] == 1  # all of it still waits
    before = views(lazy, steps)  # every view, before the fold, from the waiting entries
    assert before == views(eager, steps)
    rows = tier_rows(lazy)
    assert rows and rows == tier_rows(eager)  # every column of every block, sums included
    assert views(lazy, steps) == before


def test_every_min_and_max_of_a_live_tail_is_in_the_view_before_the_fold(tmp_path):
    steps, vals, written = pages(9, 30_000, 120, integers=False)
    store = LocalStore(tmp_path / "s.sqlite")
    half = len(written) // 2
    for page in written[:half]:
        store.write_page(A, page, page[-1].id)
    store.fold_tiers()
    for page in written[half:]:
        store.write_page(A, page, page[-1].id)  # the live tail: waits
    assert store.tiers.waiting()
    tail_steps = np.concatenate([np.frombuffer(e.steps, np.int64) for p in written[half:] for e in p])
    x0, x1, px = float(steps.min()), float(steps.max()), 300
    view = store.view(A, "r1", "loss", x0, x1, px)
    inside = np.isin(steps, tail_steps)
    finite = inside & np.isfinite(vals)
    assert vals[finite].min() in view.mins and vals[finite].max() in view.maxs
    for column, (start, stop) in enumerate(zip(view.starts, view.stops)):
        held = (steps >= start) & (steps < stop) & np.isfinite(vals)
        if held.any():  # every column's extremes, the tail's included, exactly
            assert (view.mins[column], view.maxs[column]) == (vals[held].min(), vals[held].max())
    assert store.summary(A, "r1", "loss")[0]["count"] == len(steps) == store.points(A, "r1")


def test_a_fold_by_the_writer_between_two_reads_neither_drops_nor_doubles_a_point(tmp_path):
    steps, _, written = pages(4, 20_000, 80, integers=True)
    path = tmp_path / "s.sqlite"
    writer, reader = LocalStore(path), LocalStore(path)  # the store writer's connection and the UI's
    for page in written:
        writer.write_page(A, page, page[-1].id)
    want = views(reader, steps)
    with reader.tiers.snapshot():  # a frame in progress on the UI thread
        first = reader.summary(A, "r1", "loss")[0]["count"]
        writer.fold_tiers()  # committed meanwhile (WAL: the reader keeps its snapshot)
        assert reader.summary(A, "r1", "loss")[0]["count"] == first == len(steps)
    assert views(reader, steps) == want


def test_what_waits_survives_a_close_and_is_folded_when_due(tmp_path, monkeypatch):
    steps, _, written = pages(5, 10_000, 40, integers=True)
    path = tmp_path / "s.sqlite"
    store = LocalStore(path)
    for page in written:
        store.write_page(A, page, page[-1].id)
    want = views(store, steps)
    store.close()  # as if the app were killed: the entries wait in the file
    store = LocalStore(path)
    assert store.tiers.waiting() and views(store, steps) == want
    assert not store.tiers.fold_due()  # not due yet (just written)
    now = __import__("time").time()
    monkeypatch.setattr("pilothouse.gui.tiers.time.time", lambda: now + FOLD_SECONDS + 1)
    store.write_page(A, [], written[-1][-1].id)  # the next write folds what is due
    assert not store.tiers.waiting() and views(store, steps) == want


def test_a_write_rolled_back_leaves_nothing_waiting_for_the_fold(tmp_path, monkeypatch):
    """The writer's store holds what waits in memory for the fold: a transaction that fails (a full
    disk, a bad run list) must not leave its points there, or the fold would count them twice."""
    steps, _, written = pages(6, 8_000, 32, integers=True)
    store, eager = LocalStore(tmp_path / "s.sqlite"), LocalStore(tmp_path / "eager.sqlite")
    half = len(written) // 2
    for page in written[:half]:
        store.write_page(A, page, page[-1].id)
        eager.write_page(A, page, page[-1].id)

    def refused(*_):
        raise OSError("disk full")

    with monkeypatch.context() as m:
        m.setattr(store.tiers, "fold_due", refused)  # after its points were noted as waiting
        try:
            store.write_pages([(A, written[half], written[half][-1].id, None)])
        except OSError:
            pass
        else:
            raise AssertionError("the write was not refused")
    for page in written[half:]:  # sent again, as the link does
        store.write_page(A, page, page[-1].id)
        eager.write_page(A, page, page[-1].id)
    assert views(store, steps) == views(eager, steps)
    assert tier_rows(store) == tier_rows(eager) and tier_rows(store)


def test_a_due_fold_goes_a_slice_per_write_and_the_views_hold_every_point_meanwhile(tmp_path, monkeypatch):
    """A write folds at most FOLD_SLICE streams past FOLD_BUDGET (one slice at least), oldest first: folding
    every stream of 64 agents at once held a write, and the pages behind it, for hundreds of ms."""
    monkeypatch.setattr("pilothouse.gui.tiers.FOLD_SLICE", 2)
    monkeypatch.setattr("pilothouse.gui.tiers.FOLD_BUDGET", 0.0)  # one slice a write
    rng = np.random.default_rng(8)
    steps, vals = spiky(rng, 3_000)
    metrics = [f"m{i}" for i in range(5)]
    page = [e for i, metric in enumerate(metrics)  # five streams, their entries interleaved by id
            for e in entries(steps, vals, split(rng, len(steps), 6), first_id=1 + 6 * i, metric=metric)]
    store, eager = LocalStore(tmp_path / "s.sqlite"), LocalStore(tmp_path / "eager.sqlite")
    for s in (store, eager):
        s.write_page(A, page, page[-1].id)
    eager.fold_tiers()

    def drawn(s: LocalStore) -> list[bytes]:
        return [s.view(A, "r1", m, float(steps.min()), float(steps.max()), 40).ys.tobytes() for m in metrics]

    now = __import__("time").time()
    monkeypatch.setattr("pilothouse.gui.tiers.time.time", lambda: now + FOLD_SECONDS + 1)
    left = []
    for _ in range(4):
        store.write_page(A, [], page[-1].id)  # due: each write folds the next slice
        left.append(store.db.execute("SELECT COUNT(*) FROM tier_tail").fetchone()[0])
        assert drawn(store) == drawn(eager)  # folded or waiting, every stream's view is whole
    assert left == [3, 1, 0, 0]
    assert tier_rows(store) == tier_rows(eager)
