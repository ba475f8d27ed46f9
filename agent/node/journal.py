"""The agent's durable journal: SQLite (WAL) through sqlite-utils.

One table, ``journal``, is both the store and the stream: every entry (a metric
chunk, a rollout batch, an event) gets the next integer id, and readers follow by
"everything after id N".  Metric points are stored as numpy blobs per chunk, so NaN,
±Inf, -0.0 and 1e308 come back bit-exact and a metric loads without per-point rows.
Idempotent ingest: ``streams`` holds the highest committed seq per (run, rank, session), and
is updated in the same transaction as the data it covers.  A session is one trainer process: a
run resumed by id from a new process numbers its records from 1 again in a stream of its own.
"""

from __future__ import annotations

import struct
import time
import uuid
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np

from pilothouse.node import run_refs
from pilothouse.node.journal_commands import Commands
from pilothouse.node.journal_keys import KeyMetrics
from pilothouse.node.journal_rollouts import Rollouts
from pilothouse.node.journal_schema import (
    COUNT_RUNS,
    ENTRY_BYTES,
    ENTRY_OVERHEAD,
    open_journal,
    rollout_search,
    tier_table,
)
from pilothouse.node.journal_tiers import JournalTiers
from pilothouse.node.rollout_series import DERIVED_RANK, Points, RolloutSeries
from pilothouse.store.db import open_db
from pilothouse.store.removal import delete_some
from pilothouse.wire import packed_chunks
from pilothouse.wire.entries import (
    ENTRY_FIELDS,
    KIND_EVENT,
    KIND_METRIC,
    KIND_ROLLOUTS,
    Entry,
    join_chunks,
    unpack_blob,
)
from pilothouse.wire.messages import MAX_PAGE_POINTS, pack
from pilothouse.wire.metric_order import by_importance, key_metric
from pilothouse.wire.records import MAX_METRICS_PER_RUN, REC_ROLLOUTS, Column, RecordBatch, check_batch
from pilothouse.wire.rollouts import pack_batch
from pilothouse.wire.watched import WATCHED

_F64 = struct.Struct("<d")
_ABSENT = object()  # an undo entry for a key that was not there
Stream = tuple[str, int, str]  # (run, rank, session): one trainer process's records of one rank

SUMMARY_METRICS = 32  # last values per run in a `runs` reply

# what removing a rollout batch costs besides its bytes, per row: forgetting its text in the search
# index (about 100 µs for 2 KB of text, as indexing it), so a removal batch stays as short: batches
# of 64 rollouts of 2 KB were removed in 6.7 ms median per REMOVE_BYTES batch (measured)
UNINDEX_ROW_BYTES = 3072

RUN_COLUMNS = ("id", "project", "name", "kind", "host", "pid", "pid_started", "created", "status",
               "last_seen", "ended", "last_step", "dropped_records", "dropped_points", "lost_records", "points",
               "bytes", "attempts")

_FIELDS = ", ".join(ENTRY_FIELDS)  # the journal also has first_id: where a packed entry begins
_MARKS = ", ".join("?" * len(ENTRY_FIELDS))
_HIDDEN = "run NOT IN (SELECT id FROM runs WHERE removing IS NOT NULL)"  # rows of runs being removed


class Mark(NamedTuple):
    """Where one message began: what ``undo`` restores and ``wrote_since`` compares."""

    head: int
    pending: int
    dirty_streams: set
    dirty_runs: dict
    undo: int
    changes: int  # the connection's total_changes
    savepoint: bool  # False: the message began the transaction, which undoing it rolls back


class Resume(NamedTuple):
    """A run another process now continues: the attempt it begins and what the previous one left."""

    attempt: int
    status: str  # the previous attempt's status as stored (it may still say running: see the server)
    host: str  # where the previous attempt ran
    pid: int
    pid_started: float | None
    last_step: int | None  # the furthest step the previous attempt reached


