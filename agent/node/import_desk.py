"""Runs brought back from archives (``pilothouse import``), atomic from everyone's view.

An import is ``import_begin`` (the run's metadata; a token back), batches of entries, then
``import_end``.  The batches wait in tables of their own, keyed by the token, so no reader sees
the run until its last batch is in: ``import_end`` then copies them into the journal with new
ids, creates the run and its last values, and records an ``imported`` event, all in the turn's
transaction.  Every piece of state is in SQLite, so a message that fails, or a turn that cannot
commit (a full disk), undoes exactly what it wrote.  A new import of a run supersedes a partial
one of it (its token stops working); one abandoned for STALE_AFTER is dropped by the next begin.
"""

from __future__ import annotations

import time
import uuid
from typing import Any

from pilothouse.node.journal import Store
from pilothouse.wire.checks import check_int, query_arg
from pilothouse.wire.entries import KIND_METRIC, unpack_blob
from pilothouse.wire.messages import pack
from pilothouse.wire.records import MAX_METRICS_PER_RUN
from pilothouse.wire.run_import import (
    IMPORT_BATCH_ENTRIES,
    check_import_entry,
    check_run_meta,
    imported_status,
)

STALE_AFTER = 3600.0  # seconds a partial import may sit untouched before the next begin drops it
_STAGED = ("kind", "metric", "rank", "n", "steps", "vals", "times", "body")


