"""The app's own store: everything received from every agent, kept in SQLite (WAL).

Why: finished runs stay browsable and comparable after their node is gone, and the app
opens with history without asking any agent.  Entries are kept exactly as the agent sent
them (metric chunks as int64/float64 blobs, rollout and event bodies as msgpack), keyed
by (agent URL, journal id), so a re-sent page changes nothing and NaN/Inf stay bit-exact.
Each agent's cursor (the last journal id received) is written in the same transaction as
the entries it covers: a crash can neither skip nor double a page.

A ``LocalStore`` wraps one SQLite connection, which belongs to the thread that opened it:
every network link opens its own, the UI thread another.
"""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import platformdirs

from pilothouse.db import open_db, transaction
from pilothouse.wire.checks import INT64_MAX
from pilothouse.wire.entries import KIND_EVENT, KIND_METRIC, KIND_ROLLOUTS, join_chunks, unpack_blob
from pilothouse.wire.messages import pack

ENV_APP_DATA = "PILOTHOUSE_APP_DATA"  # a folder; the store is store.sqlite inside it
STORE_FILE = "store.sqlite"

# Columns of ``runs`` kept for queries; the whole dict the agent sent lives in ``data``.
_RUN_COLUMNS = ("project", "name", "kind", "status", "host", "last_step", "created")


def default_path() -> Path:
    """$PILOTHOUSE_APP_DATA/store.sqlite, else the user data dir's pilothouse/app/store.sqlite."""
    folder = os.environ.get(ENV_APP_DATA) or Path(platformdirs.user_data_dir("pilothouse")) / "app"
    return Path(folder) / STORE_FILE



