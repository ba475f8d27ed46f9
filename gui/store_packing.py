"""Packing the app store's small metric entries into large compressed ones, on its writer's thread.

Why: the app keeps a followed run's entries as its agent's journal held them when they were read
live, one small entry per metric per turn of the agent, often of one point (a once-a-second GPU
reading, a paced trainer's step): about 90 B of SQLite row for a 24 B point.  As the agent's
compactor does its journal, ``StorePacker`` joins a metric's oldest small entries into one row
(``pilothouse.wire.packed_chunks``: deltas, byte planes, zstd) that takes the id of the last one it
joined, a bounded transaction at a time between the writer's own, so a week of readings costs a few
bytes a point in the app too.

Only entries at or below their agent's cursor are packed: above it an entry may be a packed part
waiting for its rest (``LocalStore.write_pages``).  The tiers' level-0 blocks list the entries that
hold their points; a packing step points the joined entries' ids at the packed one in the same
transaction, so a zoomed-in chart reads its points from there.  What it knows of each metric lives
in memory: each run's metrics are counted once when the writer starts, a run a step (one scan of
the run's index), and then the writes tell it what they added.
"""

from __future__ import annotations

from collections import deque

import numpy as np

from pilothouse.gui.local_store import LocalStore
from pilothouse.gui.tiers import ATTEMPT
from pilothouse.store.db import transaction
from pilothouse.store.tier_table import BLOCK
from pilothouse.store.tiers import WIDTHS
from pilothouse.wire import packed_chunks
from pilothouse.wire.entries import KIND_METRIC, Entry

MIN_ROWS = 256  # small entries a metric gathers before its oldest are packed (as the agent's compactor)
MAX_ROWS = 2048  # entries joined into one, at most
MAX_POINTS = 2048  # points in one packed entry, at most: what a zoomed-in chart decodes to read one
SMALL = 64  # an entry of fewer points is worth joining (its row costs more than its points)
MIN_JOIN = 16  # consecutive small entries worth one packed row (a shorter run between large ones stays)

Stream = tuple[str, str, str]  # (agent, run, metric)


