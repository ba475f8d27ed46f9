"""Deleting a removed run's rows in bounded batches, for the node's journal and the app's store.

Why in batches: a run of millions of points is millions of rows, and SQLite takes one writer at a
time; deleting them at once would hold the agent's loop, or the app's links, for as long.  Each
owner hides the run first (the journal's ``runs.removing``, the app's ``removed_runs``), then calls
``delete_some`` once per short transaction of its own until it deletes nothing.  A rollout batch
leaves the search index before its row goes: SQLite forgets a contentless index's row only given the
very text indexed, which is read from the row (``RolloutSearch.unindex``).
"""

from __future__ import annotations

import sqlite3
from collections.abc import Sequence

from pilothouse.store.db import sqlite_utils
from pilothouse.store.rollout_search import RolloutSearch
from pilothouse.wire.entries import KIND_ROLLOUTS


def delete_some(db: sqlite_utils.Database | sqlite3.Connection, table: str, scope: dict[str, object], rows: int, *,
                weight: str = "0", size: int | None = None, search: RolloutSearch | None = None) -> int:
    """Delete up to ``rows`` rows of ``table`` whose columns hold ``scope`` (and about ``size`` bytes
    at most, each row weighing the SQL expression ``weight``), in the caller's transaction, their
    rollout batches unindexed from ``search`` first; returns how many were deleted."""
    where = " AND ".join(f"{column}=?" for column in scope)
    kind = "kind" if search is not None else "NULL"
    doomed: list[tuple[int, str | None]] = []
    total = 0
    for rowid, row_kind, row_bytes in db.execute(f"SELECT rowid, {kind}, {weight} FROM {table} WHERE {where} LIMIT ?",
                                                 [*scope.values(), rows]).fetchall():
        doomed.append((rowid, row_kind))
        total += row_bytes
        if size is not None and total >= size:
            break
    if search is not None:
        search.unindex([k for k, row_kind in doomed if row_kind == KIND_ROLLOUTS])
    return _delete(db, table, [k for k, _ in doomed])


def _delete(db: sqlite_utils.Database | sqlite3.Connection, table: str, rowids: Sequence[int]) -> int:
    if not rowids:
        return 0
    return db.execute(f"DELETE FROM {table} WHERE rowid IN ({', '.join('?' * len(rowids))})", list(rowids)).rowcount
