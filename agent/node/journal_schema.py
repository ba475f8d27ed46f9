"""The journal's schema, as the numbered steps that make it (``pilothouse.store.migrations``).

Steps 1-9 are the journal as it stood when the numbers began (``user_version`` 0): its tables, then
each change made to them before, replayed only where a file lacks it.  A later change is a step
appended at the end; none above is edited, since files already numbered past it never run it again.
"""

from __future__ import annotations

import struct

from pilothouse.store.db import sqlite_utils
from pilothouse.store.migrations import Step, migrate
from pilothouse.store.rollout_search import RolloutSearch
from pilothouse.store.tier_table import TierTable
from pilothouse.wire.entries import KIND_METRIC, unpack_blob

_F64 = struct.Struct("<d")

# A run's disk use: the bytes of its entries' blobs plus what a row and its index entry take besides
# (about 70 bytes for a one-point chunk, measured), kept in ``runs.bytes`` as entries are committed.
ENTRY_OVERHEAD = 64
ENTRY_BYTES = (f"{ENTRY_OVERHEAD} + COALESCE(length(steps), 0) + COALESCE(length(vals), 0) "
               "+ COALESCE(length(times), 0) + COALESCE(length(body), 0)")
# counts a run from its rows: for journals from before the counters, and runs written around
# ``commit`` (an import), whose counters are NULL until then
COUNT_RUNS = (f"UPDATE runs SET (points, bytes) = (SELECT COALESCE(SUM(n) FILTER (WHERE kind='{KIND_METRIC}'), 0), "
              f"COALESCE(SUM({ENTRY_BYTES}), 0) FROM journal WHERE run=runs.id) WHERE bytes IS NULL")
TIER_KEYS = ("run", "metric")


def rollout_search(db: sqlite_utils.Database) -> RolloutSearch:
    """The journal's rollout batches (kind 'r' rows of ``journal``, keyed by id) by run."""
    return RolloutSearch(db, "journal", "id", ("run",))


def tier_table(db: sqlite_utils.Database) -> TierTable:
    """Every metric's tiers, blocks compressed, without entry ids (the journal reads points by metric)."""
    return TierTable(db.conn, TIER_KEYS, ids=False, compress=True)


def _tables(db: sqlite_utils.Database) -> None:
    """The tables of version 0; a journal from before some of them gains them here."""
    db["runs"].create({
        "id": str, "project": str, "name": str, "kind": str, "host": str, "pid": int,
        "pid_started": float, "config": bytes, "created": float, "status": str, "last_seen": float,
        "ended": float, "last_step": int, "dropped_records": int,
        "dropped_points": int, "lost_records": int, "schema": bytes, "points": int, "bytes": int,
        "removing": float, "attempts": int, "nodes": bytes,
    }, pk="id", not_null={"attempts"}, defaults={"attempts": 1}, if_not_exists=True)  # an imported run: 1
    # a run's metrics and their last values: a row each, so a turn writes only what changed
    db["last_values"].create({"run": str, "metric": str, "value": bytes}, pk=("run", "metric"), if_not_exists=True)
    db["meta"].create({"key": str, "value": str}, pk="key", if_not_exists=True)
    db["run_owners"].create({"run": str, "proof": str}, pk="run", if_not_exists=True)  # see node.run_owners
    # a project's chosen headline metric: kept here so every client of this agent shows the same
    db["key_metrics"].create({"project": str, "metric": str, "updated": float}, pk="project", if_not_exists=True)
    db["commands"].create({
        "cid": str, "run": str, "cmd": str, "args": bytes, "who": bytes, "sent": float, "state": str,
        "step": int, "detail": str, "applied": bytes, "updated": float,
    }, pk="cid", if_not_exists=True)
    db["commands"].create_index(["run", "state"], if_not_exists=True)
    db["streams"].create({"run": str, "rank": int, "session": str, "max_seq": int},
                         pk=("run", "rank", "session"), not_null={"session"}, if_not_exists=True)
    db["journal"].create({
        "id": int, "run": str, "kind": str, "metric": str, "rank": int, "n": int,
        "steps": bytes, "vals": bytes, "times": bytes, "body": bytes, "first_id": int,
    }, pk="id", if_not_exists=True)
    db["journal"].create_index(["run", "kind", "metric", "id"], if_not_exists=True)


def _attempts(db: sqlite_utils.Database) -> None:
    """A journal from before attempts: each run counts as one."""
    if "attempts" not in db["runs"].columns_dict:
        db["runs"].add_column("attempts", int, not_null_default=1)


def _nodes(db: sqlite_utils.Database) -> None:
    """A journal from before multi-node jobs."""
    if "nodes" not in db["runs"].columns_dict:
        db["runs"].add_column("nodes", bytes)


def _last_values(db: sqlite_utils.Database) -> None:
    """A journal from before ``last_values``: one blob of last values per run, split into rows."""
    if "summary" in db["runs"].columns_dict:
        db["last_values"].insert_all(
            ({"run": run, "metric": metric, "value": _F64.pack(value)}
             for run, blob in db.execute("SELECT id, summary FROM runs").fetchall()
             for metric, value in (unpack_blob(blob) or {}).items()), replace=True)
        db["runs"].transform(drop={"summary"})


def _sessions(db: sqlite_utils.Database) -> None:
    """A journal from before sessions: a stream was (run, rank)."""
    if "session" not in db["streams"].columns_dict:
        db["streams"].add_column("session", str, not_null_default="")
        db["streams"].transform(pk=("run", "rank", "session"))


def _packing(db: sqlite_utils.Database) -> None:
    """A journal from before packing (``pilothouse.store.packing``): where a packed entry begins."""
    if "first_id" not in db["journal"].columns_dict:
        db["journal"].add_column("first_id", int)
    db.execute("CREATE INDEX IF NOT EXISTS journal_packed ON journal (first_id) WHERE first_id IS NOT NULL")


def _retention(db: sqlite_utils.Database) -> None:
    """A journal from before retention: its runs' points and bytes counted once, here."""
    if "removing" not in db["runs"].columns_dict:
        for column, kind in (("points", int), ("bytes", int), ("removing", float)):
            db["runs"].add_column(column, kind)
        db.execute(COUNT_RUNS)


def _tiers(db: sqlite_utils.Database) -> None:
    """The tiers (``node.journal_tiers``); a journal from before them, or of an older record, has
    every run built from its first entry."""
    fresh = tier_table(db).create()
    db.execute("CREATE TABLE IF NOT EXISTS tier_marks (run TEXT PRIMARY KEY, folded_to INTEGER NOT NULL, "
               "cursors BLOB)")
    if fresh:
        db.execute("INSERT OR IGNORE INTO tier_marks SELECT id, 0, NULL FROM runs")


def _rollout_search(db: sqlite_utils.Database) -> None:
    """The rollout search index; a journal from before it has its batches queued."""
    rollout_search(db).create()


STEPS: list[Step] = [_tables, _attempts, _nodes, _last_values, _sessions, _packing, _retention, _tiers,
                     _rollout_search]


def open_journal(db: sqlite_utils.Database) -> None:
    """Bring the journal to the newest schema (SchemaTooNew, untouched, for a newer one)."""
    migrate(db, STEPS, "this journal")
