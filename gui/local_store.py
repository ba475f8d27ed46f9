"""The app's own store: everything received from every agent, kept in SQLite (WAL).

Why: finished runs stay browsable and comparable after their node is gone, and the app
opens with history without asking any agent.  Entries are kept exactly as the agent sent
them (metric chunks as int64/float64 blobs, rollout and event bodies as msgpack), keyed
by (agent URL, journal id), so a re-sent page changes nothing and NaN/Inf stay bit-exact.
Each agent's cursor (the last journal id received) is written in the same transaction as
the entries it covers: a crash can neither skip nor double a page.

Retention (File → Remove run from this app…, Clean up store…): a trigger adds each stored
entry's bytes to its run's counter in ``run_bytes``, so ``run_sizes`` reads one small row per
run whatever the run's length.  Removing a run first marks it in ``removed_runs`` and deletes
its run row in one short transaction (the run is gone from ``runs()`` at once), then deletes
its entries in transactions of about ``BATCH_SECONDS`` each with a pause between, so the links'
writers (one SQLite writer at a time) never wait long.  A removal cut short (the
app killed) stays marked as pending and ``finish_removals`` completes it; it only ever deletes
rows of the marked run.  The mark stays afterwards: removing a run removes this app's copy for
good, the agent's own copy is not touched, and entries or run-list rows the agent sends later
for it are dropped by triggers, so a run the agent still serves never comes back silently with
a hole in its history.  ``remove_agent(url, keep_data=False)`` forgets the marks of that
agent too: re-added, it is fetched again from its start, removed runs included.

Rollouts: bodies stay the zstd frames the agent sent; a step's rows, a run's steps and a search
over all of a run's text go through ``rollout_search`` (an FTS5 index), so nothing reads a whole
run's text.  A link indexes what it wrote in short transactions of its own (``index_rollouts``).

A ``LocalStore`` wraps one SQLite connection, which belongs to the thread that opened it:
every network link opens its own, the UI thread another.
"""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import platformdirs

from pilothouse.gui.store_schema import open_store, rollout_search
from pilothouse.gui.tiers import Clip, Tiers, TierView
from pilothouse.store.db import insert_rows, open_db, transaction
from pilothouse.store.removal import delete_some
from pilothouse.store.rollout_search import Hit
from pilothouse.store.tier_table import TOP
from pilothouse.store.tiers import RECORD
from pilothouse.wire.checks import INT64_MAX
from pilothouse.wire.entries import KIND_EVENT, KIND_METRIC, KIND_ROLLOUTS, join_chunks, unpack_blob
from pilothouse.wire.messages import pack
from pilothouse.wire.packed_chunks import row_points

ENV_APP_DATA = "PILOTHOUSE_APP_DATA"  # a folder; the store is store.sqlite inside it
STORE_FILE = "store.sqlite"

# Columns of ``runs`` kept for queries; the whole dict the agent sent lives in ``data``.
_RUN_COLUMNS = ("project", "name", "kind", "status", "host", "last_step", "created")

LIVE = ("running", "paused", "stale")  # a stale run may still be training: never collected, removed only by force
# Removing a run deletes its entries in transactions of about BATCH_SECONDS each (the rows per
# batch follow the time the last one took: a row of 2,000 points costs ~15x one of 100), at most
# BATCH_ROWS rows, with BATCH_PAUSE between two, when waiting writers take the lock.
BATCH_SECONDS = 0.01
BATCH_ROWS = 5000
FIRST_BATCH = 64
BATCH_PAUSE = 0.02
PART_POINTS = 1 << 20  # points a part of a streamed metric holds (about 24 MB)
INDEX_TEXT_BYTES = 256 * 1024  # rollout text one indexing transaction takes: about 12 ms
ROUND_AGENTS = 200  # agents whose pages one round of a write reads and stores together (``_rounds``)


def default_path() -> Path:
    """$PILOTHOUSE_APP_DATA/store.sqlite, else the user data dir's pilothouse/app/store.sqlite."""
    folder = os.environ.get(ENV_APP_DATA) or Path(platformdirs.user_data_dir("pilothouse")) / "app"
    return Path(folder) / STORE_FILE


