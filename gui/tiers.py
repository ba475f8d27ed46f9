"""On-disk min/max tiers of the app store's metrics, so reading a view costs per pixel, not per point.

The fold and its storage are shared with the agent (``pilothouse.store.tiers``, ``pilothouse.store.tier_table``):
the store keeps them per (agent, run, metric), with the level-0 blocks listing the entries that
hold their points.  ``view`` picks the coarsest level with at least two buckets per pixel column,
so it reads about 2-8 buckets per column whatever the run's length; zoomed in past the finest
level it reads the raw points of the entries touching the range and draws them through an
in-memory ``Series``, exactly as the charts draw a live run.  ``draw`` turns buckets into what a
chart draws, for the store's own tiers and for those an agent answers for a run not stored yet.

A run resumed on the same node (a ``resumed`` event: attempt 2, 3, ...) logs again steps its earlier
attempt logged; the chart draws the earlier attempt's points there faint (``pilothouse.gui.attempts``),
so each attempt keeps tiers of its own: its points are folded under the metric's name with the
attempt's number appended (``attempt_key``), the first attempt's under the name itself.

Why folding waits: a fold rewrites the last block of each of its metrics at every stored level,
so folding each write cost per metric stream, not per point: an app following 64 agents rewrote
5,120 block rows a write and fell seconds behind.  So a write only notes, per (agent, run, metric),
that its entries above ``folded_to`` wait (``tier_tail``); once the oldest has waited FOLD_SECONDS (or
FOLD_POINTS wait), ``fold_due`` folds every stream waiting then, in the writer's transactions, a bounded
slice per write so no write waits long behind a fold.
Every read merges the waiting entries into the buckets it reads, inside one read transaction, so a
view never misses a point nor counts one twice, and a crash loses nothing (the waiting is in the file).
The rest of a packed entry whose first part was folded already is folded at once.

A wall-time axis reads the same buckets: each keeps the wall times of its first and last points,
so ``time_view`` finds the steps of a time range by going down the levels (a few buckets each)
and folds the buckets per column of time; a min or max is drawn at a time interpolated between
its bucket's first and last point, less than half a column off.  The time axis assumes wall time
does not go back as steps go forward, as within one attempt of a run (each attempt has tiers of
its own).  Each column's mean (from the buckets' sums) is what a smoothed curve
follows (``smoothed``).
"""

from __future__ import annotations

import contextlib
import functools
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Protocol

import numpy as np
import sqlite_utils

from pilothouse.gui.lod import Series, ema, view_of
from pilothouse.store.db import insert_rows
from pilothouse.store.tier_table import BLOCK, NO_IDS, TOP, TierTable, join_records
from pilothouse.store.tiers import FANOUT, LEVELS, WIDTHS, columns, level_for, levels, points, reduce, whole
from pilothouse.wire.entries import KIND_EVENT, KIND_METRIC, join_chunks, unpack_blob
from pilothouse.wire.packed_chunks import row_points

FOLD_SECONDS = 8.0  # a stream's entries wait this long at most before they are folded (a fold costs per stream:
                    # at 2 s the folds were half the writer's time at 16 agents x 500 points/s, a point or two a stream)
FOLD_POINTS = 262_144  # or until this many points wait in all streams together (about 6 MB to read)
FOLD_SLICE = 8  # streams folded at a time, for FOLD_BUDGET seconds a write at most (one slice at least): folding all
FOLD_BUDGET = 0.01  # or 32 at once held a write 30-60 ms each 2 s at 4 agents x 2,000 points/s (bench_load.py --app)
MIGRATE_ROWS = 2000  # entries folded at a time when a store from before the tiers is opened
KEYS = ("agent", "run", "metric")
ALL_STEPS = (-2.0 ** 63, 2.0 ** 63)
ATTEMPT = "\x1f"  # joins a metric's name and a later attempt's number: no metric name holds it
Raw = Callable[[np.ndarray], tuple[np.ndarray, np.ndarray, np.ndarray]]  # entry ids -> (steps, vals, times)
Clip = tuple[float, float] | None  # the steps [lo, hi) a curve keeps of a metric (an attempt's); None: all


