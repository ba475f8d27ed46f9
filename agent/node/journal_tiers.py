"""The journal's tiers: exact per-bucket min/max of every metric (``pilothouse.store.tiers``), so an
app that has never seen a run can draw any range of it from a few buckets per pixel column.

Why buffered: folding a turn's points rewrites the tail block of every stored level (8 of them) of each
metric it touched, about 6 KB each on a long run; done every turn, a 1 Hz GPU reading would cost
tens of KB of writes per second for 24 B of points.  So a run's new points wait in memory and are
folded once a run holds FLUSH_POINTS of them or its oldest is FLUSH_SECONDS old (and the run with
the most once all runs together hold MAX_WAITING, so many live runs cannot grow memory); a tiers query
folds what waits into its answer, so answers are never behind the journal.

Why it survives a crash: ``tier_marks`` has a row for each run whose tiers lack some of its
entries, with ``folded_to``: every entry of the run up to that id is folded, none after.  A run
gets the row when its points begin to wait (once, not per turn) and loses it when they are
folded, in the same transactions.  At start, runs with a row (a crash, an import, a salvaged
journal, a journal from before the tiers) are brought up to date by ``build_some``, a bounded
step at a time between turns; meanwhile a query about such a run is told the tiers are not
ready, its new entries are left to the builder, and the compactor leaves the run alone.

How the builder reads: each metric on its own, in id order on the journal's (run, kind, metric,
id) index (a read of the whole run by id would sort all of its rows), from a cursor per metric
kept in the mark.  An entry packed before the build holds the ids of the entries it joined; its
points above ``folded_to`` are folded when the builder reaches it.  Since nothing of the run is
packed while it is built, every point is in exactly one row the builder reads once.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import numpy as np

from pilothouse.store.removal import delete_some
from pilothouse.store.tier_table import TierTable
from pilothouse.store.tiers import LEVELS, WIDTHS, levels, reduce
from pilothouse.wire import packed_chunks
from pilothouse.wire.entries import KIND_METRIC, Entry, join_chunks, unpack_blob
from pilothouse.wire.messages import pack

FLUSH_POINTS = 65_536  # a run's waiting points folded at once: about 1 MB of memory per run
MAX_WAITING = 262_144  # points waiting in all runs together, at most: about 4 MB
FLUSH_SECONDS = 60.0  # or once its oldest waiting point is this old
BUILD_POINTS = 32_768  # points a build step folds, about (bench_tiers --old-journal: 7-12 ms pings)
BUILD_ROWS = 16  # rows of one metric a build step reads at a time
REMOVE_ROWS = 24  # tier rows a removal step deletes: up to 12 KB each, about a retention batch
MAX_QUERY_BLOCKS = 256  # block rows one tiers query reads, at most (up to 32 K buckets, 3 MB)


@dataclass
class Build:
    """A run being built: every entry up to ``base`` is folded; ``cursors``: each metric's last row read."""

    base: int
    cursors: dict[str, int]