class ImportDesk:
    def __init__(self, store: Store):
        self.store = store
        self.landed = False  # a run came in this turn: readers must page it from the store (see take_landed)
        db = store.db
        db["import_runs"].create({"token": str, "run": str, "meta": bytes, "entries": int, "batches": int,
                                  "touched": float}, pk="token", if_not_exists=True)
        db["import_entries"].create({"token": str, "seq": int, "kind": str, "metric": str, "rank": int, "n": int,
                                     "steps": bytes, "vals": bytes, "times": bytes, "body": bytes},
                                    pk=("token", "seq"), if_not_exists=True)
        db["import_metrics"].create({"token": str, "metric": str, "value": bytes}, pk=("token", "metric"),
                                    if_not_exists=True)  # each metric's last value, for the run's summary

    def take_landed(self) -> bool:
        """Whether an import landed since the last call.  Its entries are not in the turn's fresh
        list (they could be a whole run), so the caller feeds readers from the store instead."""
        landed, self.landed = self.landed, False
        return landed

    def op_begin(self, args: dict) -> dict:
        meta = check_run_meta(args.get("run"))
        self._refuse_existing(meta)
        now = time.time()
        db = self.store.db.conn
        for (token,) in db.execute("SELECT token FROM import_runs WHERE run=? OR touched<?",
                                   [meta["id"], now - STALE_AFTER]).fetchall():
            self._drop(token)
        token = uuid.uuid4().hex
        db.execute("INSERT INTO import_runs VALUES (?,?,?,?,?,?)", [token, meta["id"], pack(meta), 0, 0, now])
        return {"token": token}

    def op_batch(self, args: dict) -> dict:
        token, _, entries, batches = self._import(args)
        index = check_int(args.get("batch"), "batch")
        if index < batches:
            return {"batches": batches}  # a batch sent again after a lost answer: stored once
        if index > batches:
            raise ValueError(f"batch {index} arrived before batch {batches}")
        sent = args.get("entries")
        if not isinstance(sent, list) or not 0 < len(sent) <= IMPORT_BATCH_ENTRIES:
            raise TypeError(f"entries must be a list of 1 to {IMPORT_BATCH_ENTRIES} entries")
        rows = [check_import_entry(e) for e in sent]  # all checked before anything is written
        db = self.store.db.conn
        db.executemany(f"INSERT INTO import_entries VALUES (?, ?, {', '.join('?' * len(_STAGED))})",
                       [(token, entries + i, *row) for i, row in enumerate(rows, 1)])
        last = {row[1]: row[5][-8:] for row in rows if row[0] == KIND_METRIC}
        db.executemany("INSERT OR REPLACE INTO import_metrics VALUES (?,?,?)", [(token, m, v) for m, v in last.items()])
        metrics = db.execute("SELECT COUNT(*) FROM import_metrics WHERE token=?", [token]).fetchone()[0]
        if metrics > MAX_METRICS_PER_RUN:
            raise ValueError(f"the run has more than {MAX_METRICS_PER_RUN} metrics, the most a run may have")
        db.execute("UPDATE import_runs SET entries=?, batches=?, touched=? WHERE token=?",
                   [entries + len(rows), index + 1, time.time(), token])
        return {"batches": index + 1}

    def op_end(self, args: dict) -> dict:
        """The run becomes visible, whole, in this turn's transaction."""
        token, meta, entries, batches = self._import(args)
        if (args.get("batches"), args.get("entries")) != (batches, entries):
            raise ValueError(f"the agent holds {batches} batches and {entries} entries of this import, not "
                             f"{args.get('batches')} and {args.get('entries')}: import it again")
        self._refuse_existing(meta)
        store, run = self.store, meta["id"]
        db = store.db.conn
        base = store.head
        db.execute(f"INSERT INTO journal (id, run, {', '.join(_STAGED)}) SELECT ? + seq, ?, {', '.join(_STAGED)} "
                   "FROM import_entries WHERE token=? ORDER BY seq", [base, run, token])
        store.head = base + entries  # the entries took ids base+1 .. base+entries
        status = imported_status(meta["status"])
        ended = meta["ended"] if status == meta["status"] else None
        row = {**{k: meta[k] for k in ("id", "project", "name", "kind", "host", "created", "last_step",
                                       "dropped_records", "dropped_points", "lost_records")},
               "status": status, "ended": ended, "last_seen": ended or meta["created"],
               "config": pack(meta["config"]), "schema": pack(meta["schema"])}
        db.execute(f"INSERT INTO runs ({', '.join(row)}) VALUES ({', '.join('?' * len(row))})", list(row.values()))
        db.execute("INSERT INTO last_values SELECT ?, metric, value FROM import_metrics WHERE token=?", [run, token])
        points = db.execute("SELECT COALESCE(SUM(n), 0) FROM import_entries WHERE token=? AND kind=?",
                            [token, KIND_METRIC]).fetchone()[0]
        why = {"archived_status": meta["status"]} if status != meta["status"] else {}
        store.event(run, "imported", {"who": args.get("who"), "entries": entries, "points": points,
                                      "source": _source(args.get("source")), **why})
        self._drop(token)
        store.tiers.rebuild(run)  # its tiers are built from its entries, a step at a time between turns
        store.index_due = True  # its rollout batches wait in the search index's queue
        self.landed = True
        return {"run": run, "entries": entries, "points": points, "status": status}

    def op_abort(self, args: dict) -> dict:
        token = query_arg(args, "token", str)
        self._drop(token)
        return {"aborted": token}

    def _import(self, args: dict) -> tuple[str, dict, int, int]:
        """(token, metadata, entries so far, batches so far) of the import ``args`` names."""
        token = query_arg(args, "token", str)
        row = self.store.db.conn.execute("SELECT meta, entries, batches FROM import_runs WHERE token=?",
                                         [token]).fetchone()
        if row is None:
            raise LookupError("no import in progress under this token: another import of the run replaced it, "
                              "or it was abandoned; import it again")
        return token, unpack_blob(row[0]), row[1], row[2]

    def _refuse_existing(self, meta: dict) -> None:
        if self.store.has_run(meta["id"]):
            raise ValueError(f"this agent already has a run with id {meta['id']} ({meta['project']}/{meta['name']}); "
                             "importing it again would duplicate it: remove that run first")

    def _drop(self, token: str) -> None:
        for table in ("import_entries", "import_metrics", "import_runs"):
            self.store.db.conn.execute(f"DELETE FROM {table} WHERE token=?", [token])


def _source(value: Any) -> str | None:
    """The archive's file name, as the importer says (shown in the event, never trusted)."""
    return value[:500] if isinstance(value, str) else None
