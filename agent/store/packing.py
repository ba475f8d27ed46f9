"""Packing small metric entries into large compressed ones, for the node's journal and the app's store.

Why: a trainer's turn, an agent's turn, a once-a-second GPU reading each make one small entry per
metric, often of one point: about 90 B of SQLite row for a 24 B point.  ``Packer`` joins a stream's
oldest small entries into one row (``pilothouse.wire.packed_chunks``: deltas, byte planes, zstd) that
takes the id of the last one it joined, a bounded step at a time in the owner's transaction, so a
week of readings costs a few bytes a point.

One rule for both: an entry is small below SMALL points (a larger one's row costs it little); a
stream is worth a step once MIN_ROWS small entries wait; a step joins the stream's first run of
MIN_JOIN consecutive small entries or more (or fewer, once they hold MAX_POINTS points), at most
MAX_POINTS points over at most ``packed_chunks.MAX_SPAN`` ids (what a reader of the journal looks
back for an entry reaching into its page).  A short run between large entries stays as it is.

What differs is passed in (``Layout``): the table, the columns beside ``id`` that key a row (the
app's agent), those that name a stream (the journal packs each rank apart; the app, which keeps no
rank apart, packs them together), whether rows say where a packed entry begins (the journal's
``first_id``), the newest id that may be packed (the app's cursor: above it a row may be a packed
part waiting for its rest), and, where the tiers' level-0 blocks list the entries holding their points
(the app's), the tier table whose lists now name the packed entry.

What it knows of each stream lives in memory: every stream is counted once at start (``survey``, a
few at a time), then the owner's writes tell it what they added (``added``).  A step undone (a full
disk) leaves that memory ahead of the file: the owner calls ``reset`` and it counts again.
"""

from __future__ import annotations

import itertools
import os
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass

import numpy as np

from pilothouse.store.db import sqlite_utils
from pilothouse.store.tier_table import TierTable
from pilothouse.wire import packed_chunks
from pilothouse.wire.entries import ENTRY_FIELDS, KIND_METRIC, Entry

MIN_ROWS = int(os.environ.get("PILOTHOUSE_PACK_ROWS", "256"))  # small entries a stream gathers before a step
# packs its oldest (tests that need many small entries to stay raise it)
MAX_ROWS = 2048  # entries a step looks at, at most: a step holds its owner about 6 ms (bench_storage.py)
MAX_POINTS = 2048  # points in one packed entry: what a reader inside one decodes, and a damaged page loses
SMALL = 64  # an entry of fewer points is worth joining (its row costs more than its points)
MIN_JOIN = 16  # consecutive small entries worth one packed row (a shorter run between large ones stays)
SURVEY_STREAMS = 64  # streams counted per step of the survey at start

Row = tuple[int, int, int, bool]  # (id, n, rank, plain): what a step looks at before choosing
Account = Callable[[tuple, list[tuple], bytes], None]  # (stream, rows joined with their blobs, packed blob)


@dataclass(frozen=True)
class Layout:
    """Where an owner keeps its entries (see the module docstring)."""

    table: str
    owner: tuple[str, ...]  # the columns beside ``id`` that key a row
    stream: tuple[str, ...]  # the columns that name a stream, ending with ``metric`` (and ``rank`` after it)
    first_id: bool = False

    @property
    def surveyed(self) -> tuple[str, ...]:
        """The columns a survey item names: the stream up to its metric."""
        return self.stream[:self.stream.index("metric") + 1]


