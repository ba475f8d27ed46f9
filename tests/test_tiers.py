"""The app store's on-disk tiers, on real SQLite files: views exact against brute force over the
raw points, incremental pages equal to a one-shot build, re-sent pages counted once."""

from __future__ import annotations

import sqlite3

import numpy as np
import pytest
from support.tier_records import same_buckets, same_rows, spiky

from pilothouse.gui.local_store import LocalStore
from pilothouse.store.tier_table import BLOCK, TierTable
from pilothouse.store.tiers import BASE, WIDTHS, first_level, level_for, points, reduce
from pilothouse.wire.entries import Entry

A = "tcp://127.0.0.1:7001"


def entries(steps: np.ndarray, vals: np.ndarray, sizes: list[int], first_id: int = 1, metric: str = "loss",
            run: str = "r1", times: np.ndarray | None = None) -> list[Entry]:
    times = steps.astype(np.float64) if times is None else times
    out, lo = [], 0
    for i, size in enumerate(sizes):
        s, v = steps[lo: lo + size], vals[lo: lo + size]
        out.append(Entry(first_id + i, run, "m", metric, 0, len(s), s.tobytes(), v.tobytes(),
                         times[lo: lo + size].tobytes(), None))
        lo += size
    assert lo == len(steps)
    return out


def split(rng: np.random.Generator, n: int, pieces: int) -> list[int]:
    cuts = np.sort(rng.choice(np.arange(1, n), pieces - 1, replace=False))
    return np.diff(np.concatenate([[0], cuts, [n]])).tolist()


def tier_rows(store: LocalStore) -> list[tuple]:
    """The stored tier rows once what waits is folded (``tiers``: folding waits)."""
    store.fold_tiers()
    return store.db.execute("SELECT agent, run, metric, level, block, buckets, ids FROM tiers "
                            "ORDER BY agent, run, metric, level, block").fetchall()


def brute(steps: np.ndarray, vals: np.ndarray, lo: int, hi: int) -> tuple[float, float, np.ndarray]:
    inside = (steps >= lo) & (steps < hi)
    finite = vals[inside & np.isfinite(vals)]
    if not len(finite):
        return np.nan, np.nan, steps[inside & ~np.isfinite(vals)]
    return finite.min(), finite.max(), steps[inside & ~np.isfinite(vals)]


def one_page(path, seed: int, n: int, pieces: int, resumed: bool = True):
    """A store at ``path`` holding one page of a spiky metric in ``pieces`` entries."""
    rng = np.random.default_rng(seed)
    steps, vals = spiky(rng, n, resumed)
    store = LocalStore(path)
    page = entries(steps, vals, split(rng, len(steps), pieces))
    store.write_page(A, page, len(page))
    return store, steps, vals, page, rng


def test_tier_views_are_exact_per_column(tmp_path):
    store, steps, vals, _, rng = one_page(tmp_path / "s.sqlite", 7, 60_000, 12)
    top = int(steps.max())
    views = [(0, top, 800), (0, top, 37), (1000, 90_000, 300), (50_123, 61_777, 97), (10_000_000, top, 640)]
    views += [tuple(sorted(rng.integers(0, top, 2).tolist())) + (int(rng.integers(20, 1500)),) for _ in range(12)]
    levels = set()
    for x0, x1, pixels in views:
        view = store.view(A, "r1", "loss", x0, x1, pixels)
        levels.add(view.level)
        if view.level < 0:
            continue
        assert len(view.mins) <= pixels  # a few buckets per column were read, one answer per column
        assert (view.starts <= x1).all() and (view.stops > x0).all() and (view.starts[1:] >= view.stops[:-1]).all()
        for lo, hi, low, high in zip(view.starts, view.stops, view.mins, view.maxs):
            want_low, want_high, bad = brute(steps, vals, lo, hi)
            assert (low == want_low or np.isnan(low) and np.isnan(want_low)) and (
                high == want_high or np.isnan(high) and np.isnan(want_high)), (x0, x1, pixels, lo, hi)
            if len(bad):
                assert bad.min() in view.marks
        # each drawn point is a real point at its own step: spikes are drawn where they are
        drawn = np.isfinite(view.ys)
        real = set(zip(steps.astype(np.float64).tolist(), vals.tolist()))
        assert all((x, y) in real for x, y in zip(view.xs[drawn].tolist(), view.ys[drawn].tolist()))
        assert np.isnan(view.ys).sum() == sum(len(brute(steps, vals, lo, hi)[2]) > 0
                                              for lo, hi in zip(view.starts, view.stops))
    assert len(levels - {-1}) >= 3  # coarse and fine levels were both exercised
    whole = store.view(A, "r1", "loss", 0, top, 800)
    assert 1e6 in whole.ys and -1e6 in whole.ys  # the spikes survive the coarsest view