@dataclass
class IngestResult:
    """What the agent tells the trainer: ack up to ``seq``, or ask it to resend from ``expect``."""

    seq: int
    expect: int | None = None
    entries: list[Entry] = field(default_factory=list)
    refused: str = ""  # what of the batch was not stored, and why (the rest was)


class Store:
    def __init__(self, path: str | Path):
        self.path = Path(path)
        self.db = open_db(self.path)  # explicit transactions: one per agent loop turn
        open_journal(self.db)
        self.rollout_search = rollout_search(self.db)
        self.commands = Commands(self.db)  # steering commands and their answers
        self.key_metrics = KeyMetrics(self.db)  # each project's chosen headline metric
        self.rollouts = Rollouts(self.db, self.rollout_search, self.has_run)  # by step and by text
        self.tiers = JournalTiers(tier_table(self.db))  # every metric's min/max tiers, kept as entries commit
        self.journal_id = self._journal_id()
        self.head = self._stored_head()
        self.max_seq = self._load_streams()
        self.removing = self._load_removing()
        self.index_due = True  # batches may wait in the search index's queue (see ``index_some``)
        self.summaries: dict[str, dict[str, float]] = {}  # run -> metric -> last value, for runs ingested
        self._dirty_last: dict[tuple[str, str], bool] = {}  # (run, metric) whose last value changed this turn
        self._known_metrics: set[str] = set()
        self._pending: list[Entry] = []
        self._dirty_streams: set[Stream] = set()
        self._dirty_runs: dict[str, int] = {}
        self._undo: list[tuple[dict, Any, Any]] = []  # (mapping, key, old value) since the turn began
        self.rollout_series = RolloutSeries(self.db, self._changed)  # the rollouts/* series, as steps close

    def _stored_head(self) -> int:
        """The last entry id used: a removed run's ids are never given again (readers hold cursors)."""
        return self.db.execute("SELECT MAX(COALESCE((SELECT MAX(id) FROM journal), 0), "
                               "COALESCE((SELECT CAST(value AS INTEGER) FROM meta WHERE key='head'), 0))").fetchone()[0]

    def _load_removing(self) -> dict[str, float]:
        """Runs being removed (run -> when it began), oldest first: hidden from every reader."""
        return dict(self.db.execute("SELECT id, removing FROM runs WHERE removing IS NOT NULL ORDER BY removing"))

    def _journal_id(self) -> str:
        """Names this journal: entry ids restart in a new one, so readers must not reuse cursors."""
        row = self.db.execute("SELECT value FROM meta WHERE key='journal_id'").fetchone()
        if row is not None:
            return row[0]
        journal_id = uuid.uuid4().hex
        self.db.execute("INSERT INTO meta VALUES ('journal_id', ?)", [journal_id])
        return journal_id

    # --- transactions -------------------------------------------------------------------

    def begin(self) -> None:
        self.db.execute("BEGIN")

    def commit(self) -> list[Entry]:
        """Write what this turn gathered; returns the committed entries for live readers."""
        entries, self._pending = self._pending, []
        if entries:
            self.db.conn.executemany(f"INSERT INTO journal ({_FIELDS}) VALUES ({_MARKS})", entries)
        if self._dirty_streams:
            self.db.conn.executemany(
                "INSERT OR REPLACE INTO streams (run, rank, session, max_seq) VALUES (?,?,?,?)",
                [(*key, self.max_seq[key]) for key in self._dirty_streams])
            self._dirty_streams.clear()
        self._update_runs(entries)
        if self._dirty_last:
            self.db.conn.executemany("INSERT OR REPLACE INTO last_values VALUES (?,?,?)",
                                     [(run, m, _F64.pack(self.summaries[run][m])) for run, m in self._dirty_last])
            self._dirty_last.clear()
        self.tiers.committed(entries, self.removing)
        self._undo.clear()
        if len(self._known_metrics) > 100_000:  # a cache of checked names, not a record: keep it bounded
            self._known_metrics.clear()
        self.db.execute("COMMIT")
        self.index_due = self.index_due or any(e.kind == KIND_ROLLOUTS for e in entries)
        return [e for e in entries if e.run not in self.removing] if self.removing else entries

    def _update_runs(self, entries: list[Entry]) -> None:
        """One write per run the turn touched: its step, and its points and bytes grown by what the
        turn wrote, so a run's size is known without a scan."""
        written: dict[str, list[int]] = {}
        for e in entries:
            count = written.setdefault(e.run, [0, 0])
            count[0] += e.n if e.kind == KIND_METRIC else 0
            count[1] += ENTRY_OVERHEAD + sum(len(b) for b in (e.steps, e.vals, e.times, e.body) if b is not None)
        self.db.conn.executemany(
            "UPDATE runs SET last_step=IIF(?1 IS NULL, last_step, MAX(COALESCE(last_step, -1), ?1)), "
            "points=points+?2, bytes=bytes+?3 WHERE id=?4",
            [(self._dirty_runs.get(run), *written.get(run, (0, 0)), run) for run in {**self._dirty_runs, **written}])
        self.db.conn.executemany(f"{COUNT_RUNS} AND id=?", [(run,) for run in written])
        self._dirty_runs.clear()

    def close(self) -> None:
        """Fold what of the tiers waits in memory (a run's next start need not rebuild them), then close."""
        self.begin()
        self.tiers.flush_all()
        self.commit()
        self.db.close()

    def rollback(self) -> None:
        """Forget this turn's writes (memory too), e.g. after an unexpected error."""
        if self.db.conn.in_transaction:
            self.db.execute("ROLLBACK")
        self._pending.clear()
        self._dirty_streams.clear()
        self._dirty_runs.clear()
        self._dirty_last.clear()
        self._undo_to(0)  # the memory of what the turn changed (open rollout steps too)
        self.head = self._stored_head()
        self.max_seq = self._load_streams()
        self.removing = self._load_removing()
        self.summaries.clear()
        self.tiers.reload()

    def _load_streams(self) -> dict[Stream, int]:
        return {(r, k, s): n for r, k, s, n in self.db.execute("SELECT run, rank, session, max_seq FROM streams")}

    def mark(self) -> Mark:
        """A savepoint, in SQLite and in memory: one message's writes can be undone alone.  Outside a
        transaction the message begins one instead (the agent's turn begins it with its first message
        that may write): a SAVEPOINT and its RELEASE per message were a tenth of a turn's cost."""
        savepoint = self.db.conn.in_transaction
        self.db.execute("SAVEPOINT message" if savepoint else "BEGIN")
        return Mark(self.head, len(self._pending), set(self._dirty_streams), dict(self._dirty_runs), len(self._undo),
                    self.db.conn.total_changes, savepoint)

    def wrote_since(self, mark: Mark) -> bool:
        """Whether anything was written, or gathered to write at commit, after ``mark``."""
        return (self.db.conn.total_changes, len(self._pending), len(self._undo)) != \
            (mark.changes, mark.pending, mark.undo)

    def release(self, mark: Mark) -> None:
        if mark.savepoint:
            self.db.execute("RELEASE message")

    def undo(self, mark: Mark) -> None:
        """Back to ``mark``: what one bad message wrote is gone, the rest of the turn stays."""
        if mark.savepoint:
            self.db.execute("ROLLBACK TO message")
            self.db.execute("RELEASE message")
        else:  # the transaction holds this message's writes alone
            self.db.execute("ROLLBACK")
        self.head, self._dirty_streams, self._dirty_runs = mark.head, mark.dirty_streams, mark.dirty_runs
        del self._pending[mark.pending:]
        self._undo_to(mark.undo)

    def _undo_to(self, length: int) -> None:
        while len(self._undo) > length:
            mapping, key, old = self._undo.pop()
            if old is _ABSENT:
                mapping.pop(key, None)
            else:
                mapping[key] = old

    def _changed(self, mapping: dict, key: Any) -> None:
        self._undo.append((mapping, key, mapping.get(key, _ABSENT)))

    def _next_id(self) -> int:
        self.head += 1
        return self.head

    # --- runs ---------------------------------------------------------------------------

    def upsert_run(self, hello: dict, now: float, kind: str = "train") -> Resume | None:
        """Create or refresh a run.  Returns what the previous attempt left if another process now
        continues it (a resumed run: ``attempts`` counts it), else None: a repeated hello from the same
        process changes nothing, nor does a restarted watcher's (a watched run's attempts are its writer's)."""
        run_id = hello["run"]
        row = self.db.execute("SELECT status, pid, pid_started, host, last_step, attempts FROM runs WHERE id=?",
                              [run_id]).fetchone()
        if row is None:
            self.db.execute(
                f"INSERT INTO runs ({', '.join(RUN_COLUMNS)}, config, schema) "
                f"VALUES ({', '.join('?' * (len(RUN_COLUMNS) + 2))})",
                [run_id, hello["project"], hello["name"], kind, hello["host"], hello["pid"],
                 hello.get("pid_started"), hello.get("created", now), "running", now, None, None,
                 0, 0, 0, 0, 0, 1, pack(hello["config"]), pack(hello.get("schema", {}))])
            self.event(run_id, "status", {"status": "running", "host": hello["host"], "pid": hello["pid"]})
        if "nodes" in hello:  # any rank's list: the job's agents, this one among them
            self.db.execute("UPDATE runs SET nodes=? WHERE id=?", [pack(hello["nodes"]), run_id])
        if row is not None and hello.get("rank", 0) == 0:  # the run's process, as far as liveness goes, is rank 0's
            config, _ = self.config_and_schema(run_id)  # the process's own settings win; steered ones stay
            self.db.execute("UPDATE runs SET host=?, pid=?, pid_started=?, last_seen=?, config=?, schema=? "
                            "WHERE id=?", [hello["host"], hello["pid"], hello.get("pid_started"), now,
                             pack({**config, **hello["config"]}), pack(hello.get("schema", {})), run_id])
            if kind != WATCHED and (row[1], row[2]) != (hello["pid"], hello.get("pid_started")):
                steps = [s for s in (row[4], self._dirty_runs.pop(run_id, None)) if s is not None]
                last_step = max(steps) if steps else None
                # the step counts from the resume
                self.db.execute("UPDATE runs SET last_step=NULL, attempts=? WHERE id=?", [row[5] + 1, run_id])
                return Resume(row[5] + 1, row[0], row[3], row[1], row[2], last_step)
        return None

    def resume_refusal(self, hello: dict) -> str | None:
        """Why a hello may not open this run id, or None: a resume continues the same run, so it
        must name the run's project and name (a different one is a typo'd id or a clash).  A hello
        named by its id names none (``init`` without ``name``): it continues under the run's name."""
        row = self.db.execute("SELECT project, name, kind FROM runs WHERE id=?", [hello["run"]]).fetchone()
        if row is not None and (row[2] == WATCHED) != ("watched" in hello):
            return (f"run id {hello['run']!r} is run {row[0]}/{row[1]}, " + (
                "watched from its framework's files: a trainer cannot take it over; use another id" if row[2] == WATCHED
                else "logged by a trainer: a watcher cannot write into it; use another id"))
        if row is None or row[0] == hello["project"] and hello["name"] in (row[1], hello["run"]):
            return None
        return (f"run id {hello['run']!r} is run {row[0]}/{row[1]} on this agent; it cannot be resumed as "
                f"{hello['project']}/{hello['name']}: resume it with its own project and name, or use another id")

    def run_row(self, run_id: str) -> dict | None:
        rows = list(self.db.query("SELECT * FROM runs WHERE id=?", [run_id]))
        return rows[0] if rows else None

    def config_and_schema(self, run_id: str) -> tuple[dict, dict]:
        row = self.db.execute("SELECT config, schema FROM runs WHERE id=?", [run_id]).fetchone()
        return unpack_blob(row[0]) or {}, unpack_blob(row[1]) or {}

    def update_config(self, run_id: str, values: dict) -> None:
        config, _ = self.config_and_schema(run_id)
        self.db.execute("UPDATE runs SET config=? WHERE id=?", [pack({**config, **values}), run_id])

    def has_run(self, run_id: str) -> bool:
        """Whether the run is here for everyone: one being removed is not."""
        return run_id not in self.removing and \
            self.db.execute("SELECT 1 FROM runs WHERE id=?", [run_id]).fetchone() is not None

    def set_status(self, run_id: str, status: str, now: float, **why: Any) -> None:
        ended = now if status in ("finished", "crashed") else None
        self.db.execute("UPDATE runs SET status=?, ended=? WHERE id=?", [status, ended, run_id])
        if ended is not None:  # the points of its last rollout steps, before the event that ends it
            self._series_points(run_id, self.rollout_series.close_run(run_id))
        self.event(run_id, "status", {"status": status, **why})

    def close_idle_series(self, now: float) -> list[Entry]:
        """The rollouts/* points of steps no rollouts came for in a while (``RolloutSeries``)."""
        return [e for run, points in self.rollout_series.close_idle(now).items() for e in self._series_points(run, points)]

    def _series_points(self, run: str, points: list[Points]) -> list[Entry]:
        last = self._run_last(run)
        entries = [Entry(self._next_id(), *row) for p in points
                   if (row := self._metric_row(run, DERIVED_RANK, *p, last)) is not None]
        self._pending.extend(entries)
        return entries

    def touch(self, run_id: str, now: float, dropped_records: int, dropped_points: int) -> None:
        self.db.execute("UPDATE runs SET last_seen=?, dropped_records=MAX(dropped_records, ?), "
                        "dropped_points=MAX(dropped_points, ?) WHERE id=?",
                        [now, dropped_records, dropped_points, run_id])

    def note_step(self, run: str, step: int) -> None:
        """The run's step: the furthest its process logged, synced or acknowledged at (never back,
        except when another process resumes the run)."""
        self._dirty_runs[run] = max(step, self._dirty_runs.get(run, step))

    def runs(self) -> list[dict]:
        """Every run, with ``metrics`` (how many it has), the last values of its SUMMARY_METRICS
        most important ones (the reply stays small however many metrics a run logs) and ``key``, its
        headline metric (see ``key_metric``), decided here once so that no client decides it again."""
        counts = dict(self.db.execute("SELECT run, COUNT(*) FROM last_values GROUP BY run"))
        chosen = self.key_metrics.choices()
        out = []
        for row in self.db.query(f"SELECT {', '.join(RUN_COLUMNS)}, config, schema, nodes FROM runs "
                                  "WHERE removing IS NULL ORDER BY created"):
            row["config"] = unpack_blob(row["config"])
            row["schema"] = unpack_blob(row["schema"]) or {}
            row["nodes"] = unpack_blob(row["nodes"]) or []
            row["metrics"] = counts.get(row["id"], 0)
            row["key"], row["summary"] = self._summary(row["id"], chosen.get(row["project"]))
            out.append(row)
        return out

    def _summary(self, run: str, preferred: str | None = None) -> tuple[str | None, dict[str, float]]:
        """(the key metric, the summary): the key is always in it, even when less important."""
        last = self.summaries.get(run)
        if last is None:
            last = self._last_values(run)
        key = key_metric(last, preferred)
        names = by_importance(last)[:SUMMARY_METRICS]
        if key is not None and key not in names:
            names[-1] = key
        return key, {m: last[m] for m in names}

    # --- removal: hidden at once, deleted in bounded batches --------------------------------

    def hide(self, run: str, now: float) -> None:
        """Begin removing ``run``: from this transaction on no reader sees it and nothing of it is
        stored; ``remove_some`` deletes its rows later, a batch per loop turn."""
        self.db.execute("UPDATE runs SET removing=? WHERE id=?", [now, run])
        self.db.execute("INSERT OR REPLACE INTO meta VALUES ('head', ?)", [str(self.head)])
        self._changed(self.removing, run)
        self.removing[run] = now

    def remove_some(self, rows: int, size: int) -> str | None:
        """Delete up to ``rows`` journal rows, about ``size`` bytes, of the oldest run being removed;
        once none is left, its run, last values, commands and streams.  Returns the run whose removal
        this finished, if it did.  Other runs' rows and every entry id stay as they are."""
        run = next(iter(self.removing))
        if not self.tiers.remove_some(run):
            return None
        weight = f"{ENTRY_BYTES} + IIF(kind='{KIND_ROLLOUTS}', n * {UNINDEX_ROW_BYTES}, 0)"
        if delete_some(self.db, "journal", {"run": run}, rows, weight=weight, size=size, search=self.rollout_search):
            return None
        for table, column in (("last_values", "run"), ("commands", "run"), ("streams", "run"),
                              ("run_owners", "run"), ("runs", "id")):
            self.db.execute(f"DELETE FROM {table} WHERE {column}=?", [run])
        del self.removing[run]
        self.summaries.pop(run, None)
        for key in [k for k in self.max_seq if k[0] == run]:
            del self.max_seq[key]
        return run

    def retention_rows(self) -> list[dict]:
        """What deciding a removal needs of every run (no summaries): status, times, points, bytes."""
        return list(self.db.query("SELECT id, project, name, kind, host, pid, pid_started, status, created, "
                                  "last_seen, ended, points, bytes FROM runs WHERE removing IS NULL ORDER BY created"))

    def _last_values(self, run: str) -> dict[str, float]:
        """Bit-exact (SQLite would store a NaN as NULL): 8 bytes per value."""
        return {m: _F64.unpack(v)[0] for m, v in self.db.execute("SELECT metric, value FROM last_values WHERE run=?",
                                                                 [run])}

    def resolve(self, ref: str, live_wins: bool = True) -> str:
        """A run id, or a run name (or project/name): see ``pilothouse.node.run_refs`` for which run."""
        return run_refs.resolve(self.db, ref, self.has_run, live_wins)

    # --- ingest -------------------------------------------------------------------------

    def ingest(self, key: Stream, seq: int, floor: int, body: dict, now: float) -> IngestResult:
        """Store records seq.. of one stream exactly once; validate everything before writing.

        ``body``: the 'rec' message's batch (``n``, ``keys``, ``metrics``, ``others``)."""
        run, rank, _ = key
        have = self.max_seq.get(key, 0)
        batch = self.check_batch(body)  # a bad batch is refused as such, resent or not
        last = seq + batch.n - 1
        if last <= have:
            return IngestResult(have)  # all seen before: a resend
        lost = max(0, floor - 1 - have) if seq > have + 1 else 0
        if seq > have + lost + 1:
            return IngestResult(have, expect=have + lost + 1)
        rows, refused = self._entries(run, rank, batch, have + lost + 1 - seq, now)  # raises before any change
        self.account_floor(key, floor)
        entries = [Entry(self._next_id(), *row) for row in rows]
        self._pending.extend(entries)
        note = ""
        if refused:
            names = ", ".join(map(repr, refused[:3])) + (", ..." if len(refused) > 3 else "")
            note = (f"run {run} has {MAX_METRICS_PER_RUN} metrics, the most a run may have: {len(refused)} new "
                    f"metric{'s' if len(refused) > 1 else ''} not stored ({names})")
            entries.append(self.event(run, "refused", {"rank": rank, "metrics": len(refused), "first": refused[:10],
                                                       "detail": note}))
        self._advance(key, last)
        return IngestResult(last, entries=entries, refused=note)

    def account_floor(self, key: Stream, floor: int) -> int:
        """The trainer holds nothing below ``floor``: what we lack below it was dropped at its bound.

        Recorded once as lost (a count and an event), so the loss is visible, never silent."""
        run, rank, _ = key
        have = self.max_seq.get(key, 0)
        if floor <= have + 1:
            return have
        lost = floor - 1 - have
        self.db.execute("UPDATE runs SET lost_records=lost_records+? WHERE id=?", [lost, run])
        self.event(run, "loss", {"rank": rank, "records": lost, "first_seq": have + 1, "last_seq": floor - 1})
        self._advance(key, floor - 1)
        return floor - 1

    def _advance(self, key: Stream, seq: int) -> None:
        if self.max_seq.get(key, 0) != seq:
            self._changed(self.max_seq, key)
            self.max_seq[key] = seq
            self._dirty_streams.add(key)

    def check_batch(self, body: dict) -> RecordBatch:
        """A 'rec' batch checked in full, changing nothing, or ProtocolError saying what is wrong."""
        return check_batch(body.get("n"), body.get("keys"), body.get("metrics"), body.get("others"),
                           self._known_metrics)

    def _entries(self, run: str, rank: int, batch: RecordBatch, skip: int, now: float) -> tuple[list[tuple], list[str]]:
        """Journal rows without ids for the batch's records from offset ``skip`` on (with the rollouts/*
        points of the rollout steps they close), and the new metrics refused past the run's limit;
        touches no state but memory the journal undoes (last values, open rollout steps)."""
        columns: list[Column] = batch.columns(skip)
        rollouts = []
        notes = []
        for _, kind, step, wall_time, payload in batch.others_from(skip):
            if kind == REC_ROLLOUTS:
                rollouts.append((step, wall_time, payload))
            else:
                notes.append(pack({"event": "checkpoint", "time": wall_time, "cmd": "checkpoint", "cid": None,
                                   "state": "applied", "step": step, "rank": rank, "applied": {"path": payload},
                                   "detail": f"checkpoint saved at step {step}: {payload}"}))
        entries: list[tuple] = []
        refused: list[str] = []
        last = self._run_last(run)
        for col in columns:
            row = self._metric_row(run, rank, col.metric, col.steps, col.vals, col.times, last)
            if row is None:
                refused.append(col.metric)
                continue
            entries.append(row)
            self.rollout_series.logged_by_run(run, col.metric)
        for step, wall_time, rows in rollouts:
            entries.append((run, KIND_ROLLOUTS, None, rank, len(rows), None, None, None,
                            pack_batch(step, wall_time, rows)))
            entries.extend(row for p in self.rollout_series.add(run, step, wall_time, rows, now)
                           if (row := self._metric_row(run, DERIVED_RANK, *p, last)) is not None)
        entries.extend((run, KIND_EVENT, None, rank, 0, None, None, None, body) for body in notes)
        if columns or rollouts:
            self.note_step(run, max([int(c.steps[-1]) for c in columns] + [r[0] for r in rollouts[-1:]]))
        return entries, refused

    def _run_last(self, run: str) -> dict[str, float]:
        last = self.summaries.get(run)
        if last is None:
            self._changed(self.summaries, run)
            last = self.summaries[run] = self._last_values(run)
        return last

    def _metric_row(self, run: str, rank: int, metric: str, steps: np.ndarray, vals: np.ndarray, times: np.ndarray,
                    last: dict[str, float]) -> tuple | None:
        """A metric chunk's journal row without its id, its last value noted; None for a new metric
        past the run's MAX_METRICS_PER_RUN."""
        if metric not in last and len(last) >= MAX_METRICS_PER_RUN:
            return None
        self._changed(last, metric)
        last[metric] = float(vals[-1])
        self._changed(self._dirty_last, (run, metric))
        self._dirty_last[run, metric] = True
        return run, KIND_METRIC, metric, rank, len(steps), steps.tobytes(), vals.tobytes(), times.tobytes(), None

    def event(self, run: str, name: str, data: dict) -> Entry:
        entry = Entry(self._next_id(), run, KIND_EVENT, None, 0, 0, None, None, None,
                      pack({"event": name, "time": time.time(), **data}))
        self._pending.append(entry)
        return entry

    # --- reading ------------------------------------------------------------------------

    def read(self, after: int, *, run: str | None = None, kinds: Iterable[str] | None = None,
             limit_points: int = MAX_PAGE_POINTS, limit_entries: int = 2_000) -> tuple[list[Entry], int]:
        """Entries after cursor ``after``; returns (entries, cursor to continue from)."""
        where, args = ["id > ?"], [after]
        if run in self.removing:
            return [], max(after, self.head)
        if self.removing:
            where.append(_HIDDEN)
        if run is not None:
            where.append("run = ?")
            args.append(run)
        kinds = tuple(kinds or ())
        if kinds:
            where.append(f"kind IN ({','.join('?' * len(kinds))})")
            args.extend(kinds)
        sql = f"SELECT {_FIELDS} FROM journal WHERE {' AND '.join(where)} ORDER BY id LIMIT ?"
        entries: list[Entry] = []
        points = 0
        for row in map(Entry._make, self.db.execute(sql, [*args, limit_entries])):
            entries.append(_unpacked(row, after, None))
            points += row.n
            if points >= limit_points:
                break
        if len(entries) < limit_entries and points < limit_points:
            return entries, max(after, self.head)  # scanned to the end
        end = entries[-1].id
        if not kinds or KIND_METRIC in kinds:  # packed entries reaching back into this page: their part of it
            where[0] = "first_id BETWEEN ? AND ? AND id > ?"
            straddling = self.db.execute(f"SELECT {_FIELDS} FROM journal WHERE {' AND '.join(where)} ORDER BY id",
                                         [end - packed_chunks.MAX_SPAN, end, end, *args[1:]])
            entries.extend(_unpacked(row, after, end) for row in map(Entry._make, straddling))
        return entries, end

    def tier_buckets(self, run: str, metric: str, level: int, x0: float, x1: float) -> np.ndarray:
        """The filled buckets of ``metric``'s tiers at ``level`` over steps x0..x1 (see
        ``JournalTiers.buckets``); LookupError for a run or metric this journal does not have."""
        if not self.has_run(run):
            raise LookupError(f"no run with id {run!r}")
        if self.db.execute("SELECT 1 FROM last_values WHERE run=? AND metric=?", [run, metric]).fetchone() is None:
            raise LookupError(f"run {run} has no metric {metric[:80]!r}")
        return self.tiers.buckets(run, metric, level, x0, x1)

    def build_tiers_some(self) -> str | None:
        """One bounded step of building the tiers of a run that lacks some; the run, once whole."""
        return self.tiers.build_some()

    def series(self, run: str, metric: str) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(steps, values, wall_times) of one metric, every point, in arrival order."""
        rows = self.db.execute("SELECT steps, vals, times FROM journal WHERE run=? AND kind=? AND metric=? "
                               "ORDER BY id", [run, KIND_METRIC, metric]).fetchall()
        return join_chunks([packed_chunks.row_points(*r) for r in rows])

def _unpacked(row: Entry, after: int, upto: int | None) -> Entry:
    """A packed entry as the plain one a reader between cursors ``after`` and ``upto`` is owed."""
    if row.vals is not None or row.kind != KIND_METRIC:
        return row
    n, points = packed_chunks.unpack(row.steps, after, upto)
    return row._replace(n=n, steps=points.steps, vals=points.vals, times=points.times)