class StorePacker:
    """What of a store is worth packing, and one packing step at a time (see the module docstring)."""

    def __init__(self, store: LocalStore) -> None:
        self.store = store
        self.small: dict[Stream, int] = {}  # small entries a metric may hold past its last packed one (at most)
        self.packed_to: dict[Stream, int] = {}  # the metric's entries at or below this id are not worth packing
        self._unseen = deque(store.db.execute("SELECT agent, run FROM run_bytes").fetchall())  # every run with entries

    def added(self, url: str, entries: list[Entry]) -> None:
        """Entries just written (repeats included: the counts are only a hint of where to look)."""
        for e in entries:
            if e.kind == KIND_METRIC and 0 < e.n < SMALL:
                key = (url, e.run, e.metric)
                self.small[key] = self.small.get(key, 0) + 1

    def pending(self) -> bool:
        return bool(self._unseen) or self._ready() is not None

    def _ready(self) -> Stream | None:
        return next((key for key, count in self.small.items() if count >= MIN_ROWS), None)

    def step(self) -> int:
        """One bounded transaction: count a run's metrics, or pack one metric's oldest small
        entries; returns the entries joined."""
        db = self.store.db
        if self._unseen:
            agent, run = self._unseen.popleft()
            for metric, count in db.execute("SELECT metric, COUNT(*) FROM entries WHERE agent=? AND run=? AND kind=? "
                                            "GROUP BY metric", [agent, run, KIND_METRIC]):
                self.small[(agent, run, metric)] = self.small.get((agent, run, metric), 0) + count
            return 0
        key = self._ready()
        if key is None:
            return 0
        with transaction(db):  # undone (a full disk): nothing of it is noted, it is tried again later
            joined, done_to = self._pack(key)
        if done_to is not None:
            self.packed_to[key] = done_to
        if not joined:
            self.small.pop(key)  # nothing left worth it below the cursor: the next writes count again
        else:
            self.small[key] -= joined
        return joined

    def _pack(self, key: Stream) -> tuple[int, int | None]:
        """Pack the metric's first run of small entries worth it; (entries joined, the id up to which
        none is left worth packing, or None)."""
        agent, run, metric = key
        db = self.store.db
        if db.execute("SELECT 1 FROM removed_runs WHERE agent=? AND run=?", [agent, run]).fetchone():
            return 0, None  # its rows are being deleted
        rows = db.execute("SELECT id, n, steps, vals, times FROM entries WHERE agent=? AND run=? AND kind=? "
                          "AND metric=? AND id>? AND id<=? ORDER BY id LIMIT ?",
                          [agent, run, KIND_METRIC, metric, self.packed_to.get(key, 0), self.store.cursor(agent),
                           MAX_ROWS]).fetchall()
        chosen, points, settled = _run_of_small(rows)
        if len(chosen) < 2:
            return 0, settled
        ids = np.array([r[0] for r in chosen], np.int64)
        counts = np.array([r[1] for r in chosen], np.uint32)
        joined = packed_chunks.Points(*(b"".join(r[k] for r in chosen) for k in (2, 3, 4)))
        blob = packed_chunks.pack(ids, counts, joined)
        last = int(ids[-1])
        db.execute(f"DELETE FROM entries WHERE agent=? AND id IN ({','.join('?' * (len(ids) - 1))})",
                   [agent, *ids[:-1].tolist()])
        db.execute("UPDATE entries SET n=?, rank=0, steps=?, vals=NULL, times=NULL WHERE agent=? AND id=?",
                   [points, blob, agent, last])
        # run_bytes: the rows' blobs less the packed one (the trigger on n counted 24 B a point more)
        freed = sum(len(r[2]) + len(r[3]) + len(r[4]) for r in chosen) - len(blob) + 24 * (points - chosen[-1][1])
        freed += (len(chosen) - 1) * (48 + 2 * (len(run.encode()) + len(metric.encode()) + len(agent.encode())))
        db.execute("UPDATE run_bytes SET bytes = MAX(bytes - ?, 0) WHERE agent=? AND run=?", [freed, agent, run])
        self._repoint(key, ids, np.frombuffer(joined.steps, np.int64))
        return len(chosen), last

    def _repoint(self, key: Stream, ids: np.ndarray, steps: np.ndarray) -> None:
        """The level-0 tier blocks of the joined entries' points (of each attempt's tiers) list the
        packed entry instead of them."""
        agent, run, metric = key
        span = WIDTHS[0] * BLOCK
        db = self.store.db
        # the metric's keys: its name, and its name then ATTEMPT and a number (no name holds a control
        # character, so no other metric's name falls between the two bounds): one range of the key's index
        found = db.execute("SELECT metric, block, ids FROM tiers WHERE agent=? AND run=? AND metric>=? AND metric<? "
                           "AND level=0 AND block BETWEEN ? AND ?",
                           [agent, run, metric, metric + chr(ord(ATTEMPT) + 1), int(steps.min()) // span,
                            int(steps.max()) // span]).fetchall()
        for name, block, listed in found:
            got = np.frombuffer(listed, np.int64)
            gone = np.isin(got, ids)
            if gone.any():
                db.execute("UPDATE tiers SET ids=? WHERE agent=? AND run=? AND metric=? AND level=0 AND block=?",
                           [np.unique(np.where(gone, ids[-1], got)).tobytes(), agent, run, name, block])


def _run_of_small(rows: list) -> tuple[list, int, int | None]:
    """The first run of consecutive plain small rows worth a packed row (MIN_JOIN of them, or
    MAX_POINTS points), its point count, and the id up to which no row will be worth packing (the
    rows before a large one: a short run between large rows stays plain)."""
    chosen, points, settled = [], 0, None
    for row in rows:
        small = row[3] is not None and 0 < row[1] < SMALL
        if small and points + row[1] <= MAX_POINTS:
            chosen.append(row)
            points += row[1]
            continue
        if len(chosen) >= MIN_JOIN or (small and len(chosen) >= 2):
            return chosen, points, settled  # a long run, or one full of points
        if small:
            settled, chosen, points = chosen[-1][0] if chosen else settled, [row], row[1]
        else:
            settled, chosen, points = row[0], [], 0
    return (chosen, points, settled) if len(chosen) >= MIN_JOIN else ([], 0, settled)