def test_time_views_are_exact_per_column_of_time(tmp_path):
    """On a wall-time axis every column holds the buckets (or, where one lasts over half a column, as
    across a pause, the finer buckets and points) whose first point falls in it: its min and max lie
    between those of the points logged inside it and those logged up to half a column around it; every
    drawn point is a real one, drawn within half a column of when it was logged (across jitter, a
    sparse stretch of steps and an hour's pause); the crosshair reads real points."""
    rng = np.random.default_rng(8)
    steps, vals = spiky(rng, 60_000, resumed=False)
    times = 1.7e9 + np.cumsum(0.05 + rng.random(len(steps))) + np.where(steps > steps[40_000], 3600.0, 0.0)
    store = LocalStore(tmp_path / "s.sqlite")
    page = entries(steps, vals, split(rng, len(steps), 12), times=times)
    store.write_page(A, page, len(page))
    span = (times[0], times[-1])
    views = [(*span, 800), (*span, 37), (times[39_000], times[41_000], 300), (times[100], times[30_000], 640)]
    views += [tuple(sorted(rng.uniform(*span, 2).tolist())) + (int(rng.integers(20, 1500)),) for _ in range(12)]
    finite = np.isfinite(vals)
    levels = set()

    def lowest(a: float, b: float) -> float:
        inside = finite & (times >= a) & (times < b)
        return vals[inside].min() if inside.any() else np.inf

    def highest(a: float, b: float) -> float:
        inside = finite & (times >= a) & (times < b)
        return vals[inside].max() if inside.any() else -np.inf

    for t0, t1, pixels in views:
        view = store.time_view(A, "r1", "loss", t0, t1, pixels)
        levels.add(view.level)
        if view.level < 0:
            continue
        half = (t1 - t0) / pixels / 2
        for a, b, low, high in zip(view.starts, view.stops, view.mins, view.maxs):
            if np.isnan(low):
                assert not np.isfinite(lowest(a + half, b))
                continue
            early = a - half if a == t0 else a  # the first column also holds a bucket begun before the view
            assert lowest(early, b + half) <= low <= lowest(a + half, b), (t0, t1, pixels, a)
            assert highest(a + half, b) <= high <= highest(early, b + half), (t0, t1, pixels, a)
        drawn = np.isfinite(view.ys)
        for x, y in zip(view.xs[drawn].tolist(), view.ys[drawn].tolist()):
            assert np.abs(times[vals == y] - x).min() <= half, (t0, t1, pixels, x, y)
        assert (view.starts[1:] >= view.stops[:-1]).all() and len(view.mins) <= pixels
    assert len(levels - {-1}) >= 3
    whole = store.time_view(A, "r1", "loss", *span, 800)
    assert 1e6 in whole.ys and -1e6 in whole.ys
    pause = store.time_view(A, "r1", "loss", times[40_000] + 10, times[40_001] - 10, 100)
    assert pause.xs.tolist() == [times[40_000], times[40_001]]  # inside the pause: only the line across it
    for i in (0, 17_003, 40_000, len(steps) - 1):
        got = store.nearest_time(A, "r1", "loss", times[i] + 1e-3)
        assert got[0] == times[i] and (got[1] == vals[i] or np.isnan(vals[i]))
    assert store.nearest_time(A, "r1", "loss", times[40_000] + 1000)[0] == times[40_000]  # nearer than after the pause


def test_finest_zoom_reads_the_raw_points(tmp_path):
    store, steps, vals, _, _ = one_page(tmp_path / "s.sqlite", 3, 20_000, 9, resumed=False)
    x0, x1 = 12_000, 12_600
    view = store.view(A, "r1", "loss", x0, x1, 400)
    assert view.level == -1 == level_for(x0, x1, 400)
    inside = (steps >= x0) & (steps <= x1)
    shown = (view.xs >= x0) & (view.xs <= x1)
    assert view.xs[shown].tolist() == steps[inside].astype(float).tolist()
    assert np.array_equal(view.ys[shown], np.where(np.isfinite(vals[inside]), vals[inside], np.nan), equal_nan=True)
    assert view.xs[0] < x0 and view.xs[-1] > x1  # a neighbour on each side: the line reaches the edges
    assert inside.sum() > 150 and view.marks.tolist() == steps[inside & ~np.isfinite(vals)].astype(float).tolist()


