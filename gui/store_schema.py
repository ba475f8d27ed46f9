"""The app store's schema, as the numbered steps that make it (``pilothouse.store.migrations``).

Steps 1-4 are the store as it stood when the numbers began (``user_version`` 0): its tables, then
each change made to them before, replayed only where a file lacks it.  A later change is a step
appended at the end; none above is edited, since files already numbered past it never run it again.
"""

from __future__ import annotations

from pilothouse.gui.tiers import Tiers
from pilothouse.store.db import sqlite_utils
from pilothouse.store.migrations import Step, migrate
from pilothouse.store.rollout_search import RolloutSearch

# An entry's share of the file: its blobs and names plus about what SQLite spends per row in
# the table and its two indexes.
ENTRY_BYTES = ("COALESCE(length(NEW.steps), 0) + COALESCE(length(NEW.vals), 0) + COALESCE(length(NEW.times), 0)"
               " + COALESCE(length(NEW.body), 0) + 2 * (length(CAST(NEW.run AS BLOB))"
               " + COALESCE(length(CAST(NEW.metric AS BLOB)), 0) + length(CAST(NEW.agent AS BLOB))) + 48")
_TRIGGERS = (
    f"""CREATE TRIGGER IF NOT EXISTS entry_bytes AFTER INSERT ON entries BEGIN
        INSERT INTO run_bytes VALUES (NEW.agent, NEW.run, {ENTRY_BYTES})
        ON CONFLICT(agent, run) DO UPDATE SET bytes = bytes + excluded.bytes; END""",
    """CREATE TRIGGER IF NOT EXISTS part_bytes AFTER UPDATE OF n ON entries BEGIN
        UPDATE run_bytes SET bytes = bytes + 24 * (NEW.n - OLD.n) WHERE agent=NEW.agent AND run=NEW.run; END""",
    """CREATE TRIGGER IF NOT EXISTS removed_entries BEFORE INSERT ON entries WHEN EXISTS
        (SELECT 1 FROM removed_runs WHERE agent=NEW.agent AND run=NEW.run) BEGIN SELECT RAISE(IGNORE); END""",
    """CREATE TRIGGER IF NOT EXISTS removed_run_rows BEFORE INSERT ON runs WHEN EXISTS
        (SELECT 1 FROM removed_runs WHERE agent=NEW.agent AND run=NEW.id) BEGIN SELECT RAISE(IGNORE); END""",
)


def rollout_search(db: sqlite_utils.Database) -> RolloutSearch:
    """The store's rollout batches (kind 'r' rows of ``entries``, keyed by rowid) by (agent, run)."""
    return RolloutSearch(db, "entries", "rowid", ("agent", "run"))


def _tables(db: sqlite_utils.Database) -> None:
    """The tables of version 0; a store from before some of them gains them here."""
    db["agents"].create({"url": str, "name": str, "added": float, "cursor": int, "remembered": int, "journal": str},
                        pk="url", defaults={"cursor": 0, "remembered": 1}, not_null={"cursor"}, if_not_exists=True)
    db["runs"].create({"agent": str, "id": str, "project": str, "name": str, "kind": str,
                       "status": str, "host": str, "last_step": int, "created": float,
                       "updated": float, "data": bytes}, pk=("agent", "id"), if_not_exists=True)
    db["entries"].create({"agent": str, "id": int, "run": str, "kind": str, "metric": str, "rank": int,
                          "n": int, "steps": bytes, "vals": bytes, "times": bytes, "body": bytes},
                         pk=("agent", "id"), if_not_exists=True)
    db["entries"].create_index(["agent", "run", "kind", "metric", "id"], if_not_exists=True)
    db["settings"].create({"key": str, "value": bytes}, pk="key", if_not_exists=True)
    db["removed_runs"].create({"agent": str, "run": str, "at": float, "pending": int},
                              pk=("agent", "run"), if_not_exists=True)
    db["jobs"].create({"id": str, "title": str, "added": float, "declined": int}, pk="id",
                      not_null={"declined"}, defaults={"declined": 0}, if_not_exists=True)
    db["job_agents"].create({"job": str, "url": str, "host": str, "agent": str}, pk=("job", "url"),
                            if_not_exists=True)


def _run_sizes(db: sqlite_utils.Database) -> None:
    """Each run's bytes, kept by triggers; a store from before them counts its entries once, here."""
    if not db["run_bytes"].exists():
        db["run_bytes"].create({"agent": str, "run": str, "bytes": int}, pk=("agent", "run"))
        size = ENTRY_BYTES.replace("NEW.", "")
        db.execute(f"INSERT INTO run_bytes SELECT agent, run, SUM({size}) FROM entries GROUP BY agent, run")
    for trigger in _TRIGGERS:
        db.execute(trigger)


def _rollout_search(db: sqlite_utils.Database) -> None:
    """The rollout search index; a store from before it has its batches queued."""
    rollout_search(db).create()


def _tiers(db: sqlite_utils.Database) -> None:
    """The tiers; a store from before them (or of an older record) has them built once, here."""
    tiers = Tiers(db)
    if tiers.table.create():
        tiers.add_all()


def _tier_tails(db: sqlite_utils.Database) -> None:
    """The metric streams whose newest entries wait to be folded into the tiers (``tiers``)."""
    Tiers(db).create()


STEPS: list[Step] = [_tables, _run_sizes, _rollout_search, _tiers, _tier_tails]


def open_store(db: sqlite_utils.Database) -> None:
    """Bring the store to the newest schema (SchemaTooNew, untouched, for a newer one)."""
    migrate(db, STEPS, "this app store")
