"""Packing a run's small metric entries into large compressed ones, in the agent's spare time.

Each (run, metric, rank) is a stream of entries, oldest first.  Once a stream holds MIN_ROWS
plain entries, ``step`` joins its oldest plain ones (up to MAX_ROWS entries or MAX_POINTS points)
into one packed entry (``packed_chunks``) that takes the id of the last entry it joined, and
deletes the others: one bounded transaction between the turns that take trainers' data, as
retention does, so ingest never waits for long and a week of 1 Hz readings costs single bytes
per point on disk.  The newest entries of a stream stay plain until enough follow them.  A run
whose tiers are being built is left alone until they are (the builder reads each row once).

What it knows of each stream lives in memory: at start it looks at every stream once, a few at
a time (``_survey``); then the journal's commits tell it what was added.
"""

from __future__ import annotations

import os
import time
from collections import deque

import numpy as np

from pilothouse.node.journal import Store
from pilothouse.node.journal_schema import ENTRY_OVERHEAD
from pilothouse.wire import packed_chunks
from pilothouse.wire.entries import KIND_METRIC, Entry

MIN_ROWS = int(os.environ.get("PILOTHOUSE_PACK_ROWS", "256"))  # plain entries a stream gathers before its
# oldest are packed (tests that need many small entries to stay raise it)
MAX_ROWS = 2048  # entries joined into one, at most: a step holds the loop about 6 ms (bench_storage.py)
MAX_POINTS = 2048  # points in one packed entry: what a reader inside one decodes, and a damaged page loses
SURVEY_STREAMS = 64  # (run, metric) pairs looked at per step of the survey at start

Stream = tuple[str, str, int]  # (run, metric, rank)


class Compactor:
    def __init__(self, store: Store):
        self.store = store
        self.plain: dict[Stream, int] = {}  # plain entries after the stream's last packed one
        self.ready: set[Stream] = set()  # streams with MIN_ROWS of them or more
        self.packed_to: dict[Stream, int] = {}  # the stream's newest packed entry: none below is worth packing
        self._held_until = 0.0
        self._unseen: deque[tuple[str, str]] = deque(store.db.execute("SELECT run, metric FROM last_values"))

    def pending(self) -> bool:
        return bool(self._unseen or self._packable()) and time.monotonic() >= self._held_until

    def _packable(self) -> Stream | None:
        """A stream ready to pack, of a run whose tiers are not being built (see ``journal_tiers``)."""
        building = self.store.tiers.building
        return next((key for key in self.ready if key[0] not in building), None)

    def failed(self) -> None:
        """The step's transaction was undone (a full disk): count again, and wait a second first."""
        self._held_until = time.monotonic() + 1.0
        self.resurvey()

    def added(self, entries: list[Entry]) -> None:
        """Entries just committed: a stream's plain count grows."""
        for e in entries:
            if e.kind == KIND_METRIC:
                self._count((e.run, e.metric, e.rank), self.plain.get((e.run, e.metric, e.rank), 0) + 1)

    def _count(self, key: Stream, plain: int) -> None:
        self.plain[key] = plain
        if plain >= MIN_ROWS:
            self.ready.add(key)
        else:
            self.ready.discard(key)

    def resurvey(self) -> None:
        """Entries arrived around ``added`` (an imported run): look at every stream again."""
        self._unseen.extend(self.store.db.execute("SELECT run, metric FROM last_values"))

    def forget(self, run: str) -> None:
        for key in [k for k in self.plain if k[0] == run]:
            del self.plain[key]
            self.packed_to.pop(key, None)
            self.ready.discard(key)

    def step(self) -> int:
        """One bounded piece of work in the caller's transaction; returns the entries it packed."""
        if self._unseen:
            self._survey()
            return 0
        key = self._packable()
        if key is None:
            return 0
        if key[0] in self.store.removing:
            self.forget(key[0])
            return 0
        return self._pack(key)

    def _survey(self) -> None:
        for _ in range(min(SURVEY_STREAMS, len(self._unseen))):
            run, metric = self._unseen.popleft()
            for rank, packed_to, plain in self.store.db.execute(
                    "SELECT rank, COALESCE(MAX(id) FILTER (WHERE vals IS NULL), 0), COUNT(*) FILTER "
                    "(WHERE vals IS NOT NULL) FROM journal WHERE run=? AND kind=? AND metric=? GROUP BY rank",
                    [run, KIND_METRIC, metric]):
                self.packed_to[(run, metric, rank)] = packed_to
                self._count((run, metric, rank), plain)

    def _pack(self, key: Stream) -> int:
        run, metric, rank = key
        db = self.store.db.conn
        rows = db.execute(  # ids and counts first: the points only of the entries chosen (a step's memory is bounded)
            "SELECT id, n FROM journal WHERE run=? AND kind=? AND metric=? AND id>? AND rank=? "
            "AND vals IS NOT NULL ORDER BY id LIMIT ?",
            [run, KIND_METRIC, metric, self.packed_to.get(key, 0), rank, MAX_ROWS]).fetchall()
        big = next((i for i, r in enumerate(rows) if r[1] < MAX_POINTS // 2), len(rows))
        if big:  # entries that big gain little: left plain, and never looked at again
            self.packed_to[key] = rows[big - 1][0]
            self._count(key, self.plain[key] - big)
            return 0
        counts = np.cumsum([r[1] for r in rows])
        span = np.searchsorted([r[0] for r in rows], rows[0][0] + packed_chunks.MAX_SPAN, side="right")
        rows = rows[:max(1, min(int(span), int(np.searchsorted(counts, MAX_POINTS, side="right"))))]
        if len(rows) < 2:  # fewer than the count said (a removal, a rollback): look again later
            self._count(key, len(rows))
            return 0
        origins = np.array([r[0] for r in rows], np.int64)
        blobs = db.execute(f"SELECT steps, vals, times FROM journal WHERE id IN ({', '.join('?' * len(rows))}) "
                           "ORDER BY id", origins.tolist()).fetchall()
        points = packed_chunks.Points(*(b"".join(r[i] for r in blobs) for i in range(3)))
        blob = packed_chunks.pack(origins, np.array([r[1] for r in rows], np.uint32), points)
        last = int(origins[-1])
        db.executemany("DELETE FROM journal WHERE id=?", [(int(i),) for i in origins[:-1]])
        db.execute("UPDATE journal SET n=?, steps=?, vals=NULL, times=NULL, first_id=? WHERE id=?",
                   [len(points.steps) // 8, blob, int(origins[0]), last])
        freed = len(rows) * ENTRY_OVERHEAD + sum(map(len, points)) - ENTRY_OVERHEAD - len(blob)
        db.execute("UPDATE runs SET bytes=bytes-? WHERE id=?", [freed, run])
        self.packed_to[key] = last
        self._count(key, self.plain[key] - len(rows))
        return len(rows)