class Packer:
    """Which streams are worth packing, and one packing step at a time."""

    def __init__(self, db: sqlite_utils.Database, layout: Layout, survey: Iterable[tuple], account: Account, *,
                 upto: Callable[[tuple], int] | None = None, tiers: TierTable | None = None,
                 names: Callable[[str], tuple[str, str]] | None = None) -> None:
        self.db, self.layout, self.account = db, layout, account
        self._at = [ENTRY_FIELDS.index(c) for c in layout.stream[len(layout.owner):]]  # an entry's own stream fields
        self._upto, self._tiers, self._names = upto, tiers, names
        self.small: dict[tuple, int] = {}  # small entries a stream may hold past ``packed_to`` (at most)
        self.packed_to: dict[tuple, int] = {}  # the stream's entries up to this id are not worth packing
        self._unseen: Iterator[tuple] = iter(survey)
        self._peeked: list[tuple] = []
        self.surveying = True
        rest = layout.stream[len(layout.surveyed):]
        where = " AND ".join(f"{c}=?" for c in layout.surveyed)
        self._survey_sql = (f"SELECT {''.join(c + ', ' for c in rest)}COALESCE(MAX(id) FILTER (WHERE vals IS NULL), 0), "
                            f"COUNT(*) FILTER (WHERE vals IS NOT NULL AND n < {SMALL}) FROM {layout.table} "
                            f"WHERE {where} AND kind='{KIND_METRIC}'" + (f" GROUP BY {', '.join(rest)}" if rest else ""))
        self._stream_where = " AND ".join(f"{c}=?" for c in layout.stream)
        self._owner_where = "".join(f"{c}=? AND " for c in layout.owner)

    def reset(self, survey: Iterable[tuple]) -> None:
        """Forget every count and count again (a step was undone, or entries came in around ``added``)."""
        self.small.clear()
        self.packed_to.clear()
        self.resurvey(survey)

    def resurvey(self, survey: Iterable[tuple]) -> None:
        """Count these streams again, after those still to count."""
        self._unseen = itertools.chain(self._unseen, survey)
        self.surveying = True

    def added(self, owner: tuple, entries: Iterable[Entry]) -> None:
        """Entries just written by ``owner`` (the key columns' values; repeats too: counts are a hint)."""
        for e in entries:
            if e.kind == KIND_METRIC and 0 < e.n < SMALL:
                key = (*owner, *(e[i] for i in self._at))
                self.small[key] = self.small.get(key, 0) + 1

    def forget(self, match: Callable[[tuple], bool]) -> None:
        """Stop counting the streams ``match`` picks (a run being removed)."""
        for key in [k for k in self.small if match(k)]:
            del self.small[key]
            self.packed_to.pop(key, None)

    def ready(self, held: Callable[[tuple], bool] = lambda key: False) -> tuple | None:
        """A stream worth a step, of those ``held`` does not hold back."""
        return next((key for key, count in self.small.items() if count >= MIN_ROWS and not held(key)), None)

    def survey(self) -> None:
        """Count the next SURVEY_STREAMS streams; once none is left, the survey is over."""
        items = self._peeked + list(itertools.islice(self._unseen, SURVEY_STREAMS + 1 - len(self._peeked)))
        self._peeked = items[SURVEY_STREAMS:]  # one looked at past this step's: it waits for the next
        self.surveying = bool(self._peeked)
        items = items[:SURVEY_STREAMS]
        for item in items:
            for *rest, packed_to, small in self.db.execute(self._survey_sql, list(item)).fetchall():
                key = (*item, *rest)
                self.packed_to[key] = max(packed_to, self.packed_to.get(key, 0))
                self.small[key] = small

    def pack(self, key: tuple) -> int:
        """Pack the stream's first run of small entries worth it, in the caller's transaction; returns the
        entries joined.  None joined: the stream waits for more entries."""
        owner = key[:len(self.layout.owner)]
        upto = f" AND id<={int(self._upto(key))}" if self._upto is not None else ""
        rows = self.db.execute(  # ids and counts first: the points only of the entries chosen (bounded memory)
            f"SELECT id, n, rank, vals IS NOT NULL FROM {self.layout.table} WHERE {self._stream_where} AND kind=? "
            f"AND id>?{upto} ORDER BY id LIMIT ?",
            [*key, KIND_METRIC, self.packed_to.get(key, 0), MAX_ROWS]).fetchall()
        chosen, settled = choose(rows)
        if settled is not None:
            self.packed_to[key] = settled
        if len(chosen) < 2:
            self.small.pop(key, None)  # nothing left worth it: the next writes count again
            return 0
        ids = [r[0] for r in chosen]
        marks = ", ".join("?" * len(ids))
        blobs = self.db.execute(f"SELECT steps, vals, times FROM {self.layout.table} WHERE {self._owner_where}"
                                f"id IN ({marks}) ORDER BY id", [*owner, *ids]).fetchall()
        points = packed_chunks.Points(*(b"".join(r[i] for r in blobs) for i in range(3)))
        blob = packed_chunks.pack(np.array(ids, np.int64), np.array([r[1] for r in chosen], np.uint32), points)
        self.account(key, [(*row, *got) for row, got in zip(chosen, blobs)], blob)
        self.db.execute(f"DELETE FROM {self.layout.table} WHERE {self._owner_where}id IN ({marks[3:]})",
                        [*owner, *ids[:-1]])
        ranks = {r[2] for r in chosen}
        first = ", first_id=?" if self.layout.first_id else ""
        self.db.execute(f"UPDATE {self.layout.table} SET n=?, rank=?, steps=?, vals=NULL, times=NULL{first} "
                        f"WHERE {self._owner_where}id=?",
                        [len(points.steps) // 8, ranks.pop() if len(ranks) == 1 else 0, blob,
                         *([ids[0]] if first else []), *owner, ids[-1]])
        if self._tiers is not None and self._names is not None:
            scope = key[:self.layout.stream.index("metric")]
            self._tiers.repoint(scope, *self._names(key[len(scope)]), np.array(ids, np.int64),
                                np.frombuffer(points.steps, np.int64))
        self.packed_to[key] = ids[-1]
        self.small[key] = max(0, self.small.get(key, 0) - len(chosen))
        return len(chosen)


def choose(rows: Sequence[Row]) -> tuple[list[Row], int | None]:
    """The first run of consecutive small plain rows worth a packed row (MIN_JOIN of them, or full of
    points or ids), and the id up to which no row will be worth packing (the rows before a large or
    packed one: a short run between them stays as it is)."""
    chosen: list[Row] = []
    points, settled = 0, None
    for row in rows:
        small = row[3] and 0 < row[1] < SMALL
        if small and points + row[1] <= MAX_POINTS and (not chosen or row[0] - chosen[0][0] <= packed_chunks.MAX_SPAN):
            chosen.append(row)
            points += row[1]
            continue
        if len(chosen) >= MIN_JOIN or (small and len(chosen) >= 2):
            return chosen, settled  # a long run, or one full of points or ids
        if small:
            settled, chosen, points = chosen[-1][0] if chosen else settled, [row], row[1]
        else:
            settled, chosen, points = row[0], [], 0
    return (chosen, settled) if len(chosen) >= MIN_JOIN else ([], settled)
