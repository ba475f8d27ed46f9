"""Rollout steps and text search over SQLite, for the agent's journal and the app's store alike.

Rollout bodies are zstd frames, so SQLite cannot read them: this keeps, beside the table that holds
them (the ``source``: the journal, or the app's entries), one small row per batch in
``rollout_batches`` (its step, rows and reward sum: a run's steps and mean rewards without reading a
body) and the prompts and completions in ``rollout_text``, a contentless FTS5 index (the text is
stored once, compressed; the index holds only terms).  An FTS rowid is ``batch key << ROW_BITS |
row``: a hit names its batch and row, and newest first is ``ORDER BY rowid DESC``.

Indexing costs about 100 µs per rollout of 2 KB (7x compressing it), so it never runs inside the
transaction that stores a batch: a trigger queues each new batch in ``rollout_queue`` and
``index_some`` indexes queued batches in bounded slices, between the agent's turns or after an app
link's page.  SQLite 3.40's contentless tables forget a row only through FTS5's 'delete' command
with the very text indexed, so ``unindex`` decodes a batch once more before its row is deleted:
retention calls it on each batch it removes, in its own bounded batches.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from pilothouse.store.db import sqlite_utils
from pilothouse.wire import chat
from pilothouse.wire.messages import ProtocolError
from pilothouse.wire.records import MAX_ROLLOUT_ROWS
from pilothouse.wire.rollouts import MAX_SEARCH_HITS, fts_query, unpack_batch

ROW_BITS = 14
assert MAX_ROLLOUT_ROWS < 1 << ROW_BITS
Hit = tuple[int, int, int, dict]  # (step, row in its batch, batch key, the row)


def texts(row: dict) -> tuple[str, str]:
    """What is indexed of a row, the same at insert and at delete: its prompt's text, and its
    completion's with a whole trajectory's (``messages``): of a chat, every message's text, the tools
    called with their arguments and the tool results (``chat.field_text``)."""
    completion = chat.field_text(row.get("completion"))
    trajectory = chat.field_text(row.get("messages"))
    return chat.field_text(row.get("prompt")), f"{completion}\n{trajectory}" if trajectory else completion


def _reward(row: dict) -> float | None:
    value = row.get("reward")
    if isinstance(value, bool) or not isinstance(value, (int, float)) or math.isnan(value):
        return None
    return float(value)


class RolloutSearch:
    """``source``'s rollout batches (rows of kind 'r', keyed by ``key``, belonging to ``scope``: the
    columns that name a run there) by step and by text."""

    def __init__(self, db: sqlite_utils.Database, source: str, key: str, scope: Sequence[str]):
        self.db, self.source, self.key, self.scope = db, source, key, tuple(scope)
        self._where = " AND ".join(f"{c}=?" for c in self.scope)

    def create(self) -> None:
        """The tables and the trigger, in the caller's transaction; batches stored before them are queued."""
        db = self.db
        new = not db["rollout_queue"].exists()
        db.execute("CREATE TABLE IF NOT EXISTS rollout_queue (key INTEGER PRIMARY KEY)")
        db.execute(f"CREATE TABLE IF NOT EXISTS rollout_batches (key INTEGER PRIMARY KEY, "
                   f"{', '.join(f'{c} TEXT' for c in self.scope)}, step INTEGER, n INTEGER, reward_sum REAL, "
                   "rewards INTEGER)")
        scope = ", ".join(self.scope)
        db.execute(f"CREATE INDEX IF NOT EXISTS rollout_batches_step ON rollout_batches ({scope}, step)")
        db.execute(f"CREATE INDEX IF NOT EXISTS rollout_batches_key ON rollout_batches ({scope}, key)")
        db.execute("CREATE VIRTUAL TABLE IF NOT EXISTS rollout_text USING fts5(prompt, completion, content='', "
                   "columnsize=0)")
        db.execute(f"CREATE TRIGGER IF NOT EXISTS rollout_queued AFTER INSERT ON {self.source} "
                   f"WHEN NEW.kind='r' BEGIN INSERT OR IGNORE INTO rollout_queue VALUES (NEW.{self.key}); END")
        if new:
            db.execute(f"INSERT INTO rollout_queue SELECT {self.key} FROM {self.source} WHERE kind='r'")

    def pending(self) -> bool:
        return self.db.execute("SELECT 1 FROM rollout_queue LIMIT 1").fetchone() is not None

    def index_some(self, text_bytes: int) -> bool:
        """Index queued batches, oldest first, until about ``text_bytes`` of text (one batch at least),
        in the caller's transaction; whether any are left.  A body that does not decode is dropped from
        the queue (it cannot be searched, and is not retried forever)."""
        done = 0
        keys = [k for (k,) in self.db.execute("SELECT key FROM rollout_queue ORDER BY key LIMIT 256")]
        for key in keys:
            self.db.execute("DELETE FROM rollout_queue WHERE key=?", [key])
            found = self.db.execute(f"SELECT {', '.join(self.scope)}, body FROM {self.source} WHERE {self.key}=?",
                                    [key]).fetchone()
            try:
                batch = unpack_batch(found[-1]) if found is not None else None
            except ProtocolError:
                batch = None
            if batch is None:
                continue
            rows = batch["rows"]
            rewards = [r for r in map(_reward, rows) if r is not None]
            self.db.execute(f"INSERT OR REPLACE INTO rollout_batches VALUES (?, {', '.join('?' * len(self.scope))}, "
                            "?, ?, ?, ?)", [key, *found[:-1], batch["step"], len(rows), sum(rewards), len(rewards)])
            pairs = [(key << ROW_BITS | i, *texts(row)) for i, row in enumerate(rows)]
            self.db.conn.executemany("INSERT INTO rollout_text (rowid, prompt, completion) VALUES (?, ?, ?)", pairs)
            done += sum(len(p) + len(c) for _, p, c in pairs)
            if done >= text_bytes:
                break
        return self.pending() if keys else False

    def unindex(self, keys: Sequence[int]) -> None:
        """Forget these batches (before the caller deletes their rows from the source)."""
        for key in keys:
            if self.db.execute("DELETE FROM rollout_queue WHERE key=?", [key]).rowcount:
                continue  # queued, never indexed
            if not self.db.execute("DELETE FROM rollout_batches WHERE key=?", [key]).rowcount:
                continue  # never indexed: its body did not decode
            (body,), = self.db.execute(f"SELECT body FROM {self.source} WHERE {self.key}=?", [key])
            self.db.conn.executemany(
                "INSERT INTO rollout_text (rollout_text, rowid, prompt, completion) VALUES ('delete', ?, ?, ?)",
                [(key << ROW_BITS | i, *texts(row)) for i, row in enumerate(unpack_batch(body)["rows"])])

    def step_of(self, key: int) -> int | None:
        row = self.db.execute("SELECT step FROM rollout_batches WHERE key=?", [key]).fetchone()
        return None if row is None else row[0]

    def steps(self, scope: Sequence[Any]) -> list[tuple[int, int, float | None]]:
        """(step, rows, mean reward or None) of every step the run has rollouts for, oldest first: one
        small row per batch read, no text."""
        return [tuple(r) for r in self.db.execute(
            f"SELECT step, SUM(n), SUM(reward_sum) / NULLIF(SUM(rewards), 0) FROM rollout_batches "
            f"WHERE {self._where} GROUP BY step ORDER BY step", list(scope))]

    def rows(self, scope: Sequence[Any], step: int) -> list[dict]:
        """The rows of one step, its batches joined in arrival order: only that step's bodies are read."""
        bodies = self.db.execute(
            f"SELECT body FROM {self.source} WHERE {self.key} IN (SELECT key FROM rollout_batches "
            f"WHERE {self._where} AND step=?) ORDER BY {self.key}", [*scope, step])
        return [row for (body,) in bodies for row in unpack_batch(body)["rows"]]

    def search(self, scope: Sequence[Any], words: str, before: int | None = None,
               limit: int = 100, in_prompt: bool = False) -> tuple[list[Hit], int | None]:
        """Rows of the run whose prompt or completion (``in_prompt``: prompt) holds ``words`` (see
        ``fts_query``), newest first, ``limit`` at most, below cursor ``before``; and the cursor of the
        next page (None: no more).  Only the hit batches' bodies are read.  ValueError for words that
        cannot be searched."""
        query = f"prompt : ({fts_query(words)})" if in_prompt else fts_query(words)
        if not 1 <= limit <= MAX_SEARCH_HITS:
            raise ValueError(f"limit must be from 1 to {MAX_SEARCH_HITS}, got {limit}")
        # two subqueries, each one seek on the (scope, key) index: MIN and MAX in one SELECT read every batch
        # row of the run (17 ms at 10 M rollouts, 0.01 ms so)
        low, high = self.db.execute(f"SELECT (SELECT MIN(key) FROM rollout_batches WHERE {self._where}), "
                                    f"(SELECT MAX(key) FROM rollout_batches WHERE {self._where})",
                                    [*scope, *scope]).fetchone()
        if low is None:
            return [], None
        ceiling = min(before if before is not None else 1 << 62, (high + 1) << ROW_BITS)
        # the index drives (CROSS JOIN), newest first, and stops at ``limit``: a common word costs no more
        # than a rare one; the run's key range keeps another run's hits from being walked
        found = self.db.execute(
            f"SELECT t.rowid, b.step FROM rollout_text t CROSS JOIN rollout_batches b ON b.key = t.rowid >> {ROW_BITS} "
            f"WHERE rollout_text MATCH ? AND t.rowid < ? AND t.rowid >= ? AND "
            f"{' AND '.join(f'b.{c}=?' for c in self.scope)} ORDER BY t.rowid DESC LIMIT ?",
            [query, ceiling, low << ROW_BITS, *scope, limit + 1]).fetchall()
        more = found[limit - 1][0] if len(found) > limit else None
        bodies: dict[int, list[dict]] = {}
        hits = []
        for rowid, step in found[:limit]:
            key = rowid >> ROW_BITS
            if key not in bodies:
                (body,), = self.db.execute(f"SELECT body FROM {self.source} WHERE {self.key}=?", [key])
                bodies[key] = unpack_batch(body)["rows"]
            hits.append((step, rowid & ((1 << ROW_BITS) - 1), key, bodies[key][rowid & ((1 << ROW_BITS) - 1)]))
        return hits, more
