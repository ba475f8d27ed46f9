"""Links to agents: one background thread per agent owns its sockets and its store connection.

Why threads: ZeroMQ sockets and SQLite connections must stay on the thread that made them,
and network I/O must never run on the Qt thread.  A link follows its agent's journal from
the cursor kept in the local store (history, then live), writes its pages there (those that
come close together in one transaction: ``Batch``), refreshes the run list about once a second,
and hands both to ``on_batch(url, entries, runs)`` on the link's thread (``runs`` is None in a
turn where the run list was not refreshed; a metric stream's chunks of a batch come joined into
one: ``joined``); the Qt layer turns that callback into a signal.  Everything is in the local
store before the callback runs.

Health (``Health``):

- ``state``: ``connecting`` (no answer yet), ``connected``, ``reconnecting`` (nothing heard,
  neither a page nor a run-list answer, for ``dead_after`` seconds), ``stopped``.
- ``lag``: seconds from sending the last run-list request to its answer: the round trip
  through the network and the agent's loop, free of clock skew and of whether a trainer is
  logging.  ``behind``: wall clock now minus the newest received point's wall time, i.e.
  how far the data shown trails the trainer, as of the last page with points (includes clock
  skew between hosts, and is large while history is being caught up).
- ``points_per_s``: metric points received per second over the last few seconds.
"""

from __future__ import annotations

import contextlib
import sqlite3
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TypeVar

import numpy as np

from pilothouse.client import AgentError, Client
from pilothouse.security import SecurityError
from pilothouse.wire.entries import KIND_METRIC, KIND_ROLLOUTS, Entry, Page
from pilothouse.wire.messages import MAX_PAGE_POINTS, ProtocolError
from pilothouse.wire.urls import check_url

from .local_store import LocalStore

BatchCallback = Callable[[str, list[Entry], "list[dict] | None"], None]
HealthCallback = Callable[["Health"], None]

T = TypeVar("T")
RATE_WINDOW = 5.0  # seconds over which points_per_s is averaged
WRITE_S = 0.1  # a page waits at most this long for others to be written with it, while the app keeps up
WRITE_SHARE = 5.0  # ... or this many times the last write's time, when writes slow down (a busy app)
MAX_WRITE_WAIT = 1.0  # ... but never longer
INDEX_SECONDS = 0.05  # rollout indexing per page a link does at most (the rest waits for the next page)


@dataclass(frozen=True)
class Health:
    url: str
    state: str = "connecting"
    lag: float | None = None
    behind: float | None = None
    points_per_s: float = 0.0
    silent: float = 0.0  # seconds since anything was heard from the agent
    cursor: int = 0
    error: str = ""
    warning: str = ""  # what the agent says is wrong on its side (a full disk, a damaged journal)