def _in_snapshot(read: Callable) -> Callable:
    """A read of ``Tiers`` inside one snapshot (``Tiers.snapshot``): the tiers and the waiting entries of one commit."""
    @functools.wraps(read)
    def in_snapshot(self: Tiers, *args: object, **kwargs: object) -> object:
        with self.snapshot():
            return read(self, *args, **kwargs)
    return in_snapshot


@dataclass
class TierView:
    """What a chart draws for one curve: ``xs``/``ys`` (per column its first point, min, max and
    last point at their x, a NaN after a column holding a non-finite value; or the raw points), the
    x of non-finite values (one per column) for markers, per column its x range [starts, stops) (steps,
    or times on a time axis), min and max (empty when the raw points were read), and what a smoothed
    curve follows: per column (or raw point) with a finite value, its middle x, mean and how many
    finite points it holds."""

    xs: np.ndarray
    ys: np.ndarray
    marks: np.ndarray
    level: int  # -1: raw points
    starts: np.ndarray
    stops: np.ndarray
    mins: np.ndarray
    maxs: np.ndarray
    centers: np.ndarray
    means: np.ndarray
    weights: np.ndarray


class Tiers:
    """The tier table of the app's store (``TierTable`` keyed by agent, run and metric, with the
    entry ids of each level-0 block): written in the store's own transaction."""

    def __init__(self, db: sqlite_utils.Database) -> None:
        self.db = db
        self.table = TierTable(db.conn, KEYS, ids=True)
        self._resumes: dict[tuple[str, str], np.ndarray] = {}  # (agent, run) -> when each resume began
        self._version = -1  # the file's data_version the resumes were read at (another connection writes)
        self._waiting = 0  # points this connection wrote since its last fold (a hint: another may have more)
        self._pass_until: float | None = None  # a fold under way: the streams waiting since then are folded
        self.folds = 0  # how many times this connection folded what waited
        # what waits, as this connection wrote it (key -> its folded_to, entries in arrival order): the fold
        # reads these instead of the file (reading them back cost as much as writing them); what another
        # connection or an earlier process left waiting is read from the file
        self._held: dict[tuple[str, str, str], tuple[int, list[Sequence]]] = {}
        self._tails: dict[tuple, tuple] = {}  # the waiting points of each key read in the current snapshot
        self._tails_at: tuple[int, int] = (-1, -1)

    def create(self) -> bool:
        """The tier table and the waiting streams' table; True when the tiers hold nothing yet."""
        self.db.execute("CREATE TABLE IF NOT EXISTS tier_tail (agent TEXT NOT NULL, run TEXT NOT NULL, metric TEXT "
                        "NOT NULL, folded_to INTEGER NOT NULL, since REAL NOT NULL, PRIMARY KEY (agent, run, metric))")
        return self.table.create()

    def add(self, stored: Iterable[tuple[str, Sequence[Sequence]]], parts: Iterable[tuple[str, Sequence]] = ()) -> None:
        """Newly stored metric entries of agents, (agent, entries) each (protocol field order: id, run,
        kind, metric, rank, n, steps, vals, times, body): they wait to be folded (see the module
        docstring).  ``parts``: (agent, the rest of a packed entry) appended to an entry stored before,
        folded now unless that entry waits.  Only entries not stored before may be passed: a re-sent
        page must not count twice (``LocalStore.write_pages`` passes the rows it inserted)."""
        streams: dict[tuple[str, str, str], list[Sequence]] = {}
        for agent, entries in stored:
            for e in entries:
                if e[2] == KIND_METRIC and e[5]:
                    streams.setdefault((agent, e[1], e[3]), []).append(e)
                    self._waiting += e[5]
                elif e[2] == KIND_EVENT and resume_started(unpack_blob(e[9])) is not None:
                    self._resumes.pop((agent, e[1]), None)
        waiting = self._waiting_since()  # the file's word: a run removed or renamed meanwhile lost its row
        for key in [key for key, held in self._held.items() if waiting.get(key) != held[0]]:
            del self._held[key]
        new = []
        for key, entries in streams.items():
            if key in self._held:
                self._held[key][1].extend(entries)
            elif key not in waiting:  # its first waiting entries: noted, and held
                new.append((*key, entries[0][0] - 1, time.time()))
                self._held[key] = (entries[0][0] - 1, list(entries))
        insert_rows(self.db.conn, "INSERT INTO tier_tail", new)
        rests = []
        for agent, e in parts:
            key = (agent, e[1], e[3])
            folded_to = waiting.get(key, self._held[key][0] if key in self._held else None)
            if folded_to is None or e[0] <= folded_to:
                rests.append((agent, [e]))
            elif key in self._held:  # the rest of a waiting entry waits with it
                self._held[key][1].append(e)
        self.fold(rests)

    def _waiting_since(self) -> dict[tuple[str, str, str], int]:
        """Every waiting stream's folded_to, as the file says."""
        return {(a, r, m): f for a, r, m, f in self.db.execute("SELECT agent, run, metric, folded_to FROM tier_tail")}

    def forget(self) -> None:
        """The transaction that wrote what is held rolled back: the file is the truth again."""
        self._held.clear()

    def waiting(self) -> bool:
        """Whether any entry waits to be folded."""
        return self.db.execute("SELECT 1 FROM tier_tail LIMIT 1").fetchone() is not None

    def fold_due(self, force: bool = False) -> bool:
        """Once the oldest stream waited FOLD_SECONDS (or FOLD_POINTS wait), fold every stream waiting
        then, oldest first, FOLD_SLICE at a time for FOLD_BUDGET, the rest in the next writes; ``force``:
        all now.  Whether it folded any."""
        now = time.time()
        if force or self._waiting >= FOLD_POINTS:
            self._pass_until = now
        elif self._pass_until is None:
            oldest = self.db.execute("SELECT MIN(since) FROM tier_tail").fetchone()[0]
            if oldest is None or now - oldest < FOLD_SECONDS:
                return False
            self._pass_until = now
        started = time.perf_counter()
        folded = False
        while force or not folded or time.perf_counter() - started < FOLD_BUDGET:
            due = self.db.execute("SELECT agent, run, metric, folded_to FROM tier_tail WHERE since <= ? "
                                  "ORDER BY since LIMIT ?", [self._pass_until, FOLD_SLICE]).fetchall()
            if not due:
                self._pass_until = None
                break
            self._fold_streams(due)
            folded = True
        self.folds += folded
        return folded

    def _fold_streams(self, due: list[tuple[str, str, str, int]]) -> None:
        """Fold these waiting streams (agent, run, metric, folded_to): from what this connection holds
        of them, else from the file; they wait no more."""
        stored = []
        for agent, run, metric, folded_to in due:
            held = self._held.pop((agent, run, metric), None)
            if held is not None and held[0] == folded_to:
                stored.append((agent, held[1]))
                continue
            rows = self.db.execute("SELECT id, run, kind, metric, rank, n, steps, vals, times, body FROM entries "
                                   "WHERE agent=? AND run=? AND kind=? AND metric=? AND id>? ORDER BY id",
                                   [agent, run, KIND_METRIC, metric, folded_to]).fetchall()
            stored.append((agent, [(*e[:6], *row_points(*e[6:9]), e[9]) for e in rows]))
        self.db.conn.executemany("DELETE FROM tier_tail WHERE agent=? AND run=? AND metric=?",
                                 [key[:3] for key in due])
        self._waiting = max(0, self._waiting - sum(e[5] for _, entries in stored for e in entries))
        self.fold(stored)

    def fold(self, stored: Iterable[tuple[str, Sequence[Sequence]]]) -> None:
        """Fold metric entries of agents, (agent, entries) each, into the tiers now, every metric in one pass."""
        groups: dict[tuple[str, str, str], list] = {}
        for agent, entries in stored:
            for e in entries:
                if e[2] == KIND_METRIC and e[5]:
                    groups.setdefault((agent, e[1], e[3]), []).append(e)
        items = []
        resumes = {key: self.resumes(*key) for key in {(agent, run) for agent, run, _ in groups}}  # once a run
        for (agent, run, metric), chunk in groups.items():
            steps, vals, times = join_chunks([(e[6], e[7], e[8]) for e in chunk])
            ids = np.repeat(np.array([e[0] for e in chunk], np.int64), [e[5] for e in chunk])
            attempt = np.searchsorted(resumes[agent, run], times, "right")  # 0: before any resume
            for n in np.unique(attempt).tolist():
                at = attempt == n
                items.append(((agent, run, attempt_key(metric, n + 1)), steps[at], vals[at], times[at], ids[at]))
        self.table.fold_many(items)

    def resumes(self, agent: str, run: str) -> np.ndarray:
        """When each resume of a run on this agent began, in order (its points from then on are the
        next attempt's)."""
        version = self.db.execute("PRAGMA data_version").fetchone()[0]
        if version != self._version:  # another connection (the app's store writer) committed: read again
            self._resumes, self._version = {}, version
        if (agent, run) not in self._resumes:
            bodies = (unpack_blob(b) for (b,) in self.db.execute(
                "SELECT body FROM entries WHERE agent=? AND run=? AND kind=? AND metric IS NULL",
                [agent, run, KIND_EVENT]))
            self._resumes[(agent, run)] = np.sort([t for b in bodies if (t := resume_started(b)) is not None])
        return self._resumes[(agent, run)]

    def add_all(self) -> None:
        """Build the tiers of every metric entry already stored (a store from before them, or whose
        tiers were dropped): none waits any more."""
        if self.db.execute("SELECT 1 FROM sqlite_master WHERE name='tier_tail'").fetchone():
            self.db.execute("DELETE FROM tier_tail")
        for (agent,) in self.db.execute("SELECT DISTINCT agent FROM entries WHERE kind=?", [KIND_METRIC]).fetchall():
            rows = self.db.execute("SELECT id, run, kind, metric, rank, n, steps, vals, times, body FROM entries "
                                   "WHERE agent=? AND kind=? ORDER BY id", [agent, KIND_METRIC])
            while chunk := rows.fetchmany(MIGRATE_ROWS):
                self.fold([(agent, [(*e[:6], *row_points(*e[6:9]), e[9]) for e in chunk])])

    @contextlib.contextmanager
    def snapshot(self) -> Iterator[None]:
        """One read transaction (unless one is open): the tiers and the waiting entries as of one
        commit, so a fold committed meanwhile cannot make a point missing or counted twice."""
        if self.db.conn.in_transaction:
            yield
            return
        self.db.execute("BEGIN")
        try:
            yield
        finally:
            self.db.execute("COMMIT")

    def tail_points(self, key: tuple[str, str, str]) -> tuple[np.ndarray, ...]:
        """(steps, vals, times, entry ids) of the waiting points of a metric's tiers (of its attempt),
        in arrival order; read once per snapshot."""
        at = (self.db.execute("PRAGMA data_version").fetchone()[0], self.db.conn.total_changes)
        if at != self._tails_at:
            self._tails, self._tails_at = {}, at
        if key not in self._tails:
            agent, run, name = key
            metric = name.rpartition(ATTEMPT)[0] or name
            row = self.db.execute("SELECT folded_to FROM tier_tail WHERE agent=? AND run=? AND metric=?",
                                  [agent, run, metric]).fetchone()
            rows = [] if row is None else self.db.execute(
                "SELECT id, n, steps, vals, times FROM entries WHERE agent=? AND run=? AND kind=? AND metric=? "
                "AND id>? ORDER BY id", [agent, run, KIND_METRIC, metric, row[0]]).fetchall()
            steps, vals, times, ids = NO_IDS, np.empty(0), np.empty(0), NO_IDS
            if rows:
                steps, vals, times = join_chunks([row_points(*r[2:]) for r in rows])
                ids = np.repeat(np.array([r[0] for r in rows], np.int64), [r[1] for r in rows])
                resumes = self.resumes(agent, run)
                if len(resumes):
                    mine = np.searchsorted(resumes, times, "right") + 1 == attempt_of(name)
                    steps, vals, times, ids = steps[mine], vals[mine], times[mine], ids[mine]
            self._tails[key] = (steps, vals, times, ids, dict(levels(steps, vals, times)) if len(steps) else {})
        return self._tails[key][:4]

    def _buckets(self, key: tuple, level: int, x0: float, x1: float) -> np.ndarray:
        """``TierTable.buckets`` with the metric's waiting points folded in (the stored ones arrived first)."""
        rec = self.table.buckets(key, level, x0, x1)
        self.tail_points(key)
        new = self._tails[key][4].get(min(level, LEVELS - 1))
        if new is None:
            return rec
        width = WIDTHS[level]
        new = new[(new["bucket"] >= np.floor(x0 / width)) & (new["bucket"] <= np.floor(x1 / width))]
        return reduce(join_records([rec, new])) if len(new) else rec

    @_in_snapshot
    def buckets(self, agent: str, run: str, metric: str, level: int, x0: float, x1: float) -> np.ndarray:
        """The filled buckets of ``level`` overlapping steps x0..x1, in step order."""
        return self._buckets((agent, run, metric), level, x0, x1)

    @_in_snapshot
    def summary(self, agent: str, run: str, metric: str, clip: Clip = None, raw: Raw | None = None) -> np.ndarray:
        """One record of the whole metric, or of the steps ``clip`` keeps (count, x and y extent,
        non-finite count); empty if none."""
        key = (agent, run, metric)
        rec = self._buckets(key, TOP, *ALL_STEPS)
        return whole(rec if clip is None else self._split(key, rec, TOP, _straddling(clip), raw, clip))

    @_in_snapshot
    def view(self, agent: str, run: str, metric: str, x0: float, x1: float, pixels: int, raw: Raw,
             clip: Clip = None) -> TierView:
        """The points to draw steps x0..x1 on ``pixels`` columns (see ``TierView``), of the steps
        ``clip`` keeps; ``raw`` gives (steps, vals, times) of entry ids, in arrival order, for the
        finest zoom and a bucket holding steps either side of a clip's edge."""
        x0, x1, pixels = view_range(x0, x1, pixels)
        level = level_for(x0, x1, pixels)
        if level < 0:
            steps, vals, _ = self._raw_points(agent, run, metric, x0, x1, raw, clip)
            return _raw_view(steps, vals, x0, x1, pixels)
        rec = self._buckets((agent, run, metric), level, x0, x1)
        if clip is not None:
            rec = self._split((agent, run, metric), rec, level, _straddling(clip), raw, clip)
            rec["bucket"] = rec["xfirst"] // WIDTHS[level]  # finer records and points: in their bucket of level
        return draw(rec, level, x0, x1, pixels)

    @_in_snapshot
    def time_view(self, agent: str, run: str, metric: str, t0: float, t1: float, pixels: int, raw: Raw,
                  clip: Clip = None) -> TierView:
        """``view`` on a wall-time axis: the points to draw times t0..t1 on ``pixels`` columns.  A
        bucket lasting more than half a column (a pause, a slow stretch: its min or max could not be
        placed by interpolation) is drawn from the finer buckets in it, down to its points."""
        t0, t1, pixels = view_range(t0, t1, pixels)
        key = (agent, run, metric)
        found = self._narrow(key, t0, t1, pixels)
        if found is None:
            return _raw_view(NO_IDS, np.empty(0), t0, t1, pixels)
        level, rec = found
        if level >= 0:
            most = (t1 - t0) / pixels / 2
            straddling = _straddling(clip) if clip is not None else None

            def pick(r: np.ndarray) -> np.ndarray:
                wide = r["tlast"] - r["tfirst"] > most
                return wide if straddling is None else wide | straddling(r)

            rec = self._split(key, rec, level, pick, raw, clip)
            return draw_by_time(rec[(rec["tlast"] >= t0) & (rec["tfirst"] <= t1)], level, t0, t1, pixels)
        _, vals, times = self._raw_points(agent, run, metric, float(rec["xfirst"][0]), float(rec["xlast"][-1]), raw,
                                          clip)
        return _raw_view(times, vals, t0, t1, pixels)

    def _split(self, key: tuple, rec: np.ndarray, level: int, pick: Callable[[np.ndarray], np.ndarray],
               raw: Raw, clip: Clip = None) -> np.ndarray:
        """These buckets of ``level`` with every one ``pick`` picks replaced by the buckets of the
        levels below it, down to its raw points, until none is picked (one read per level, over
        the steps of the picked ones); then only those of the steps ``clip`` keeps."""
        while level >= 0:
            wide = pick(rec)
            if not wide.any():
                break
            lo, hi = float(rec["xfirst"][wide].min()), float(rec["xlast"][wide].max())
            if level:
                finer = self._buckets(key, level - 1, lo, hi)
                finer = finer[np.isin(finer["bucket"] // FANOUT, rec["bucket"][wide])]
            else:
                steps, vals, times = self._raw_points(*key, lo, hi, raw)
                finer = points(steps, vals, times)
                finer = finer[np.isin(steps // WIDTHS[0], rec["bucket"][wide])]
            rec = join_records([rec[~wide], finer])
            rec = rec[np.argsort(rec["xfirst"], kind="stable")]
            level -= 1
        return rec if clip is None else rec[(rec["xfirst"] >= clip[0]) & (rec["xlast"] < clip[1])]

    def _narrow(self, key: tuple, t0: float, t1: float, pixels: int, point: bool = False
                ) -> tuple[int, np.ndarray] | None:
        """The buckets over times t0..t1, going down the stored levels from the top one, each read
        over the steps of the buckets kept a level above: at the coarsest level with at least two
        buckets per column of those steps (-1 and level 0's buckets: the raw points are finer
        still), or with ``point`` at level 0, the one bucket nearest t0.  None when the metric has
        no point in t0..t1 (nor any point, with ``point``)."""
        x0, x1 = ALL_STEPS
        for level in range(TOP, -1, -1):
            rec = self._buckets(key, level, x0, x1)
            if not len(rec):
                return None
            if point:
                rec = rec[[int(np.argmin(np.maximum(rec["tfirst"] - t0, 0) + np.maximum(t0 - rec["tlast"], 0)))]]
            else:
                rec = rec[(rec["tlast"] >= t0) & (rec["tfirst"] <= t1)]
                if not len(rec):
                    return None
            x0, x1 = float(rec["xfirst"][0]), float(rec["xlast"][-1])
            want = -1 if point else level_for(x0, x1, pixels)
            if want >= level:
                return want, (self._buckets(key, want, x0, x1) if want > level else rec)
        return -1, rec

    @_in_snapshot
    def nearest(self, agent: str, run: str, metric: str, xq: float, raw: Raw,
                clip: Clip = None) -> tuple[float, float] | None:
        """The stored point (of the steps ``clip`` keeps) whose step is nearest xq (a crosshair
        readout): among the raw points of the blocks around xq, else among the first and last
        points of ever wider buckets."""
        if clip is not None:
            xq = min(max(xq, clip[0]), clip[1] - 1)
        steps, vals, _ = self._raw_points(agent, run, metric, xq, xq, raw, clip)
        if not len(steps):
            for level, width in enumerate(WIDTHS):
                rec = self._buckets((agent, run, metric), level, xq - width * BLOCK, xq + width * BLOCK)
                if clip is not None:
                    rec = rec[(rec["xfirst"] >= clip[0]) & (rec["xlast"] < clip[1])]
                if len(rec):
                    steps, vals = np.concatenate([rec["xfirst"], rec["xlast"]]), np.concatenate([rec["first"],
                                                                                                  rec["last"]])
                    break
        if not len(steps):
            return None
        i = int(np.argmin(np.abs(steps.astype(np.float64) - xq)))
        return float(steps[i]), float(vals[i])

    @_in_snapshot
    def nearest_time(self, agent: str, run: str, metric: str, tq: float, raw: Raw,
                     clip: Clip = None) -> tuple[float, float] | None:
        """``nearest`` on a wall-time axis: (time, value) of the stored point nearest time tq, among
        those of its bucket of level 0 that ``clip`` keeps (None if none)."""
        found = self._narrow((agent, run, metric), tq, tq, 1, point=True)
        if found is None:
            return None
        rec = found[1]
        _, vals, times = self._raw_points(agent, run, metric, float(rec["xfirst"][0]), float(rec["xlast"][0]), raw,
                                          clip)
        if not len(times):
            return None
        i = int(np.argmin(np.abs(times - tq)))
        return float(times[i]), float(vals[i])

    def _raw_points(self, agent: str, run: str, metric: str, x0: float, x1: float, raw: Raw,
                    clip: Clip = None) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(steps, vals, times) of x0..x1 and a level-0 block either side (of the steps ``clip``
        keeps), sorted by step (equal steps in arrival order), from the entries the level-0 blocks
        list: only the points of the key's attempt (an entry packed in the app's store may hold
        points of the attempts either side of a resume)."""
        span = WIDTHS[0] * BLOCK
        rows = self.table.rows((agent, run, metric), 0, int(np.floor(x0 / span)) - 1, int(np.floor(x1 / span)) + 1)
        ids = np.unique(np.concatenate([*(i for _, _, i in rows), self.tail_points((agent, run, metric))[3]]))
        if not len(ids):
            return NO_IDS, np.empty(0), np.empty(0)
        steps, vals, times = raw(ids)
        near = (steps >= x0 - span) & (steps <= x1 + span)
        resumes = self.resumes(agent, run)
        if len(resumes):
            near &= np.searchsorted(resumes, times, "right") + 1 == attempt_of(metric)
        if clip is not None:
            near &= (steps >= clip[0]) & (steps < clip[1])
        order = np.argsort(steps[near], kind="stable")
        return steps[near][order], vals[near][order], times[near][order]


def _raw_view(xs: np.ndarray, vals: np.ndarray, x0: float, x1: float, pixels: int) -> TierView:
    """Zoomed past level 0: these raw points (of the entries touching the range, and a block either
    side, for the line to the edges; x: their steps or times) drawn through a Series."""
    series = Series.of(xs.astype(np.float64), vals)
    finite = np.isfinite(series.y)
    empty = np.empty(0)
    return TierView(*series.view(x0, x1, pixels), series.nonfinite(x0, x1), -1, empty, empty, empty, empty,
                    series.x[finite], series.y[finite], np.ones(int(finite.sum())))


def _straddling(clip: tuple[float, float]) -> Callable[[np.ndarray], np.ndarray]:
    """Which records hold steps on both sides of an edge of ``clip`` (to be split down to points)."""
    lo, hi = clip

    def straddles(rec: np.ndarray) -> np.ndarray:
        return ((rec["xfirst"] < lo) & (rec["xlast"] >= lo)) | ((rec["xfirst"] < hi) & (rec["xlast"] >= hi))
    return straddles


def attempt_key(metric: str, attempt: int) -> str:
    """The name a metric's tiers are kept under for the ``attempt``-th attempt of its run on one agent."""
    return metric if attempt <= 1 else f"{metric}{ATTEMPT}{attempt}"


def attempt_of(key: str) -> int:
    """The attempt whose tiers ``key`` names (``attempt_key``'s inverse)."""
    _, mark, number = key.rpartition(ATTEMPT)
    return int(number) if mark else 1


def resume_started(event: object) -> float | None:
    """When the process of a ``resumed`` event began (on its node's clock); None for another event."""
    if not isinstance(event, dict) or event.get("event") != "resumed":
        return None
    started = event.get("started", event.get("time"))
    return float(started) if isinstance(started, (int, float)) and not isinstance(started, bool) else 0.0


def view_range(x0: float, x1: float, pixels: int) -> tuple[float, float, int]:
    """A view's range in order and its column count, or ValueError for a non-finite range."""
    if not (np.isfinite(x0) and np.isfinite(x1)):
        raise ValueError(f"a view's x range must be finite: {x0}..{x1}")
    return min(x0, x1), max(x0, x1), max(int(pixels), 1)


def draw(rec: np.ndarray, level: int, x0: float, x1: float, pixels: int) -> TierView:
    """What a chart draws of the buckets ``rec`` of ``level`` (those overlapping x0..x1, in step
    order) on ``pixels`` columns: the buckets folded per column, each column's envelope."""
    cols, bounds = columns(rec, level, x0, x1, pixels)
    starts = np.maximum.accumulate(bounds[cols["bucket"]]).astype(np.int64)
    stops = bounds[cols["bucket"] + 1].astype(np.int64)
    return drawn(cols, level, starts, stops)


def draw_by_time(rec: np.ndarray, level: int, t0: float, t1: float, pixels: int) -> TierView:
    """``draw`` on a wall-time axis: the buckets ``rec`` (in step order) folded per column of times
    t0..t1, each in the column of its first point; a min, max or non-finite value is placed at a
    time interpolated by step between its bucket's first and last point."""
    edges = np.linspace(t0, t1, pixels + 1)
    at = rec.copy()
    at["bucket"] = np.clip(np.searchsorted(edges[1:-1], rec["tfirst"], "right"), 0, pixels - 1)
    cols = reduce(at)
    anchors = np.column_stack([rec["xfirst"], rec["xlast"]]).ravel().astype(np.float64)
    times = np.column_stack([rec["tfirst"], rec["tlast"]]).ravel()

    def time_of(steps: np.ndarray) -> np.ndarray:
        return np.interp(steps.astype(np.float64), anchors, times)

    xs = {"first": cols["tfirst"], "min": time_of(cols["xmin"]), "max": time_of(cols["xmax"]), "last": cols["tlast"]}
    return drawn(cols, level, edges[cols["bucket"]], edges[cols["bucket"] + 1], xs,
                 time_of(cols["xbad"][cols["bad"] > 0]))


def drawn(cols: np.ndarray, level: int, starts: np.ndarray, stops: np.ndarray,
          xs: dict[str, np.ndarray] | None = None, marks: np.ndarray | None = None) -> TierView:
    """The view of records folded per pixel column (``columns``): each column's envelope; ``xs``:
    the x of each column's first, min, max and last point (default: their steps), ``marks``: of
    its first non-finite value."""
    xs = xs or {field: cols["x" + field].astype(np.float64) for field in ("first", "min", "max", "last")}
    finite = cols["count"] - cols["bad"]
    has = finite > 0
    with np.errstate(invalid="ignore", divide="ignore"):
        means = cols["sum"] / finite
    return TierView(*_envelope(cols, xs), cols["xbad"][cols["bad"] > 0].astype(np.float64) if marks is None else marks,
                    level, starts, stops, cols["min"], cols["max"], ((xs["first"] + xs["last"]) / 2)[has], means[has],
                    finite[has].astype(np.float64))


def smoothed(view: TierView, alpha: float, x0: float, x1: float, pixels: int) -> tuple[np.ndarray, np.ndarray]:
    """A smoothed curve of a view drawn from tiers: TensorBoard's debiased EMA over its columns'
    means, each weighing as many points as it holds (an EMA over raw points whose values were
    their column's mean), from the view's first column on, as a chart smooths what it was sent."""
    if not len(view.means):
        return np.empty(0), np.empty(0)
    return view_of(view.centers, ema(view.means, alpha, weights=view.weights)[0], x0, x1, pixels)


class Drawn(Protocol):
    drawn: TierView | None


class TierEma:
    """What ``lod.Ema`` is to a ``Series``, for a curve drawn from tiers (``StoredSeries``,
    ``RemoteSeries``): its smoothed copy, made from the view of each frame it draws (``smoothed``)."""

    def __init__(self, source: Drawn, alpha: float) -> None:
        if not 0.0 <= alpha < 1.0:
            raise ValueError(f"alpha must be in [0, 1): {alpha}")
        self.source, self.alpha = source, alpha

    def update(self) -> TierEma:
        return self

    def view(self, x0: float, x1: float, pixels: int) -> tuple[np.ndarray, np.ndarray]:
        drawn = self.source.drawn
        return smoothed(drawn, self.alpha, x0, x1, pixels) if drawn is not None else (np.empty(0), np.empty(0))


def _envelope(cols: np.ndarray, xs: dict[str, np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
    """Per column its first point, min, max and last point at their own x (in x order; a
    non-finite first or last left out), then a NaN where the column holds a non-finite value:
    the line runs through every column's extremes and joins the columns where the data does."""
    n = len(cols)
    x = np.empty((n, 5))
    y = np.empty((n, 5))
    for i, field in enumerate(("first", "min", "max", "last")):
        x[:, i], y[:, i] = xs[field], cols[field]
    order = np.argsort(x[:, :4], axis=1, kind="stable")
    x[:, :4] = np.take_along_axis(x[:, :4], order, axis=1)
    y[:, :4] = np.take_along_axis(y[:, :4], order, axis=1)
    x[:, 4], y[:, 4] = x[:, 3], np.nan
    keep = np.ones((n, 5), bool)
    keep[:, :4] = np.isfinite(y[:, :4])
    keep[:, 4] = cols["bad"] > 0
    return x[keep], y[keep]
