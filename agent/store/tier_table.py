"""The tiers of ``pilothouse.store.tiers`` stored in SQLite, in the writer's own transaction.

One row per (key, level, block of BLOCK buckets): the block's filled buckets as one ``RECORD``
array blob (a sparse run costs per filled bucket, not per step), and, where the owner reads raw
points through the tiers (the app's store), at level 0 the sorted ids of the entries with points
in the block.  Writing a page touches one or two block rows per level per metric (the run's tail).
The key is the columns that name a metric: (agent, run, metric) in the app's store, (run, metric)
in the agent's journal.

The agent's journal keeps its blocks compressed (``compress``): each field as a column, the integer
ones as deltas (bucket numbers and steps count up), split into byte planes, in one zstd frame:
about a third of the raw records on a random walk and a tenth on GPU readings, so the tiers cost
less on disk than the points they summarize.  The app's store keeps raw blocks (stores written
before stay readable).
"""

from __future__ import annotations

import sqlite3
from collections import OrderedDict
from collections.abc import Sequence

import numpy as np
import zstandard

from pilothouse.store.db import insert_rows
from pilothouse.store.tiers import RECORD, WIDTHS, first_level, reduce_groups, regroup, whole

BLOCK = 128  # buckets per stored row: a live append rewrites at most ~12 KB per level
STORED = 8  # levels kept on disk (16 .. 262,144 steps per bucket: a view of a run up to ~1 G steps reads them);
            # coarser ones are folded from the top stored one when read, so a write rewrites 8 tails, not 16
TOP = STORED - 1
NO_IDS = np.empty(0, np.int64)
DECODED_BYTES = 16 << 20  # decoded blocks a compressed table keeps for reads to come (see Decoded)
_compress = zstandard.ZstdCompressor(level=3).compress
_decompress = zstandard.ZstdDecompressor().decompress