class AgentLink:
    """Follows one agent on a background thread; see the module docstring."""

    def __init__(self, url: str, store_path: str | Path | None = None, *,
                 on_batch: BatchCallback | None = None, on_health: HealthCallback | None = None,
                 dead_after: float = 3.0, runs_every: float = 1.0, poll: float = 0.2):
        self.url = check_url(url)
        self.store_path = store_path
        self.on_batch = on_batch
        self.on_health = on_health
        self.dead_after = dead_after
        self.runs_every = runs_every
        self.poll = poll  # longest block in a socket call: bounds how fast stop() returns
        self._health = Health(self.url)
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        if self._thread is None:
            self._thread = threading.Thread(target=self._main, name=f"link {self.url}", daemon=True)
            self._thread.start()

    def stop(self, wait: bool = True) -> None:
        """Ask the thread to end; with ``wait``, join it (well under a second)."""
        self._stop.set()
        if wait and self._thread is not None:
            self._thread.join(self.poll * 5 + 1.0)

    def health(self) -> Health:
        with self._lock:
            return self._health

    # --- the link's thread ------------------------------------------------------------------

    def _main(self) -> None:
        try:
            with contextlib.ExitStack() as stack:
                store = self._busy_retry(LocalStore, self.store_path)  # many links open it at once
                if store is None:
                    return
                stack.callback(store.close)
                feed = stack.enter_context(Client(self.url))  # own socket: request() would eat stream data
                ask = stack.enter_context(Client(self.url, timeout=self.poll * 2))
                self._follow(store, feed, ask)
        except SecurityError as exc:  # no key for this agent, or an exposed one: the health says what to run
            self._set(error=str(exc))
        except Exception as exc:  # a bug or a broken store: say so in the health, never die silently
            self._set(error=f"{type(exc).__name__}: {exc}")
            raise
        finally:
            self._set(state="stopped")
            if self.on_health is not None:
                self.on_health(self.health())

    def _follow(self, store: LocalStore, feed: Client, ask: Client) -> None:
        cursor = store.cursor(self.url)
        journal: str | None = None  # checked on every page: no entry of a new journal lands under the old one
        heard = started = time.monotonic()
        next_runs = reported = 0.0
        rate: deque[tuple[float, int]] = deque()
        indexing = True  # rollouts may wait to be indexed (a store written before, or a link stopped midway)
        batch = Batch(cursor)
        pages = feed.follow(after=cursor, idle=min(self.poll, WRITE_S))  # an empty page: the batch is written
        try:
            while not self._stop.is_set():
                page = next(pages)
                now = time.monotonic()
                if page.journal is not None and page.journal != journal:
                    journal = page.journal
                    if not self._write(store, batch):  # the old journal's pages, before it is moved aside
                        break
                    if self._busy_retry(store.adopt_journal, self.url, journal):  # wiped, restarted: from its start
                        pages.close()
                        cursor, batch = 0, Batch(0)
                        pages = feed.follow(after=0, idle=min(self.poll, WRITE_S))
                        continue
                batch.add(page, now)
                if page.entries:
                    heard = now
                    rate.append((now, sum(e.n for e in page.entries if e.kind == KIND_METRIC)))
                    self._note_behind(page.entries)
                if now >= next_runs and not self._stop.is_set():
                    batch.runs, heard = self._refresh_runs(ask, heard)  # written with the batch, at once
                    next_runs = time.monotonic() + self.runs_every
                entries: list[Entry] = []
                runs = None
                if batch.due(now, bool(page.entries)):
                    entries, runs = batch.entries, batch.runs
                    if not self._write(store, batch):  # stopped: perhaps not written, the next start reads it again
                        break
                    cursor = batch.cursor
                if indexing or any(e.kind == KIND_ROLLOUTS for e in entries):
                    indexing = bool(self._busy_retry(_index, store, True))
                while rate and rate[0][0] < now - RATE_WINDOW:
                    rate.popleft()
                if self.on_batch is not None and (entries or runs is not None):
                    self.on_batch(self.url, joined(entries, cursor), runs)
                changed = self._update(now, heard, started, rate, cursor)
                if self.on_health is not None and (changed or now - reported >= 1.0):
                    reported = now
                    self.on_health(self.health())
            self._write(store, batch)
        finally:
            pages.close()

    def _write(self, store: LocalStore, batch: Batch) -> bool:
        """The batch's pages into the store in one transaction (nothing when it holds none); False
        when the link was stopped before it could."""
        if batch.pending or batch.runs is not None:
            began = time.monotonic()
            self._busy_retry(store.write_page, self.url, batch.entries, batch.cursor, batch.runs)
            if self._stop.is_set():
                return False
            batch.written(time.monotonic() - began)
        return True

    def _refresh_runs(self, ask: Client, heard: float) -> tuple[list[dict] | None, float]:
        """The agent's run list (None: no answer), and when it was heard."""
        sent = time.monotonic()
        try:
            runs = ask.runs()
        except (AgentError, ProtocolError) as exc:  # no answer, a refused key, garbage: shown, tried again
            self._set(error=str(exc))
            return None, heard
        answered = time.monotonic()
        try:
            state = ask.ping()
            warning = state.get("disk_full") or state.get("damaged") or ""
        except (AgentError, ProtocolError) as exc:
            warning = f"no state from the agent: {exc}"
        self._set(lag=answered - sent, error="", warning=str(warning))
        return runs, answered

    def _busy_retry(self, write: Callable[..., T], *args: object) -> T | None:
        """``write(*args)`` once the store's write lock is free.  The links of one store take turns on a
        lock of their own: a waiting link is woken as soon as the other is done, where SQLite's busy
        handler sleeps up to 100 ms between tries (measured: 8 links 3 s behind their agents with
        the app half idle).  Another thread of the app may still hold SQLite's lock past the busy
        timeout (a CPU-starved machine), which must not end the link.  None: stopped."""
        while not self._stop.is_set():
            try:
                with _write_lock(self.store_path):
                    return write(*args)
            except sqlite3.OperationalError as exc:
                if exc.sqlite_errorname != "SQLITE_BUSY":
                    raise
                self._set(warning=f"the app's store is busy ({exc}); trying again")
            time.sleep(self.poll)
        return None

    def _note_behind(self, entries: list[Entry]) -> None:
        newest = max((float(np.frombuffer(e.times, np.float64)[-1]) for e in entries
                      if e.kind == KIND_METRIC and e.n), default=None)
        if newest is not None:
            self._set(behind=max(0.0, time.time() - newest))

    def _update(self, now: float, heard: float, started: float, rate: deque, cursor: int) -> bool:
        """Recompute state and rate; True when the state changed."""
        silent = now - heard
        old = self.health().state
        if silent >= self.dead_after:
            state = "reconnecting"
        else:
            state = "connected" if heard > started else "connecting"
        span = min(RATE_WINDOW, max(now - started, 1e-3))
        self._set(state=state, silent=silent, cursor=cursor, points_per_s=sum(n for _, n in rate) / span)
        return state != old

    def _set(self, **changes: object) -> None:
        with self._lock:
            self._health = replace(self._health, **changes)