class JournalTiers:
    """The tiers of one journal connection; every write is in the journal's current transaction."""

    def __init__(self, table: TierTable) -> None:
        self.conn, self.table = table.conn, table  # its tables are made by ``journal_schema``
        self.building: dict[str, Build] = {}
        self.waiting: dict[str, dict[str, list[tuple[bytes, bytes, bytes]]]] = {}  # run -> metric -> chunks
        self._since: dict[str, tuple[float, int]] = {}  # run -> (when its first point began waiting, points)
        self.written = 0  # bytes of tier rows written since start (what bench_storage reports)
        self.reload()

    def reload(self) -> None:
        """Back to what is committed (after a rollback): what waited in memory is folded by the builder."""
        self.waiting.clear()
        self._since.clear()
        self.building = {run: Build(base, unpack_blob(cursors) or {})
                         for run, base, cursors in self.conn.execute("SELECT run, folded_to, cursors FROM tier_marks")}

    def rebuild(self, run: str) -> None:
        """Fold ``run`` again from its first entry (an imported run, whose entries came in around commits)."""
        self.forget(run)
        self.conn.execute("DELETE FROM tiers WHERE run=?", [run])
        self.conn.execute("INSERT OR REPLACE INTO tier_marks VALUES (?, 0, NULL)", [run])
        self.building[run] = Build(0, {})

    def committed(self, entries: list[Entry], hidden: dict[str, float]) -> None:
        """The turn's new entries, before its COMMIT: their points wait; runs due are folded."""
        now = time.monotonic()
        for e in entries:
            if e.kind != KIND_METRIC or not e.n or e.run in self.building or e.run in hidden:
                continue
            if e.run not in self.waiting:
                self.conn.execute("INSERT OR REPLACE INTO tier_marks VALUES (?, ?, NULL)", [e.run, e.id - 1])
                self.waiting[e.run] = {}
                self._since[e.run] = (now, 0)
            self.waiting[e.run].setdefault(e.metric, []).append((e.steps, e.vals, e.times))
            self._since[e.run] = (self._since[e.run][0], self._since[e.run][1] + e.n)
        self.flush(*(run for run, (since, count) in self._since.items()
                     if run not in hidden and (count >= FLUSH_POINTS or now - since >= FLUSH_SECONDS)))
        while sum(count for _, count in self._since.values()) > MAX_WAITING:
            self.flush(max(self._since, key=lambda run: self._since[run][1]))

    def flush(self, *runs: str) -> None:
        """Fold what of these runs waits, in one pass (a fold costs per level, whatever it holds);
        their tiers are then whole."""
        runs = list(runs)
        self.written += self.table.fold_many([((run, metric), *join_chunks(chunks), None) for run in runs
                                              for metric, chunks in self.waiting.pop(run, {}).items()])
        for run in runs:
            self._since.pop(run, None)
        self.conn.executemany("DELETE FROM tier_marks WHERE run=?", [[run] for run in runs])

    def flush_all(self) -> None:
        self.flush(*self.waiting)

    def forget(self, run: str) -> None:
        """A run being removed: nothing of it waits or is built any more."""
        self.waiting.pop(run, None)
        self._since.pop(run, None)
        self.building.pop(run, None)

    def build_some(self) -> str | None:
        """One bounded step of building the oldest run that needs it; returns it if now whole."""
        run, build = next(iter(self.building.items()))
        metrics = [m for (m,) in self.conn.execute("SELECT metric FROM last_values WHERE run=? ORDER BY metric",
                                                   [run])]
        points, whole = 0, True
        for metric in metrics:
            cursor = build.cursors.get(metric, build.base)
            while points < BUILD_POINTS:
                rows = self.conn.execute(
                    "SELECT id, steps, vals, times FROM journal WHERE run=? AND kind=? AND metric=? AND id>? "
                    "ORDER BY id LIMIT ?", [run, KIND_METRIC, metric, cursor, BUILD_ROWS]).fetchall()
                chunks = [packed_chunks.row_points(steps, vals, times, build.base) for _, steps, vals, times in rows]
                if chunks:
                    steps, vals, times = join_chunks(chunks)
                    if len(steps):
                        self.written += self.table.fold((run, metric), steps, vals, times)
                    points += len(steps) + len(rows)
                    cursor = build.cursors[metric] = rows[-1][0]
                if len(rows) < BUILD_ROWS:
                    break
            else:
                whole = False  # the step's budget ran out in this metric
            if not whole:
                break
        if whole:  # every metric read to its end in this step: no entry of the run is left unfolded
            del self.building[run]
            self.conn.execute("DELETE FROM tier_marks WHERE run=?", [run])
            return run
        self.conn.execute("UPDATE tier_marks SET cursors=? WHERE run=?", [pack(build.cursors), run])
        return None

    def remove_some(self, run: str) -> bool:
        """Delete up to REMOVE_ROWS tier rows of a run being removed; True once none is left."""
        self.forget(run)
        self.conn.execute("DELETE FROM tier_marks WHERE run=?", [run])
        return delete_some(self.conn, "tiers", {"run": run}, REMOVE_ROWS) < REMOVE_ROWS

    def buckets(self, run: str, metric: str, level: int, x0: float, x1: float) -> np.ndarray:
        """The filled buckets of ``level`` over steps x0..x1, what waits in memory folded in; or
        LookupError when the range reads more than MAX_QUERY_BLOCKS rows (ask a coarser level),
        NotReady while the run's tiers are being built."""
        if run in self.building:
            raise NotReady(run)
        stored = self.table.stored_blocks((run, metric), level, x0, x1)
        if stored > MAX_QUERY_BLOCKS:
            raise ValueError(f"steps {x0:g}..{x1:g} of {metric!r} hold {stored} blocks of level {level} "
                             f"({WIDTHS[level]} steps per bucket), more than the {MAX_QUERY_BLOCKS} a query "
                             f"reads: ask a coarser level (up to {LEVELS - 1}) or a narrower range")
        rec = self.table.buckets((run, metric), level, x0, x1)
        chunks = self.waiting.get(run, {}).get(metric)
        if not chunks:
            return rec
        new = dict(levels(*join_chunks(chunks)))[level]
        width = WIDTHS[level]
        new = new[(new["bucket"] >= np.floor(x0 / width)) & (new["bucket"] <= np.floor(x1 / width))]
        return reduce(np.concatenate([rec, new]))  # the stored ones arrived first


class NotReady(Exception):
    """A run's tiers are still being built (a journal from before them, an import, a crash)."""

    def __init__(self, run: str) -> None:
        super().__init__(f"the tiers of run {run} are being built; read its points meanwhile")
        self.run = run