class LiveRunError(ValueError):
    """Removing a running, paused or stale run needs ``force``: its trainer may still be logging."""


@dataclass(frozen=True)
class StoredRun:
    """A run as retention sees it: what it is, when it ended, and its bytes in this store."""

    agent: str
    run_id: str
    title: str
    status: str
    ended: float  # when it ended, else when it was last heard of, else when it started
    size: int

    @property
    def key(self) -> tuple[str, str]:
        return (self.agent, self.run_id)

    @property
    def live(self) -> bool:
        return self.status in LIVE


def pick(runs: Iterable[StoredRun], older_than: float | None, max_size: int | None, now: float) -> list[StoredRun]:
    """The runs a clean-up removes, oldest ended first: those ended more than ``older_than``
    seconds before ``now``, then more of the oldest while the total is over ``max_size`` bytes.
    A live run is never picked, even when the live runs alone are over the size."""
    runs = list(runs)
    total = sum(r.size for r in runs)
    chosen = []
    for run in sorted((r for r in runs if not r.live), key=lambda r: (r.ended, r.key)):
        if not (older_than is not None and run.ended < now - older_than or max_size is not None and total > max_size):
            break  # the rest ended later and the total already fits
        chosen.append(run)
        total -= run.size
    return chosen


class LocalStore:
    def __init__(self, path: str | Path | None = None):
        self.path = Path(path) if path is not None else default_path()
        self.db = open_db(self.path)
        open_store(self.db)
        self.rollout_search = rollout_search(self.db)
        self.tiers = Tiers(self.db)

    def close(self) -> None:
        self.db.conn.close()

    def fold_tiers(self) -> None:
        """Fold every entry waiting for the tiers now (``tiers``: folding waits up to FOLD_SECONDS)."""
        with transaction(self.db):
            self.tiers.fold_due(force=True)

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
            self.rollout_search.unindex([k for (k,) in self.db.execute(
                "SELECT rowid FROM entries WHERE agent=? AND kind=?", [url, KIND_ROLLOUTS])])
            for table in ("entries", "tiers", "tier_tail", "runs", "run_bytes", "removed_runs"):
                self.db.execute(f"DELETE FROM {table} WHERE agent=?", [url])
            self.db.execute("DELETE FROM agents WHERE url=?", [url])

    def agents(self) -> list[dict]:
        """The remembered agents, oldest first: url, name, added, cursor."""
        return list(self.db.query("SELECT url, name, added, cursor FROM agents WHERE remembered=1 "
                                  "ORDER BY added, url"))

    # --- multi-node jobs: their agents remembered as one (pilothouse.gui.jobs) ---------------

    def remember_job(self, run_id: str, title: str, members: Iterable[tuple[str, str, str]]) -> None:
        """A job accepted: its agents as (url followed, node host, the node's agent URL), kept together."""
        with transaction(self.db):
            self.db.execute("INSERT OR REPLACE INTO jobs (id, title, added, declined) VALUES (?, ?, ?, 0)",
                            [run_id, title, time.time()])
            self.db.conn.executemany("INSERT OR REPLACE INTO job_agents VALUES (?, ?, ?, ?)",
                                [(run_id, *m) for m in members])

    def decline_job(self, run_id: str, title: str) -> None:
        """The user said no to adding this job's agents: the app does not offer it again."""
        self.db.execute("INSERT INTO jobs (id, title, added, declined) VALUES (?, ?, ?, 1) "
                        "ON CONFLICT(id) DO UPDATE SET declined=1", [run_id, title, time.time()])

    def jobs(self) -> list[dict]:
        """Every job decided on, oldest first: id, title, declined and its ``members`` (url, host, agent)."""
        members: dict[str, list[tuple[str, str, str]]] = {}
        for job, url, host, agent in self.db.execute("SELECT job, url, host, agent FROM job_agents ORDER BY rowid"):
            members.setdefault(job, []).append((url, host, agent))
        return [{**row, "declined": bool(row["declined"]), "members": members.get(row["id"], [])}
                for row in self.db.query("SELECT id, title, declined FROM jobs ORDER BY added, id")]

    def forget_job(self, run_id: str) -> list[str]:
        """Forget a job; the URLs of its agents that no other job holds (the caller stops following them)."""
        with transaction(self.db):
            urls = [u for (u,) in self.db.execute("SELECT url FROM job_agents WHERE job=? AND url NOT IN "
                                                  "(SELECT url FROM job_agents WHERE job<>?)", [run_id, run_id])]
            self.db.execute("DELETE FROM job_agents WHERE job=?", [run_id])
            self.db.execute("DELETE FROM jobs WHERE id=?", [run_id])
        return urls

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
                for table in ("entries", "tiers", "tier_tail", "runs", "run_bytes", "removed_runs", "rollout_batches"):
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

    # --- writing (the store writer's thread) -------------------------------------------------------

    def write_page(self, url: str, entries: Sequence[Sequence], cursor: int,
                   runs: Iterable[dict] | None = None) -> None:
        """One agent's page: see ``write_pages``."""
        self.write_pages([(url, entries, cursor, runs)])

    def write_pages(self, pages: Iterable[tuple[str, Sequence[Sequence], int, Iterable[dict] | None]]) -> None:
        """Per agent, entries as received (fields in protocol.ENTRY_FIELDS order), the cursor they
        reach and its run list if given (``put_runs``), all in one transaction.  Re-writing a page
        is harmless.  A metric entry held above the cursor is a packed entry's part (see
        ``pilothouse.wire.entries``): its rest, arriving later under the same id, is appended to
        it (an entry at or below the cursor is a repeat)."""
        try:
            self._write_pages(pages)
        except BaseException:
            self.tiers.forget()  # what it held for the fold was not written after all
            raise

    def _write_pages(self, pages: Iterable[tuple[str, Sequence[Sequence], int, Iterable[dict] | None]]) -> None:
        with transaction(self.db):
            new, parts = [], []
            for group in _rounds(list(pages)):
                rows, rests = self._insert(group)
                new += rows
                parts += rests
                marks = ", ".join(["(?, ?, ?, 0)"] * len(group))
                self.db.execute(f"INSERT INTO agents (url, added, cursor, remembered) VALUES {marks} "
                                "ON CONFLICT(url) DO UPDATE SET cursor=MAX(cursor, excluded.cursor)",
                                [v for url, _, cursor, _ in group for v in (url, time.time(), cursor)])
                for url, _, _, runs in group:
                    if runs is not None:
                        self._put_runs(url, runs)
            self.tiers.add(new, parts)
            self.tiers.fold_due()

    def _insert(self, group: Sequence[tuple[str, Sequence[Sequence], int, Any]]
                ) -> tuple[list[tuple[str, list[Sequence]]], list[tuple[str, Sequence]]]:
        """Store agents' entries (each agent once) in a few statements, whatever the number of agents:
        each statement lets go of the GIL and waits for it back (``insert_rows``), and five per agent
        a write were most of what the writer's thread waited for at 16 agents.  Returns per agent the
        entries not stored before (nor dropped for a removed run), and apart the rests of parts
        stored before, as just their own points.  An id at or below the agent's cursor is a repeat;
        one above it that is stored already is a packed entry's part, and one given twice here is a
        part and its rest (joined before they are stored)."""
        urls = [url for url, *_ in group]
        marks = ", ".join("?" * len(urls))
        before = dict(self.db.execute(f"SELECT url, cursor FROM agents WHERE url IN ({marks})", urls).fetchall())
        fresh: dict[str, dict[int, Sequence]] = {}
        for url, entries, *_ in group:
            mine = fresh.setdefault(url, {})
            for e in entries:
                if e[0] > before.get(url, 0):
                    got = mine.get(e[0])
                    mine[e[0]] = e if got is None else _joined_part(got, e)
        waiting = [url for url in urls if fresh[url]]
        if not waiting:
            return [(url, []) for url in urls], []
        held = set(self.db.execute(" UNION ALL ".join(["SELECT agent, id FROM entries WHERE agent=? AND id>?"]
                                                      * len(waiting)),
                                   [v for url in waiting for v in (url, before.get(url, 0))]).fetchall())
        dropped = set(self.db.execute(f"SELECT agent, run FROM removed_runs WHERE agent IN ({marks})", urls).fetchall())
        stored, rests = [], []
        for url in urls:
            kept = {i: e for i, e in fresh[url].items() if (url, e[1]) not in dropped}  # a removed run gains nothing
            stored.append((url, [e for i, e in kept.items() if (url, i) not in held]))
            rests += [(url, e) for i, e in kept.items() if (url, i) in held and e[2] == KIND_METRIC]
        insert_rows(self.db.conn, "INSERT OR IGNORE INTO entries", [(url, *e) for url, rows in stored for e in rows])
        return stored, [(url, e) for url, e in rests if self._append_part(url, e)]

    def _append_part(self, url: str, e: Sequence) -> bool:
        """The rest of a packed entry this store holds a part of."""
        row = self.db.execute("SELECT n, steps, vals, times FROM entries WHERE agent=? AND id=? AND run=?",
                              [url, e[0], e[1]]).fetchone()
        if row is None:
            return False
        self.db.execute("UPDATE entries SET n=?, steps=?, vals=?, times=? WHERE agent=? AND id=?",
                        [row[0] + e[5], row[1] + e[6], row[2] + e[7], row[3] + e[8], url, e[0]])
        return True

    def index_rollouts(self, text_bytes: int = INDEX_TEXT_BYTES) -> bool:
        """One transaction of rollout indexing (about ``text_bytes`` of text); whether more is queued.
        A link calls it after each page, so a page's transaction stays short and its steps and text
        become searchable a slice at a time."""
        with transaction(self.db):
            return self.rollout_search.index_some(text_bytes)

    def put_runs(self, url: str, runs: Iterable[dict]) -> None:
        """Upsert the run dicts ``Client.runs()`` returned by this agent."""
        with transaction(self.db):
            self._put_runs(url, runs)

    def _put_runs(self, url: str, runs: Iterable[dict]) -> None:
        now = time.time()
        rows = [(url, r["id"], *(_column(r.get(c)) for c in _RUN_COLUMNS), now, pack(r)) for r in runs]
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
            self._write_setting(key, value)

    def _write_setting(self, key: str, value: Any) -> None:
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
        found: list[str] = []
        while True:  # one index seek per metric: a DISTINCT would read every entry of the run
            (metric,) = self.db.execute("SELECT MIN(metric) FROM entries WHERE agent=? AND run=? AND kind=? "
                                        "AND metric>?",
                                        [agent, run, KIND_METRIC, found[-1] if found else ""]).fetchone()
            if metric is None:
                return found
            found.append(metric)

    def points(self, agent: str, run: str) -> int:
        """How many of a run's metric points the store holds, from the top stored level of its tiers
        and the entries waiting to be folded into them."""
        with self.tiers.snapshot():
            waiting = self.db.execute("SELECT COALESCE(SUM(e.n), 0) FROM tier_tail t JOIN entries e ON e.agent=t.agent "
                                      "AND e.run=t.run AND e.kind=? AND e.metric=t.metric AND e.id>t.folded_to "
                                      "WHERE t.agent=? AND t.run=?", [KIND_METRIC, agent, run]).fetchone()[0]
            return waiting + sum(int(np.frombuffer(r, RECORD)["count"].sum()) for (r,) in self.db.execute(
                "SELECT buckets FROM tiers WHERE agent=? AND run=? AND level=?", [agent, run, TOP]))

    def pack_upto(self, key: tuple[str, str, str]) -> int:
        """The newest entry of a stream (agent, run, metric) that may be packed: at or below its agent's
        cursor (above it a part may wait for its rest) and folded into the tiers (a packed entry takes
        the id of its last part: one waiting would be read again with the points folded before it)."""
        row = self.db.execute("SELECT folded_to FROM tier_tail WHERE agent=? AND run=? AND metric=?", key).fetchone()
        return self.cursor(key[0]) if row is None else min(self.cursor(key[0]), row[0])

    def series(self, agent: str, run: str, metric: str) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(steps, values, wall_times) of one metric, every point, in arrival order."""
        rows = self.db.execute("SELECT steps, vals, times FROM entries WHERE agent=? AND run=? AND kind=? "
                               "AND metric=? ORDER BY id", [agent, run, KIND_METRIC, metric]).fetchall()
        return _joined(rows)

    def series_tail(self, agent: str, run: str, metric: str, entries: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """``series`` of the last ``entries`` entries only (oldest first): the latest readings, read in a
        time that does not grow with the run (the GPU grid's history of every GPU of a job)."""
        rows = self.db.execute("SELECT steps, vals, times FROM entries WHERE agent=? AND run=? AND kind=? "
                               "AND metric=? ORDER BY id DESC LIMIT ?", [agent, run, KIND_METRIC, metric, entries])
        return _joined(rows.fetchall()[::-1])

    def series_parts(self, agent: str, run: str, metric: str,
                     points: int = PART_POINTS) -> Iterator[tuple[np.ndarray, np.ndarray, np.ndarray]]:
        """``series`` in parts of about ``points`` points (whole entries), in arrival order: an export or
        a resumed run's read goes through a metric of any length without holding it."""
        found = self.db.execute("SELECT steps, vals, times, n FROM entries WHERE agent=? AND run=? AND kind=? "
                                "AND metric=? ORDER BY id", [agent, run, KIND_METRIC, metric])
        part, held = [], 0
        for row in found:
            part.append(row)
            held += row[3]
            if held >= points:
                yield _joined(part)
                part, held = [], 0
        if part:
            yield _joined(part)

    def view(self, agent: str, run: str, metric: str, x0: float, x1: float, pixels: int,
             clip: Clip = None) -> TierView:
        """What a chart draws of steps x0..x1 on ``pixels`` columns (of the steps ``clip`` keeps), read
        from the tiers: a few buckets per column whatever the run's length (see ``pilothouse.gui.tiers``)."""
        return self.tiers.view(agent, run, metric, x0, x1, pixels, lambda ids: self._points(agent, ids), clip)

    def time_view(self, agent: str, run: str, metric: str, t0: float, t1: float, pixels: int,
                  clip: Clip = None) -> TierView:
        """``view`` on a wall-time axis: what a chart draws of times t0..t1, from the same tiers."""
        return self.tiers.time_view(agent, run, metric, t0, t1, pixels, lambda ids: self._points(agent, ids), clip)

    def summary(self, agent: str, run: str, metric: str, clip: Clip = None) -> np.ndarray:
        """One tier record of a metric's points (of the steps ``clip`` keeps): count, extents, non-finite."""
        return self.tiers.summary(agent, run, metric, clip, lambda ids: self._points(agent, ids))

    def nearest(self, agent: str, run: str, metric: str, xq: float, clip: Clip = None) -> tuple[float, float] | None:
        """The stored point of a metric whose step is nearest xq, read around it (a crosshair)."""
        return self.tiers.nearest(agent, run, metric, xq, lambda ids: self._points(agent, ids), clip)

    def nearest_time(self, agent: str, run: str, metric: str, tq: float,
                     clip: Clip = None) -> tuple[float, float] | None:
        """(time, value) of the stored point of a metric nearest time tq (a crosshair on a time axis)."""
        return self.tiers.nearest_time(agent, run, metric, tq, lambda ids: self._points(agent, ids), clip)

    def _points(self, agent: str, ids: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(steps, values, times) of these metric entries, in arrival order."""
        return _joined(self.db.execute("SELECT steps, vals, times FROM entries WHERE agent=? AND id IN "
                                       "(SELECT value FROM json_each(?)) ORDER BY id",
                                       [agent, str(ids.tolist())]).fetchall())

    def events(self, agent: str, run: str) -> list[dict]:
        """Status changes, commands, checkpoints and losses, oldest first."""
        return [unpack_blob(b) for (b,) in self.db.execute(
            "SELECT body FROM entries WHERE agent=? AND run=? AND kind=? AND metric IS NULL ORDER BY id",
            [agent, run, KIND_EVENT])]  # metric IS NULL: the run's index gives them in id order (no scan of the agent)

    def rollout_steps(self, agent: str, run: str) -> list[tuple[int, int, float | None]]:
        """(step, rows, mean reward or None) of each step with rollouts indexed, oldest first; no text read."""
        return self.rollout_search.steps((agent, run))

    def rollout_rows(self, agent: str, run: str, step: int) -> list[dict]:
        """One step's rows, its batches joined in arrival order: only that step's bodies are read."""
        return self.rollout_search.rows((agent, run), step)

    def search_rollouts(self, agent: str, run: str, words: str, before: int | None = None,
                        limit: int = 200, in_prompt: bool = False) -> tuple[list[Hit], int | None]:
        """A page of the run's rows holding ``words`` (``in_prompt``: in the prompt), newest first, and
        the ``before`` of the next page (see ``RolloutSearch.search``); ValueError for words that cannot
        be searched."""
        return self.rollout_search.search((agent, run), words, before, limit, in_prompt)

    # --- retention: sizes, removal, clean-up ---------------------------------------------

    def run_sizes(self) -> dict[tuple[str, str], int]:
        """Each run's share of the file's used pages (removed runs left out), in proportion to its
        entries' bytes: the counters say how much each run holds, the pages what SQLite spends on
        it (rows of a few KB leave much of a page empty), and the sizes add up to the file's used
        space, which is what a clean-up's max size is about.  Cheap whatever the runs' length."""
        rows = list(self.db.execute("SELECT b.agent, b.run, b.bytes, d.run IS NULL FROM run_bytes b LEFT JOIN "
                                    "removed_runs d ON d.agent=b.agent AND d.run=b.run"))
        counted = sum(n for _, _, n, _ in rows)
        (used,), = self.db.execute("SELECT (page_count - freelist_count) * page_size FROM pragma_page_count, "
                                   "pragma_freelist_count, pragma_page_size")
        scale = max(1.0, used / counted) if counted else 1.0
        return {(a, r): round(n * scale) for a, r, n, kept in rows if kept}

    def stored_runs(self) -> list[StoredRun]:
        """Every run in the store with its status, end and size, for choosing what to remove."""
        sizes = self.run_sizes()
        return [StoredRun(r["agent"], r["id"], _title(r), r.get("status") or "", _ended(r),
                          sizes.get((r["agent"], r["id"]), 0)) for r in self.runs()]

    def collect(self, older_than: float | None, max_size: int | None, now: float | None = None) -> list[StoredRun]:
        """The runs a clean-up with these limits would remove (see ``pick``); removes nothing."""
        return pick(self.stored_runs(), older_than, max_size, time.time() if now is None else now)

    def removed(self) -> set[tuple[str, str]]:
        """Every run removed from this store (pending or done): the app drops them from the agents' lists."""
        return {(a, r) for a, r in self.db.execute("SELECT agent, run FROM removed_runs")}

    def remove_runs(self, keys: Iterable[tuple[str, str]], *, force: bool = False, batch: int = BATCH_ROWS) -> int:
        """Remove these runs' entries, run rows and selection; returns the bytes freed.  A live
        run (``LIVE``) raises ``LiveRunError`` unless ``force``, and then nothing is removed."""
        keys = list(dict.fromkeys(keys))
        freed = sum(self.run_sizes().get(k, 0) for k in keys)
        self._mark_removed(keys, force)
        for key in keys:
            self._purge(key, batch)
        return freed

    def pending_removals(self) -> list[tuple[str, str]]:
        """Runs marked removed whose entries are not all deleted yet (the app was killed meanwhile)."""
        return [(a, r) for a, r in self.db.execute("SELECT agent, run FROM removed_runs WHERE pending=1")]

    def finish_removals(self, batch: int = BATCH_ROWS) -> int:
        """Complete the removals a killed app left pending; returns how many there were."""
        pending = self.pending_removals()
        for key in pending:
            self._purge(key, batch)
        return len(pending)

    def _mark_removed(self, keys: list[tuple[str, str]], force: bool) -> None:
        """One short transaction: the runs leave ``runs()`` and the selection, and stay marked."""
        with transaction(self.db):
            if not force:
                live = [f"{a} {r}" for a, r in keys if self.db.execute(
                    "SELECT 1 FROM runs WHERE agent=? AND id=? AND status IN (?, ?, ?)", [a, r, *LIVE]).fetchone()]
                if live:
                    raise LiveRunError(f"live runs (force to remove them): {', '.join(live)}")
            now = time.time()
            for agent, run in keys:
                self.db.execute("INSERT INTO removed_runs VALUES (?, ?, ?, 1) "
                                "ON CONFLICT(agent, run) DO UPDATE SET pending=1", [agent, run, now])
                self.db.execute("DELETE FROM runs WHERE agent=? AND id=?", [agent, run])
            self._write_setting("selection", [list(k) for k in self.selection() if k not in keys])

    def _purge(self, key: tuple[str, str], batch: int) -> None:
        """Delete a marked run's entries, then its tier rows, at most ``batch`` rows and about
        BATCH_SECONDS per transaction; the last one also clears its counter and the pending flag.
        No entry of the run can arrive meanwhile (a trigger)."""
        rows = min(batch, FIRST_BATCH)
        for table in ("entries", "tiers"):
            while True:
                started = time.perf_counter()
                with transaction(self.db):
                    gone = delete_some(self.db, table, {"agent": key[0], "run": key[1]}, rows,
                                       search=self.rollout_search if table == "entries" else None)
                    if gone < rows and table == "tiers":
                        self.db.execute("DELETE FROM tier_tail WHERE agent=? AND run=?", key)
                        self.db.execute("DELETE FROM run_bytes WHERE agent=? AND run=?", key)
                        self.db.execute("UPDATE removed_runs SET pending=0 WHERE agent=? AND run=?", key)
                if gone < rows:
                    break
                took = max(time.perf_counter() - started, 1e-6)
                rows = max(1, min(batch, rows * 2, int(rows * BATCH_SECONDS / took)))
                time.sleep(BATCH_PAUSE)


def _joined(rows: Sequence[Sequence]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(steps, values, wall_times) of metric rows (steps, vals, times, ...), packed ones unpacked."""
    return join_chunks([row_points(*row[:3]) for row in rows])


def _rounds(pages: list[tuple[str, Any, Any, Any]]) -> Iterator[list[tuple[str, Any, Any, Any]]]:
    """Pages in order, cut where an agent comes again (each round names an agent once, so what it
    reads, cursors and parts held, sees every round before it) and every ROUND_AGENTS agents (one
    SELECT per agent joined by UNION ALL: SQLite takes 500 at most)."""
    group: list = []
    named: set[str] = set()
    for page in pages:
        if len(group) == ROUND_AGENTS or page[0] in named:
            yield group
            group, named = [], set()
        group.append(page)
        named.add(page[0])
    if group:
        yield group


def _joined_part(part: Sequence, rest: Sequence) -> Sequence:
    """A packed entry's part and its rest, arrived in one write, as one entry."""
    if part[2] != KIND_METRIC:
        return part  # not a part: a repeat
    return (*part[:5], part[5] + rest[5], part[6] + rest[6], part[7] + rest[7], part[8] + rest[8], part[9])


def _title(run: dict) -> str:
    return f"{run.get('project') or ''}/{run.get('name') or run['id']}"


def _ended(run: dict) -> float:
    """When a run ended, else when its agent last heard of it, else when it started."""
    for field in ("ended", "last_seen", "created"):
        if isinstance(run.get(field), (int, float)):
            return float(run[field])
    return 0.0


def _column(value: Any) -> Any:
    """What SQLite can hold in a run-table column; anything else stays only in the run's packed dict."""
    if isinstance(value, (str, float)) or type(value) is int and -INT64_MAX - 1 <= value <= INT64_MAX:
        return value
    return None