class Batch:
    """Pages a link has not written yet.  Each write costs about the same whatever it holds (the
    tiers fold every metric it touches at each of their levels), so pages that arrive close
    together are written as one: when the first has waited ``WRITE_S``, or WRITE_SHARE times as
    long as the last write took (a busy app writes less often, in larger batches), when a page
    comes empty (the agent has nothing more now) or the batch is large, and with the agent's run
    list once a second (one transaction, not two)."""

    def __init__(self, cursor: int):
        self.entries: list[Entry] = []
        self.cursor = cursor
        self.pending = False
        self.points = 0
        self.since = 0.0  # when the first unwritten page came
        self.wait = WRITE_S
        self.runs: list[dict] | None = None  # the agent's run list, written with the batch at once

    def add(self, page: Page, now: float) -> None:
        if page.entries or page.cursor > self.cursor:
            if not self.pending:
                self.pending, self.since = True, now
            self.entries += page.entries
            self.points += sum(e.n for e in page.entries)
            self.cursor = max(self.cursor, page.cursor)

    def due(self, now: float, more: bool) -> bool:
        return self.runs is not None or self.pending and (not more or now - self.since >= self.wait
                                                         or self.points >= MAX_PAGE_POINTS)

    def written(self, took: float) -> None:
        self.entries, self.pending, self.points, self.runs = [], False, 0, None
        self.wait = min(max(WRITE_S, WRITE_SHARE * took), MAX_WRITE_WAIT)


class Links:
    """The app's agents: remembered in the local store, one ``AgentLink`` each while started."""

    def __init__(self, store_path: str | Path | None = None, *, on_batch: BatchCallback | None = None,
                 on_health: HealthCallback | None = None, **link_options: float):
        self.store_path = store_path
        self.on_batch = on_batch
        self.on_health = on_health
        self.link_options = link_options
        self.store = LocalStore(store_path)  # this (the caller's) thread's connection
        self.links: dict[str, AgentLink] = {}
        self.started = False

    def agents(self) -> list[dict]:
        return self.store.agents()

    def add(self, url: str, name: str | None = None) -> AgentLink | None:
        """Remember an agent (validated URL) and follow it if the links are started."""
        url = check_url(url)
        self.store.add_agent(url, name)
        if self.started:
            return self._start(url)
        return None

    def remove(self, url: str, keep_data: bool = True) -> None:
        link = self.links.pop(url, None)
        if link is not None:
            link.stop()
        self.store.remove_agent(url, keep_data=keep_data)

    def start(self) -> None:
        self.started = True
        for agent in self.store.agents():
            self._start(agent["url"])

    def stop(self) -> None:
        """Stop every link; they wind down in parallel, so this takes one link's time."""
        self.started = False
        links, self.links = list(self.links.values()), {}
        for link in links:
            link.stop(wait=False)
        for link in links:
            link.stop()

    def health(self) -> list[Health]:
        return [link.health() for link in self.links.values()]

    def close(self) -> None:
        self.stop()
        self.store.close()

    def _start(self, url: str) -> AgentLink:
        link = self.links.get(url)
        if link is None:
            link = self.links[url] = AgentLink(url, self.store_path, on_batch=self.on_batch,
                                               on_health=self.on_health, **self.link_options)
            link.start()
        return link


_WRITE_LOCKS: dict[str, threading.Lock] = {}


def _write_lock(store_path: str | Path | None) -> threading.Lock:
    """The lock the links writing to one store file take turns on."""
    return _WRITE_LOCKS.setdefault(str(store_path), threading.Lock())


def joined(entries: list[Entry], cursor: int) -> list[Entry]:
    """A written batch as the UI takes it: each metric stream's chunks joined into one entry under its
    last id (the UI pays per entry: a batch of five pages is one chunk per metric, not five), in id
    order, so a floor that moves with each entry skips none.  Other kinds, and a packed entry's part
    (its id above the cursor), are passed as they are."""
    streams: dict[tuple[str, str, int], list[Entry]] = {}
    out: list[Entry] = []
    for e in entries:
        if e.kind == KIND_METRIC and e.id <= cursor:
            streams.setdefault((e.run, e.metric, e.rank), []).append(e)
        else:
            out.append(e)
    for chunks in streams.values():
        last = chunks[-1]
        out.append(last if len(chunks) == 1 else last._replace(
            n=sum(c.n for c in chunks), steps=b"".join(c.steps for c in chunks),
            vals=b"".join(c.vals for c in chunks), times=b"".join(c.times for c in chunks)))
    return sorted(out, key=lambda e: e.id)


def _index(store: LocalStore, due: bool) -> bool:
    """Index queued rollouts for up to INDEX_SECONDS, in short transactions, before the page's entries
    reach the UI (a live batch is searchable and its step listed when the panel hears of it); whether
    some are left for the next page.  A catch-up of millions indexes a slice per page."""
    deadline = time.monotonic() + INDEX_SECONDS
    while due and time.monotonic() < deadline:
        due = store.index_rollouts()
    return due