class TierTable:
    """The ``tiers`` table of one connection; every write is in the caller's transaction."""

    def __init__(self, conn: sqlite3.Connection, keys: tuple[str, ...], *, ids: bool, compress: bool = False) -> None:
        self.conn, self.keys, self.ids = conn, keys, ids
        self._encode, self._decode = (encode, Decoded()) if compress else (np.ndarray.tobytes, _raw)
        self._key = " AND ".join(f"{k}=?" for k in keys)

    def create(self) -> bool:
        """Create the table; True when it holds nothing yet (new, or of an older ``RECORD``, whose
        blocks are dropped: the owner folds its points again)."""
        columns = [c for _, c, *_ in self.conn.execute("PRAGMA table_info(tiers)")]
        if columns and "buckets" in columns:
            return False
        if columns:
            self.conn.execute("DROP TABLE tiers")
        keys = "".join(f"{k} TEXT NOT NULL, " for k in self.keys)
        self.conn.execute(f"CREATE TABLE tiers ({keys}level INTEGER NOT NULL, block INTEGER NOT NULL, buckets BLOB "
                          f"NOT NULL, ids BLOB, PRIMARY KEY ({', '.join(self.keys)}, level, block))")
        return True

    def fold(self, key: tuple, steps: np.ndarray, vals: np.ndarray, times: np.ndarray,
             ids: np.ndarray | None = None) -> int:
        """``fold_many`` of one metric."""
        return self.fold_many([(key, steps, vals, times, ids)])

    def fold_many(self, items: Sequence[tuple[tuple, np.ndarray, np.ndarray, np.ndarray, np.ndarray | None]]) -> int:
        """Fold the points of many metrics, (key, steps, vals, times, ids) each (points in arrival order;
        ``ids``: each point's entry, kept when the table keeps ids), into every level; returns the
        bytes of block rows written.  Every metric is folded in one numpy pass per level
        (``reduce_groups``): a write of many agents' pages costs per level, not per metric."""
        index: dict[tuple, int] = {}
        for key, steps, *_ in items:
            if len(steps):
                index.setdefault(key, len(index))
        if not index:
            return 0
        keys = list(index)
        items = [item for item in items if len(item[1])]
        group = np.repeat(np.array([index[key] for key, *_ in items]), [len(steps) for _, steps, *_ in items])
        steps, vals, times = (np.concatenate([np.asarray(item[at], dtype) for item in items])
                              for at, dtype in ((1, np.int64), (2, np.float64), (3, np.float64)))
        listed = _ids_by_block(group, np.floor_divide(steps, WIDTHS[0] * BLOCK),
                               np.concatenate([i for *_, i in items])) if self.ids else {}
        new, groups = first_level(steps, vals, times, group)
        levels = []
        for level, width in enumerate(WIDTHS[:STORED]):
            if level:
                new, groups = regroup(new, width, groups)
            levels.append((new, groups, np.floor_divide(new["bucket"], BLOCK)))
        stored = self._stored(keys, levels)
        written, rows = 0, []
        for level, (new, groups, blocks) in enumerate(levels):
            old = stored.get(level, [])
            if old:  # stored ones arrived first
                new_all, groups_all = reduce_groups(join_records([*(rec for _, _, rec, _ in old), new]),
                                                    np.concatenate([*(np.full(len(rec), g) for g, _, rec, _ in old),
                                                                    groups]))
            else:
                new_all, groups_all = new, groups
            listed_before = {(g, b): got for g, b, _, got in old}
            merged_blocks = np.floor_divide(new_all["bucket"], BLOCK)
            cuts = np.flatnonzero(_change(groups_all, merged_blocks))
            touched = _starts(groups, blocks)
            wanted = set(zip(groups[touched].tolist(), blocks[touched].tolist()))
            for start, end in zip(cuts.tolist(), [*cuts[1:].tolist(), len(new_all)]):
                g, block = int(groups_all[start]), int(merged_blocks[start])
                if (g, block) not in wanted:  # a stored block between two new ones (an out-of-order page)
                    continue
                got = None
                if level == 0 and self.ids:
                    before = listed_before.get((g, block))
                    got = np.union1d(NO_IDS if before is None else before, listed.get((g, block), NO_IDS)).tobytes()
                blob = self._encode(new_all[start:end])
                rows.append((*keys[g], level, block, blob, got))
                written += len(blob) + (len(got) if got else 0)
        insert_rows(self.conn, "INSERT OR REPLACE INTO tiers", rows)
        return written

    def _stored(self, keys: list[tuple], levels: list[tuple[np.ndarray, np.ndarray, np.ndarray]]
                ) -> dict[int, list[tuple[int, int, np.ndarray, np.ndarray | None]]]:
        """Per level, (group, block, buckets, entry ids) of the stored blocks each group's new records
        span, in one query (a write of many metrics asked each (metric, level) alone: most of its time)."""
        wants = []
        for level, (_, groups, blocks) in enumerate(levels):
            firsts = np.flatnonzero(np.diff(groups, prepend=-1))
            lasts = np.flatnonzero(np.diff(groups, append=-1))
            wants += [(g, *keys[g], level, b0, b1) for g, b0, b1 in
                      zip(groups[firsts].tolist(), blocks[firsts].tolist(), blocks[lasts].tolist())]
        names = ", ".join(self.keys)
        self.conn.execute(f"CREATE TEMP TABLE IF NOT EXISTS tier_wants (g INTEGER, {names}, level INTEGER, "
                          "b0 INTEGER, b1 INTEGER)")
        insert_rows(self.conn, "INSERT INTO temp.tier_wants", wants)
        on = " AND ".join(f"t.{k}=w.{k}" for k in self.keys)
        found = self.conn.execute(f"SELECT w.g, t.level, t.block, t.buckets, t.ids FROM temp.tier_wants w CROSS JOIN "
                                  f"tiers t ON {on} AND t.level=w.level AND t.block BETWEEN w.b0 AND w.b1 "
                                  "ORDER BY t.level, w.g, t.block").fetchall()
        self.conn.execute("DELETE FROM temp.tier_wants")
        out: dict[int, list] = {}
        for g, level, block, records, ids in found:
            out.setdefault(level, []).append((g, block, self._decode(records),
                                              None if ids is None else np.frombuffer(ids, np.int64)))
        return out

    def repoint(self, scope: tuple, lo: str, hi: str, ids: np.ndarray, steps: np.ndarray) -> None:
        """Entries ``ids`` were joined into the last of them (``pilothouse.store.packing``): the level-0
        blocks over ``steps`` of the keys that begin with ``scope`` and end in [lo, hi) list it instead."""
        span = WIDTHS[0] * BLOCK
        *names, last = self.keys
        where = "".join(f"{k}=? AND " for k in names)
        found = self.conn.execute(f"SELECT {last}, block, ids FROM tiers WHERE {where}{last}>=? AND {last}<? "
                                  "AND level=0 AND block BETWEEN ? AND ?",
                                  [*scope, lo, hi, int(steps.min()) // span, int(steps.max()) // span]).fetchall()
        for name, block, listed in found:
            got = np.frombuffer(listed, np.int64)
            gone = np.isin(got, ids)
            if gone.any():
                self.conn.execute(f"UPDATE tiers SET ids=? WHERE {where}{last}=? AND level=0 AND block=?",
                                  [np.unique(np.where(gone, ids[-1], got)).tobytes(), *scope, name, block])

    def rows(self, key: tuple, level: int, b0: int, b1: int) -> list[tuple[int, np.ndarray, np.ndarray | None]]:
        """(block, buckets, entry ids or None) of the stored blocks b0..b1 of ``level``."""
        rows = self.conn.execute(f"SELECT block, buckets, ids FROM tiers WHERE {self._key} AND level=? "
                                 "AND block BETWEEN ? AND ? ORDER BY block", [*key, level, b0, b1]).fetchall()
        return [(b, self._decode(r), None if i is None else np.frombuffer(i, np.int64)) for b, r, i in rows]

    def block_span(self, level: int, x0: float, x1: float) -> tuple[int, int]:
        """The blocks of ``level`` holding steps x0..x1."""
        span = WIDTHS[level] * BLOCK
        return int(np.floor(x0 / span)), int(np.floor(x1 / span))

    def stored_blocks(self, key: tuple, level: int, x0: float, x1: float) -> int:
        """How many block rows a read of x0..x1 at ``level`` would read (an index count, no blobs)."""
        level = min(level, TOP)
        b0, b1 = self.block_span(level, x0, x1)
        return self.conn.execute(f"SELECT COUNT(*) FROM tiers WHERE {self._key} AND level=? AND block BETWEEN ? AND ?",
                                 [*key, level, b0, b1]).fetchone()[0]

    def buckets(self, key: tuple, level: int, x0: float, x1: float) -> np.ndarray:
        """The filled buckets of ``level`` overlapping steps x0..x1, in step order (above the stored
        levels: the top stored level's buckets inside them, folded)."""
        width = WIDTHS[level]
        k0, k1 = int(np.floor(x0 / width)), int(np.floor(x1 / width))
        ratio = width // WIDTHS[min(level, TOP)]  # a bucket of this level in top-level buckets (1 if stored)
        rows = self.rows(key, min(level, TOP), k0 * ratio // BLOCK, ((k1 + 1) * ratio - 1) // BLOCK)
        rec = join_records([r for _, r, _ in rows])
        if level > TOP:
            rec, _ = regroup(rec, width)
        return rec[(rec["bucket"] >= k0) & (rec["bucket"] <= k1)]

    def summary(self, key: tuple) -> np.ndarray:
        """One record of the whole metric (count, x and y extent, non-finite count); empty if none."""
        return whole(self.buckets(key, TOP, -2.0 ** 63, 2.0 ** 63))


_INTS = [i for i, name in enumerate(RECORD.names) if RECORD[name].kind == "i"]  # delta-coded columns


def encode(rec: np.ndarray) -> bytes:
    """A block's records as one zstd frame of byte planes, field by field (integers as deltas)."""
    words = np.ascontiguousarray(rec).view(np.int64).reshape(len(rec), len(RECORD.names)).copy()
    words[1:, _INTS] -= words[:-1, _INTS].copy()  # int64: wraps, so any value survives
    return _compress(words.view(np.uint8).reshape(len(rec), len(RECORD.names), 8).transpose(1, 2, 0).tobytes())


def decode(blob: bytes) -> np.ndarray:
    raw = np.frombuffer(_decompress(blob), np.uint8)
    n = len(raw) // RECORD.itemsize
    words = raw.reshape(len(RECORD.names), 8, n).transpose(2, 0, 1).copy().view(np.int64)[:, :, 0]
    words[:, _INTS] = np.cumsum(words[:, _INTS], axis=0)
    return words.reshape(-1).view(RECORD)


class Decoded:
    """``decode`` remembering the blocks it decoded lately, by their stored bytes: a view asked again
    (every chart's extent, a pan back, the same range from another app) decodes no block twice, and
    decoding is about half of what a wide query costs the agent.  A block rewritten is other bytes, so
    nothing read is ever stale; past DECODED_BYTES the least recently read go.  The arrays are
    read-only: they are shared by every read of the block."""

    def __init__(self) -> None:
        self._held: OrderedDict[bytes, np.ndarray] = OrderedDict()
        self._bytes = 0

    def __call__(self, blob: bytes) -> np.ndarray:
        got = self._held.get(blob)
        if got is not None:
            self._held.move_to_end(blob)
            return got
        got = decode(blob)
        got.flags.writeable = False
        self._held[blob] = got
        self._bytes += len(blob) + got.nbytes
        while self._bytes > DECODED_BYTES:
            old, arr = self._held.popitem(last=False)
            self._bytes -= len(old) + arr.nbytes
        return got


def join_records(parts: list[np.ndarray]) -> np.ndarray:
    """Blocks of records as one array, joined as plain int64 words (numpy's concatenation of
    structured arrays checks their fields block by block: most of a wide read's time)."""
    return np.concatenate([p.view(np.int64) for p in parts]).view(RECORD) if parts else np.empty(0, RECORD)


def _raw(blob: bytes) -> np.ndarray:
    return np.frombuffer(blob, RECORD)


def _change(*columns: np.ndarray) -> np.ndarray:
    """Where any of these sorted columns changes value (the first row included)."""
    change = np.zeros(len(columns[0]), bool)
    change[:1] = True
    for column in columns:
        change[1:] |= column[1:] != column[:-1]
    return change


def _starts(*columns: np.ndarray) -> np.ndarray:
    return np.flatnonzero(_change(*columns))


def _ids_by_block(group: np.ndarray, blocks: np.ndarray, ids: np.ndarray) -> dict[tuple[int, int], np.ndarray]:
    """The sorted distinct entry ids with points in each (metric, level-0 block)."""
    at = _starts(group, blocks, ids)  # runs of one entry's points in one block
    triples = np.unique(np.stack([group[at], blocks[at], ids[at]], axis=1), axis=0)
    cuts = _starts(triples[:, 0], triples[:, 1])
    return {(int(t[0, 0]), int(t[0, 1])): t[:, 2].copy() for t in np.split(triples, cuts[1:])}