class LocalStore:
    def __init__(self, path: str | Path | None = None):
        self.path = Path(path) if path is not None else default_path()
        self.db = open_db(self.path)
        self._create_tables()

    def _create_tables(self) -> None:
        db = self.db
        with transaction(self.db):  # one writer at a time: links and the UI open the file together
            db["agents"].create({"url": str, "name": str, "added": float, "cursor": int, "remembered": int,
                                 "journal": str},
                                pk="url", defaults={"cursor": 0, "remembered": 1}, not_null={"cursor"},
                                if_not_exists=True)
            db["runs"].create({"agent": str, "id": str, "project": str, "name": str, "kind": str,
                               "status": str, "host": str, "last_step": int, "created": float,
                               "updated": float, "data": bytes}, pk=("agent", "id"), if_not_exists=True)
            db["entries"].create({"agent": str, "id": int, "run": str, "kind": str, "metric": str, "rank": int,
                                  "n": int, "steps": bytes, "vals": bytes, "times": bytes, "body": bytes},
                                 pk=("agent", "id"), if_not_exists=True)
            db["entries"].create_index(["agent", "run", "kind", "metric", "id"], if_not_exists=True)
            db["settings"].create({"key": str, "value": bytes}, pk="key", if_not_exists=True)

    def close(self) -> None:
        self.db.conn.close()

    # --- remembered agents ---------------------------------------------------------------

    def add_agent(self, url: str, name: str | None = None) -> None:
        """Remember an agent; re-adding one keeps its cursor, so history is not fetched twice."""
        self.db.execute("INSERT INTO agents (url, name, added, cursor, remembered) VALUES (?, ?, ?, 0, 1) "
                        "ON CONFLICT(url) DO UPDATE SET remembered=1, name=COALESCE(excluded.name, name)",
                        [url, name, time.time()])

    def remove_agent(self, url: str, keep_data: bool = True) -> None:
        """Forget an agent.  By default its runs stay browsable (and its cursor is kept for a
        later re-add); ``keep_data=False`` deletes everything received from it."""
        if keep_data:
            self.db.execute("UPDATE agents SET remembered=0 WHERE url=?", [url])
            return
        with transaction(self.db):
            for table in ("entries", "runs"):
                self.db.execute(f"DELETE FROM {table} WHERE agent=?", [url])
            self.db.execute("DELETE FROM agents WHERE url=?", [url])

    def agents(self) -> list[dict]:
        """The remembered agents, oldest first: url, name, added, cursor."""
        return list(self.db.query("SELECT url, name, added, cursor FROM agents WHERE remembered=1 "
                                  "ORDER BY added, url"))

    def adopt_journal(self, url: str, journal: str) -> bool:
        """Check the agent still serves the journal our cursor belongs to.  If it was wiped or
        replaced (its ids restart), the old data moves to ``URL#<old id>`` (still browsable),
        the cursor restarts at 0, and True says the caller must follow from there."""
        with transaction(self.db):
            row = self.db.execute("SELECT journal FROM agents WHERE url=?", [url]).fetchone()
            old = row[0] if row else None
            if old == journal:
                return False
            if old:
                for table in ("entries", "runs"):
                    self.db.execute(f"UPDATE {table} SET agent=? WHERE agent=?", [f"{url}#{old[:8]}", url])
                self.db.execute("UPDATE agents SET journal=?, cursor=0 WHERE url=?", [journal, url])
                return True
            # first sight of this agent's journal: pages already stored belong to it, keep the cursor
            self.db.execute("INSERT INTO agents (url, added, cursor, remembered, journal) VALUES (?, ?, 0, 0, ?) "
                            "ON CONFLICT(url) DO UPDATE SET journal=excluded.journal", [url, time.time(), journal])
            return False

    def cursor(self, url: str) -> int:
        row = self.db.execute("SELECT cursor FROM agents WHERE url=?", [url]).fetchone()
        return row[0] if row else 0

    # --- writing (a link's thread) -------------------------------------------------------

    def write_page(self, url: str, entries: Sequence[Sequence], cursor: int) -> None:
        """Entries as received (fields in protocol.ENTRY_FIELDS order) and the cursor they
        reach, in one transaction.  Re-writing a page is harmless."""
        with transaction(self.db):
            if entries:
                self.db.conn.executemany("INSERT OR IGNORE INTO entries VALUES (?,?,?,?,?,?,?,?,?,?,?)",
                                         [(url, *e) for e in entries])
            self.db.execute("INSERT INTO agents (url, added, cursor, remembered) VALUES (?, ?, ?, 0) "
                            "ON CONFLICT(url) DO UPDATE SET cursor=MAX(cursor, excluded.cursor)",
                            [url, time.time(), cursor])

    def put_runs(self, url: str, runs: Iterable[dict]) -> None:
        """Upsert the run dicts ``Client.runs()`` returned by this agent."""
        now = time.time()
        rows = [(url, r["id"], *(_column(r.get(c)) for c in _RUN_COLUMNS), now,
                 pack(r)) for r in runs]
        with transaction(self.db):
            marks = ",".join("?" * (len(_RUN_COLUMNS) + 4))
            self.db.conn.executemany(f"INSERT OR REPLACE INTO runs VALUES ({marks})", rows)

    # --- reading -------------------------------------------------------------------------

    @contextlib.contextmanager
    def snapshot(self) -> Iterator[None]:
        """Reads inside see one state of the file while links keep writing, e.g. a cursor and
        exactly the history it covers (live entries above it are appended without a seam)."""
        self.db.execute("BEGIN")
        try:
            yield
        finally:
            self.db.execute("COMMIT")

    def setting(self, key: str, default: Any = None) -> Any:
        """A value the app remembers in this store (the last selection, pinned charts)."""
        row = self.db.execute("SELECT value FROM settings WHERE key=?", [key]).fetchone()
        return unpack_blob(row[0]) if row else default

    def put_setting(self, key: str, value: Any) -> None:
        with transaction(self.db):
            self.db.execute("INSERT OR REPLACE INTO settings VALUES (?, ?)", [key, pack(value)])

    def selection(self) -> list[tuple[str, str]]:
        """The runs selected when the app last closed or changed its selection, as (agent, run id)."""
        keys = self.setting("selection", [])
        return [(k[0], k[1]) for k in keys if isinstance(k, list) and len(k) == 2] if isinstance(keys, list) else []

    def remember_selection(self, keys: Sequence[tuple[str, str]]) -> None:
        self.put_setting("selection", [list(k) for k in keys])

    def runs(self, agent: str | None = None) -> list[dict]:
        """Run dicts as the agent last reported them, each with its ``agent`` URL added."""
        where, args = ("WHERE agent=?", [agent]) if agent is not None else ("", [])
        return [{**unpack_blob(data), "agent": url} for url, data in
                self.db.execute(f"SELECT agent, data FROM runs {where} ORDER BY created, agent, id", args)]

    def metrics(self, agent: str, run: str) -> list[str]:
        return [m for (m,) in self.db.execute(
            "SELECT DISTINCT metric FROM entries WHERE agent=? AND run=? AND kind=? ORDER BY metric",
            [agent, run, KIND_METRIC])]

    def series(self, agent: str, run: str, metric: str) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(steps, values, wall_times) of one metric, every point, in arrival order."""
        rows = self.db.execute("SELECT steps, vals, times FROM entries WHERE agent=? AND run=? AND kind=? "
                               "AND metric=? ORDER BY id", [agent, run, KIND_METRIC, metric]).fetchall()
        return join_chunks(rows)

    def events(self, agent: str, run: str) -> list[dict]:
        """Status changes, commands, checkpoints and losses, oldest first."""
        return self._bodies(agent, run, KIND_EVENT)

    def rollouts(self, agent: str, run: str) -> list[dict]:
        """Rollout batches ({step, time, rows}), oldest first."""
        return self._bodies(agent, run, KIND_ROLLOUTS)

    def _bodies(self, agent: str, run: str, kind: str) -> list[dict]:
        return [unpack_blob(b) for (b,) in self.db.execute(
            "SELECT body FROM entries WHERE agent=? AND run=? AND kind=? ORDER BY id", [agent, run, kind])]


def _column(value: Any) -> Any:
    """What SQLite can hold in a run-table column; anything else stays only in the run's packed dict."""
    if isinstance(value, (str, float)) or type(value) is int and -INT64_MAX - 1 <= value <= INT64_MAX:
        return value
    return None