def test_pages_in_pieces_and_resent_equal_a_one_shot_build(tmp_path):
    one, steps, vals, page, rng = one_page(tmp_path / "one.sqlite", 11, 30_000, 40)
    many = LocalStore(tmp_path / "many.sqlite")
    at = 0
    for size in split(rng, len(page), 15):
        many.write_page(A, page[at: at + size], page[at + size - 1].id)
        many.write_page(A, page[max(at - 3, 0): at + size], page[at + size - 1].id)  # re-sent across a reconnect
        at += size
    assert same_rows(tier_rows(many), tier_rows(one), 5) and tier_rows(one)
    summary = one.tiers.summary(A, "r1", "loss")[0]
    assert summary["count"] == len(steps) and summary["bad"] == (~np.isfinite(vals)).sum()
    assert summary["min"] == -1e6 and summary["max"] == 1e6
    assert (summary["xfirst"], summary["xlast"]) == (steps.min(), steps.max())
    first, last = np.flatnonzero(steps == steps.min())[0], np.flatnonzero(steps == steps.max())[-1]
    assert summary[["first", "last"]].tolist() == (vals[first], vals[last]) or np.isnan([vals[first], vals[last]]).any()


def test_a_store_from_before_the_tiers_or_these_records_builds_them_once(tmp_path):
    rng = np.random.default_rng(5)
    steps, vals = spiky(rng, 8_000)
    path = tmp_path / "s.sqlite"
    store = LocalStore(path)
    page = entries(steps[:5000], vals[:5000], [2500, 2500]) + entries(steps[5000:], vals[5000:], [len(steps) - 5000],
                                                                      first_id=3, metric="reward")
    store.write_page(A, page, 3)
    store.fold_tiers()
    built = tier_rows(store)
    store.db.execute("DROP TABLE tiers")
    store.db.execute("PRAGMA user_version=0")  # as a file from before the schema was numbered
    store.close()
    store = LocalStore(path)
    assert same_rows(tier_rows(store), built, 5) and built
    # tiers of an older record (12 fields, under "records"): dropped and built again, not misread
    store.db.execute("ALTER TABLE tiers RENAME COLUMN buckets TO records")
    store.db.execute("UPDATE tiers SET records = substr(records, 1, 96 * (length(records) / 120))")
    store.db.execute("PRAGMA user_version=0")  # as a file from before the schema was numbered
    store.close()
    store = LocalStore(path)
    assert same_rows(tier_rows(store), built, 5)


def test_removed_runs_lose_their_tiers_and_gain_none(tmp_path):
    rng = np.random.default_rng(2)
    steps, vals = spiky(rng, 5_000, resumed=False)
    store = LocalStore(tmp_path / "s.sqlite")
    store.put_runs(A, [{"id": "r1", "status": "finished"}, {"id": "r2", "status": "finished"}])
    store.write_page(A, entries(steps, vals, [5000]) + entries(steps, vals, [5000], first_id=2, run="r2"), 2)
    kept = [r for r in tier_rows(store) if r[1] == "r2"]
    assert kept
    store.remove_runs([(A, "r1")], batch=7)
    assert [r for r in tier_rows(store) if r[1] == "r1"] == [] and [r for r in tier_rows(store) if r[1] == "r2"] == kept
    store.write_page(A, entries(steps + 10**6, vals, [5000], first_id=3), 3)  # the agent still sends it
    assert [r for r in tier_rows(store) if r[1] == "r1"] == []
    assert store.view(A, "r1", "loss", 0, 2e6, 500).xs.size == 0


def test_bad_view_requests(tmp_path):
    store = LocalStore(tmp_path / "s.sqlite")
    store.write_page(A, entries(np.arange(100, dtype=np.int64), np.ones(100), [100]), 1)
    before = tier_rows(store)
    for x0, x1 in ((np.nan, 5.0), (0.0, np.inf)):
        with pytest.raises(ValueError, match="finite"):
            store.view(A, "r1", "loss", x0, x1, 100)
    assert store.view(A, "r1", "nope", 0, 1e6, 100).xs.size == 0
    reversed_view = store.view(A, "r1", "loss", 1e6, 0, 0)  # reversed range, no pixels: one column
    assert reversed_view.mins.tolist() == [1.0] and tier_rows(store) == before


def test_widths_and_blocks_fit_the_promise():
    """Each level holds FANOUT of the one below; reading a whole view takes a few blocks."""
    assert WIDTHS[0] == BASE and all(b == 4 * a for a, b in zip(WIDTHS, WIDTHS[1:]))
    for span in (10**6, 10**8, 10**9):
        level = level_for(0, span, 1400)
        assert span / WIDTHS[level] / 1400 < 2 * 4 and span / WIDTHS[level] / BLOCK < 100


