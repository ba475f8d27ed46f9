"""On-disk min/max tiers of stored metrics, so reading a view costs per pixel, not per point.

Why: opening a run of 10 x 100 M points must not read 24 GB.  Next to the raw entries the app's
store keeps, for each (agent, run, metric), levels of buckets over *step ranges*: level L bucket
k holds the steps [k * WIDTHS[L], (k + 1) * WIDTHS[L]) (16, 64, 256, ... steps).  Each bucket
keeps exact aggregates of the points in it (``RECORD``): how many, how many non-finite and the
step of the first one, the finite min and max with the step where each is (so a spike is drawn
where it is), and the first and last point by step.  Buckets are keyed by step, not by arrival,
so points arriving out of order (a resumed run re-logging steps) and pages arriving in many
pieces fold into the same buckets: ``reduce`` is associative, and the tiers after any sequence of
pages equal a one-shot build over all of their points.

``view`` picks the coarsest level with at least two buckets per pixel column, so it reads about
2-8 buckets per column whatever the run's length; zoomed in past the finest level it reads the
raw points of the entries touching the range (each level-0 block row lists them) and draws them
through an in-memory ``Series``, exactly as the charts draw a live run.

Storage: one row per (agent, run, metric, level, block of BLOCK buckets), the block's filled
buckets as one ``RECORD`` array blob (a sparse run costs per filled bucket, not per step), plus at
level 0 the sorted ids of the entries with points in the block.  Writing a page touches one or two
block rows per level per metric (the run's tail), in the page's own transaction.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
import sqlite_utils

from pilothouse.gui.lod import Series
from pilothouse.wire.entries import KIND_METRIC, join_chunks

BASE = 16  # steps per level-0 bucket
FANOUT = 4  # level L+1 buckets hold FANOUT level-L buckets
LEVELS = 16  # widths 16 .. 16 * 4**15 (17 G steps); wider views use the top level (still sparse)
WIDTHS = [BASE * FANOUT ** level for level in range(LEVELS)]
BLOCK = 128  # buckets per stored row: a live append rewrites at most ~12 KB per level
MIGRATE_ROWS = 2000  # entries folded at a time when a store from before the tiers is opened
PER_COLUMN = 2  # the chosen level has at least this many buckets per pixel column
_NO_IDS = np.empty(0, np.int64)
_NONE = np.iinfo(np.int64).max  # the step of a non-finite value in a bucket that has none

RECORD = np.dtype([("bucket", "<i8"), ("count", "<i8"), ("bad", "<i8"), ("xbad", "<i8"),
                   ("min", "<f8"), ("xmin", "<i8"), ("max", "<f8"), ("xmax", "<i8"),
                   ("first", "<f8"), ("xfirst", "<i8"), ("last", "<f8"), ("xlast", "<i8")])

SCHEMA = """CREATE TABLE IF NOT EXISTS tiers (agent TEXT NOT NULL, run TEXT NOT NULL, metric TEXT NOT NULL,
    level INTEGER NOT NULL, block INTEGER NOT NULL, records BLOB NOT NULL, ids BLOB,
    PRIMARY KEY (agent, run, metric, level, block))"""


def points(steps: np.ndarray, vals: np.ndarray) -> np.ndarray:
    """Raw points as one-point records (bucket = step), in arrival order."""
    steps = np.asarray(steps, np.int64)
    vals = np.asarray(vals, np.float64)
    rec = np.empty(len(steps), RECORD)
    finite = np.isfinite(vals)
    clean = np.where(finite, vals, np.nan)
    rec["bucket"] = steps
    rec["count"] = 1
    rec["bad"] = ~finite
    rec["xbad"] = np.where(finite, _NONE, steps)
    for field in ("min", "max"):
        rec[field] = clean
    for field in ("first", "last"):
        rec[field] = vals
    for field in ("xmin", "xmax", "xfirst", "xlast"):
        rec[field] = steps
    return rec


def reduce(rec: np.ndarray) -> np.ndarray:
    """Fold records sharing a bucket into one, in bucket order.  ``rec`` is in arrival order:
    the first point of a bucket is the one at its smallest step that arrived first, the last the
    one at its largest step that arrived last; a min or max at several steps is at the smallest."""
    if not len(rec):
        return rec.copy()
    if (np.diff(rec["bucket"]) < 0).any():
        rec = rec[np.argsort(rec["bucket"], kind="stable")]
    starts = np.flatnonzero(np.diff(rec["bucket"], prepend=rec["bucket"][0] - 1))
    sizes = np.diff(starts, append=len(rec))
    out = np.empty(len(starts), RECORD)
    out["bucket"] = rec["bucket"][starts]
    out["count"] = np.add.reduceat(rec["count"], starts)
    out["bad"] = np.add.reduceat(rec["bad"], starts)
    out["xbad"] = np.minimum.reduceat(rec["xbad"], starts)
    for field, fold, arg in (("min", np.fmin, np.minimum), ("max", np.fmax, np.maximum)):
        best = fold.reduceat(rec[field], starts)
        at = rec[field] == np.repeat(best, sizes)  # False where NaN: a bucket without a finite value
        x = np.minimum.reduceat(np.where(at, rec["x" + field], _NONE), starts)
        out[field], out["x" + field] = best, np.where(np.isnan(best), np.minimum.reduceat(rec["xfirst"], starts), x)
    order = np.arange(len(rec))
    for field, fold, pick, none in (("first", np.minimum, np.minimum, len(rec)), ("last", np.maximum, np.maximum, -1)):
        x = fold.reduceat(rec["x" + field], starts)
        index = pick.reduceat(np.where(rec["x" + field] == np.repeat(x, sizes), order, none), starts)
        out[field], out["x" + field] = rec[field][index], x
    return out


def first_level(steps: np.ndarray, vals: np.ndarray) -> np.ndarray:
    """Level 0 of these points: ``_regroup(points(steps, vals), BASE)``, computed on the plain
    arrays when the steps do not go back (the usual page), which costs a third as much."""
    if len(steps) < 2 or (np.diff(steps) < 0).any():
        return _regroup(points(steps, vals), BASE)
    starts = np.flatnonzero(np.diff(np.floor_divide(steps, BASE), prepend=steps[0] // BASE - 1))
    ends = np.append(starts[1:], len(steps))
    finite = np.isfinite(vals)
    clean = np.where(finite, vals, np.nan)
    out = np.empty(len(starts), RECORD)
    out["bucket"] = np.floor_divide(steps[starts], BASE)
    out["count"] = ends - starts
    out["bad"] = np.add.reduceat(~finite, starts)
    out["xbad"] = np.minimum.reduceat(np.where(finite, _NONE, steps), starts)
    out["first"], out["xfirst"] = vals[starts], steps[starts]  # sorted: the earliest arrival at the lowest step
    out["last"], out["xlast"] = vals[ends - 1], steps[ends - 1]
    for field, fold in (("min", np.fmin), ("max", np.fmax)):
        best = fold.reduceat(clean, starts)
        x = np.minimum.reduceat(np.where(clean == np.repeat(best, ends - starts), steps, _NONE), starts)
        out[field], out["x" + field] = best, np.where(np.isnan(best), steps[starts], x)
    return out


def _regroup(rec: np.ndarray, width: int) -> np.ndarray:
    """Records of a finer level (or raw points) folded into buckets of ``width`` steps."""
    out = rec.copy()
    out["bucket"] = np.floor_divide(out["xfirst"], width)  # a record lies inside one bucket of any coarser level
    return reduce(out)


@dataclass
class TierView:
    """What a chart draws for one curve: ``xs``/``ys`` (per column its first point, min, max and
    last point at their steps, a NaN after a column holding a non-finite value; or the raw points), the
    x of non-finite values (one per column) for markers, and per column its step range
    [starts, stops), min and max (empty when the raw points were read)."""

    xs: np.ndarray
    ys: np.ndarray
    marks: np.ndarray
    level: int  # -1: raw points
    starts: np.ndarray
    stops: np.ndarray
    mins: np.ndarray
    maxs: np.ndarray


def level_for(x0: float, x1: float, pixels: int) -> int:
    """The coarsest level with at least PER_COLUMN buckets per pixel column; -1: read raw points."""
    per_column = (x1 - x0) / max(pixels, 1)
    fits = [level for level, width in enumerate(WIDTHS) if width * PER_COLUMN <= per_column]
    return fits[-1] if fits else -1


class Tiers:
    """The tier table of one SQLite connection (the app's store): written in the caller's transaction."""

    def __init__(self, db: sqlite_utils.Database) -> None:
        self.db = db

    def create(self) -> None:
        self.db.execute(SCHEMA)

    def add(self, agent: str, entries: Sequence[Sequence]) -> None:
        """Fold newly stored metric entries (protocol field order: id, run, kind, metric, rank, n,
        steps, vals, times, body) into the tiers.  Only entries not stored before may be passed:
        a re-sent page must not count twice (``LocalStore.write_page`` passes the rows it inserted)."""
        groups: dict[tuple[str, str], list] = {}
        for e in entries:
            if e[2] == KIND_METRIC and e[5]:
                groups.setdefault((e[1], e[3]), []).append(e)
        for (run, metric), chunk in groups.items():
            steps, vals, _ = join_chunks([(e[6], e[7], e[8]) for e in chunk])
            ids = np.repeat(np.array([e[0] for e in chunk], np.int64), [e[5] for e in chunk])
            self._add(agent, run, metric, steps, vals, ids)

    def add_all(self) -> None:
        """Build the tiers of every metric entry already stored (a store from before them)."""
        for (agent,) in self.db.execute("SELECT DISTINCT agent FROM entries WHERE kind=?", [KIND_METRIC]).fetchall():
            rows = self.db.execute("SELECT id, run, kind, metric, rank, n, steps, vals, times, body FROM entries "
                                   "WHERE agent=? AND kind=? ORDER BY id", [agent, KIND_METRIC])
            while chunk := rows.fetchmany(MIGRATE_ROWS):
                self.add(agent, chunk)

    def _add(self, agent: str, run: str, metric: str, steps: np.ndarray, vals: np.ndarray, ids: np.ndarray) -> None:
        listed = _ids_by_block(np.floor_divide(steps, WIDTHS[0] * BLOCK), ids)
        new = first_level(steps, vals)
        for level, width in enumerate(WIDTHS):
            if level:
                new = _regroup(new, width)
            key = (agent, run, metric, level)
            blocks = np.floor_divide(new["bucket"], BLOCK)
            stored = {b: (rec, got) for b, rec, got in self._rows(key, int(blocks[0]), int(blocks[-1]))}
            old = [rec for rec, _ in stored.values()]
            merged = reduce(np.concatenate([*old, new])) if old else new  # stored ones arrived first
            cuts = np.flatnonzero(np.diff(np.floor_divide(merged["bucket"], BLOCK))) + 1
            touched, rows = set(blocks.tolist()), []
            for part in np.split(merged, cuts):
                block = int(part["bucket"][0] // BLOCK)
                if block not in touched:  # a stored block between two new ones (an out-of-order page)
                    continue
                got = None
                if level == 0:
                    before = stored[block][1] if block in stored else _NO_IDS
                    got = np.union1d(before, listed.get(block, _NO_IDS))
                rows.append((*key, block, part.tobytes(), None if got is None else got.tobytes()))
            self.db.conn.executemany("INSERT OR REPLACE INTO tiers VALUES (?, ?, ?, ?, ?, ?, ?)", rows)

    def _rows(self, key: tuple, b0: int, b1: int) -> list[tuple[int, np.ndarray, np.ndarray | None]]:
        rows = self.db.execute("SELECT block, records, ids FROM tiers WHERE agent=? AND run=? AND metric=? "
                               "AND level=? AND block BETWEEN ? AND ? ORDER BY block", [*key, b0, b1]).fetchall()
        return [(b, np.frombuffer(r, RECORD), None if i is None else np.frombuffer(i, np.int64)) for b, r, i in rows]

    def buckets(self, agent: str, run: str, metric: str, level: int, x0: float, x1: float) -> np.ndarray:
        """The filled buckets of ``level`` overlapping steps x0..x1, in step order."""
        width = WIDTHS[level]
        k0, k1 = int(np.floor(x0 / width)), int(np.floor(x1 / width))
        rows = self._rows((agent, run, metric, level), k0 // BLOCK, k1 // BLOCK)
        rec = np.concatenate([r for _, r, _ in rows]) if rows else np.empty(0, RECORD)
        return rec[(rec["bucket"] >= k0) & (rec["bucket"] <= k1)]

    def summary(self, agent: str, run: str, metric: str) -> np.ndarray:
        """One record of the whole metric (count, x and y extent, non-finite count); empty if none."""
        rec = self.buckets(agent, run, metric, LEVELS - 1, -2.0 ** 63, 2.0 ** 63)
        if not len(rec):
            return rec
        rec = rec.copy()
        rec["bucket"] = 0
        return reduce(rec)

    def view(self, agent: str, run: str, metric: str, x0: float, x1: float, pixels: int,
             raw: Callable[[np.ndarray], tuple[np.ndarray, np.ndarray]]) -> TierView:
        """The points to draw steps x0..x1 on ``pixels`` columns (see ``TierView``); ``raw`` gives
        (steps, vals) of entry ids, in arrival order, for the finest zoom."""
        if not (np.isfinite(x0) and np.isfinite(x1)):
            raise ValueError(f"a view's x range must be finite: {x0}..{x1}")
        if x1 < x0:
            x0, x1 = x1, x0
        pixels = max(int(pixels), 1)
        level = level_for(x0, x1, pixels)
        if level < 0:
            return self._raw_view(agent, run, metric, x0, x1, pixels, raw)
        rec = self.buckets(agent, run, metric, level, x0, x1).copy()
        width = WIDTHS[level]
        edges = np.rint(np.linspace(x0, x1, pixels + 1)[1:-1] / width)  # column edges on the bucket grid
        rec["bucket"] = np.searchsorted(edges, rec["bucket"], "right")
        cols = reduce(rec)
        bounds = np.concatenate([[np.floor(x0 / width)], edges, [np.floor(x1 / width) + 1]]) * width
        starts = np.maximum.accumulate(bounds[cols["bucket"]]).astype(np.int64)
        stops = bounds[cols["bucket"] + 1].astype(np.int64)
        xs, ys = _envelope(cols)
        return TierView(xs, ys, cols["xbad"][cols["bad"] > 0].astype(np.float64), level, starts, stops,
                        cols["min"], cols["max"])

    def nearest(self, agent: str, run: str, metric: str, xq: float,
                raw: Callable[[np.ndarray], tuple[np.ndarray, np.ndarray]]) -> tuple[float, float] | None:
        """The stored point whose step is nearest xq (a crosshair readout): among the raw points
        of the blocks around xq, else among the first and last points of ever wider buckets."""
        steps, vals = self._raw_points(agent, run, metric, xq, xq, raw)
        if not len(steps):
            for level, width in enumerate(WIDTHS):
                rec = self.buckets(agent, run, metric, level, xq - width * BLOCK, xq + width * BLOCK)
                if len(rec):
                    steps, vals = np.concatenate([rec["xfirst"], rec["xlast"]]), np.concatenate([rec["first"],
                                                                                                  rec["last"]])
                    break
        if not len(steps):
            return None
        i = int(np.argmin(np.abs(steps.astype(np.float64) - xq)))
        return float(steps[i]), float(vals[i])

    def _raw_points(self, agent: str, run: str, metric: str, x0: float, x1: float,
                    raw: Callable[[np.ndarray], tuple[np.ndarray, np.ndarray]]) -> tuple[np.ndarray, np.ndarray]:
        """(steps, vals) of x0..x1 and a level-0 block either side, sorted by step (equal steps
        in arrival order), from the entries the level-0 blocks list."""
        span = WIDTHS[0] * BLOCK
        rows = self._rows((agent, run, metric, 0), int(np.floor(x0 / span)) - 1, int(np.floor(x1 / span)) + 1)
        ids = np.unique(np.concatenate([i for _, _, i in rows])) if rows else _NO_IDS
        if not len(ids):
            return _NO_IDS, np.empty(0)
        steps, vals = raw(ids)
        near = (steps >= x0 - span) & (steps <= x1 + span)
        order = np.argsort(steps[near], kind="stable")
        return steps[near][order], vals[near][order]

    def _raw_view(self, agent: str, run: str, metric: str, x0: float, x1: float, pixels: int,
                  raw: Callable[[np.ndarray], tuple[np.ndarray, np.ndarray]]) -> TierView:
        """Zoomed past level 0: the points of the entries touching the range (and a block either
        side, for the line to the edges), drawn through a Series."""
        steps, vals = self._raw_points(agent, run, metric, x0, x1, raw)
        series = Series()
        series.append(steps.astype(np.float64), vals)
        xs, ys = series.view(x0, x1, pixels)
        empty = np.empty(0)
        return TierView(xs, ys, series.nonfinite(x0, x1), -1, empty.astype(np.int64), empty.astype(np.int64),
                        empty, empty)


def _ids_by_block(blocks: np.ndarray, ids: np.ndarray) -> dict[int, np.ndarray]:
    """The sorted distinct entry ids with points in each level-0 block."""
    change = np.ones(len(ids), bool)
    change[1:] = (blocks[1:] != blocks[:-1]) | (ids[1:] != ids[:-1])  # runs of one entry's points in one block
    pairs = np.unique(np.stack([blocks[change], ids[change]], axis=1), axis=0)
    cuts = np.flatnonzero(np.diff(pairs[:, 0])) + 1
    return {int(p[0, 0]): p[:, 1].copy() for p in np.split(pairs, cuts)}


def _envelope(cols: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Per column its first point, min, max and last point at their own steps (in step order;
    a non-finite first or last left out), then a NaN where the column holds a non-finite value:
    the line runs through every column's extremes and joins the columns where the data does."""
    n = len(cols)
    x = np.empty((n, 5))
    y = np.empty((n, 5))
    for i, field in enumerate(("first", "min", "max", "last")):
        x[:, i], y[:, i] = cols["x" + field], cols[field]
    order = np.argsort(x[:, :4], axis=1, kind="stable")
    x[:, :4] = np.take_along_axis(x[:, :4], order, axis=1)
    y[:, :4] = np.take_along_axis(y[:, :4], order, axis=1)
    x[:, 4], y[:, 4] = x[:, 3], np.nan
    keep = np.ones((n, 5), bool)
    keep[:, :4] = np.isfinite(y[:, :4])
    keep[:, 4] = cols["bad"] > 0
    return x[keep], y[keep]