def test_the_sorted_fast_path_equals_the_general_fold():
    rng = np.random.default_rng(9)
    steps = np.sort(rng.integers(0, 5_000, 20_000))  # repeated steps, empty and crowded buckets
    vals = rng.standard_normal(len(steps))
    vals[rng.integers(0, len(vals), 300)] = np.nan
    vals[100:140] = np.inf  # whole buckets without a finite value
    vals[rng.integers(0, len(vals), 50)] = -0.0
    times = 1.7e9 + np.sort(rng.random(len(steps))) * 1e4
    assert same_buckets(first_level(steps, vals, times)[0], reduce(_with_buckets(points(steps, vals, times), BASE)))


def test_many_metrics_folded_in_one_pass_equal_each_folded_alone():
    """One write of many agents folds every metric in one numpy pass per level: the same blocks as
    folding each metric alone, with metrics given out of order, one given twice (a resumed run's
    second chunk, steps going back) and one with a single point."""
    rng = np.random.default_rng(11)
    items = []
    for i, n in enumerate((3_000, 1, 700, 5_000)):
        steps = np.sort(rng.integers(0, 20_000, n)) + i * 7
        vals = rng.standard_normal(n)
        vals[rng.integers(0, n, max(n // 50, 1))] = np.nan
        items.append(((f"agent{i % 2}", f"m{i}"), steps, vals, steps * 0.5, np.arange(n, dtype=np.int64) // 100 + 1))
    key, steps, vals, times, ids = items[2]
    # the same metric again, steps back
    items.append((key, steps[:200] - 5, vals[:200], times[:200] + 9, ids[:200] + 1000))
    items = [items[3], items[0], items[2], items[1], items[4]]

    def rows(fold) -> list[tuple]:
        conn = sqlite3.connect(":memory:")
        table = TierTable(conn, ("agent", "metric"), ids=True)
        table.create()
        fold(table)
        return conn.execute("SELECT * FROM tiers ORDER BY agent, metric, level, block").fetchall()

    def alone(table):
        for item in items:
            table.fold(*item)

    together = rows(lambda table: table.fold_many(items))
    assert same_rows(together, rows(alone), 4) and len(together) > 4 * len(WIDTHS)


def _with_buckets(rec: np.ndarray, width: int) -> np.ndarray:
    rec = rec.copy()
    rec["bucket"] //= width
    return rec


def test_levels_above_the_stored_ones_are_folded_from_the_top_one_exactly():
    """Only STORED levels are kept on disk (a write rewrites their tails); a coarser level is folded
    from the top stored one when read: every level of a sparse run spanning 10^12 steps, over the whole
    run and over a slice, equals a one-shot build of all 16 levels from the raw points."""
    from pilothouse.store.tier_table import STORED
    from pilothouse.store.tiers import levels

    rng = np.random.default_rng(5)
    steps = np.sort(rng.integers(0, 10**12, 4_000))
    vals = rng.standard_normal(len(steps))
    vals[rng.integers(0, len(vals), 30)] = np.nan
    conn = sqlite3.connect(":memory:")
    table = TierTable(conn, ("metric",), ids=False, compress=True)
    table.create()
    times = steps / 1e6
    for part in np.array_split(np.arange(len(steps)), 7):  # in pages, as a live run
        table.fold(("m",), steps[part], vals[part], times[part])
    assert {level for (level,) in conn.execute("SELECT DISTINCT level FROM tiers")} == set(range(STORED))
    x0, x1 = 3 * 10**11, 7 * 10**11
    for level, want in levels(steps, vals, times):
        assert same_buckets(table.buckets(("m",), level, 0, 10**12), want), level
        k0, k1 = x0 // WIDTHS[level], x1 // WIDTHS[level]
        inside = want[(want["bucket"] >= k0) & (want["bucket"] <= k1)]
        assert same_buckets(table.buckets(("m",), level, x0, x1), inside), level
    assert table.summary(("m",))["count"].tolist() == [len(steps)]


def test_a_compressed_block_read_again_is_decoded_once_and_never_stale():
    """The journal's table remembers decoded blocks by their bytes: a block read twice is the same
    array (read-only: every read shares it), and a block rewritten by a later fold is read anew."""
    from pilothouse.store.tiers import levels

    conn = sqlite3.connect(":memory:")
    table = TierTable(conn, ("metric",), ids=False, compress=True)
    table.create()
    steps = np.arange(1000, dtype=np.int64)
    vals = np.sin(steps / 50.0)
    table.fold(("m",), steps[:600], vals[:600], steps[:600] * 1.0)
    first = table.rows(("m",), 0, 0, 10)[0][1]
    assert table.rows(("m",), 0, 0, 10)[0][1] is first and not first.flags.writeable
    with pytest.raises(ValueError):
        first["count"][0] = 7
    table.fold(("m",), steps[600:], vals[600:], steps[600:] * 1.0)  # the same block, rewritten
    for level, want in levels(steps, vals, steps * 1.0):
        if level < 3:
            assert same_buckets(table.buckets(("m",), level, 0, 1000), want), level
