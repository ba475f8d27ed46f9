"""Links to agents: one background thread per agent owns its sockets.

Why threads: ZeroMQ sockets must stay on the thread that made them, and network I/O must never
run on the Qt thread.  A link follows its agent's journal from the cursor kept in the local
store (history, then live), refreshes the run list about once a second, and hands both to the
store's one writing thread (``store_writer``), which writes them and then calls
``on_batch(url, entries, runs)`` on its own thread (``runs`` is None in a turn where the run
list was not refreshed; a metric stream's chunks of a write come joined into one: ``joined``);
the Qt layer turns that callback into a signal.  Everything is in the local store before the
callback runs.

Health (``Health``):

- ``state``: ``connecting`` (no answer yet), ``connected``, ``reconnecting`` (nothing heard,
  neither a page nor a run-list answer, for ``dead_after`` seconds), ``stopped``.
- ``lag``: seconds from sending the last run-list request to its answer: the round trip
  through the network and the agent's loop, free of clock skew and of whether a trainer is
  logging.  (How far the points shown trail the trainer is measured where they are shown, on
  the UI thread: ``pilothouse.gui.health_text``.)
- ``points_per_s``: metric points received per second over the last few seconds.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path

from pilothouse.client import AgentError, Client
from pilothouse.security import SecurityError
from pilothouse.wire.entries import KIND_METRIC, Entry
from pilothouse.wire.messages import MAX_PAGE_POINTS, ProtocolError
from pilothouse.wire.urls import check_url

from .local_store import LocalStore
from .store_writer import StoreWriter, Write

BatchCallback = Callable[[str, list[Entry], "list[dict] | None"], None]
HealthCallback = Callable[["Health"], None]

RATE_WINDOW = 5.0  # seconds over which points_per_s is averaged
STATE_EVERY = 5  # the agent's own state (a full disk, a damaged journal) is asked with every fifth run list: a
# second request per agent each second was a third of what 64 link threads did (bench_load.py --app)
MAX_UNWRITTEN = 2 * MAX_PAGE_POINTS  # points a link hands the writer before it waits for them to be written


@dataclass(frozen=True)
class Health:
    url: str
    state: str = "connecting"
    lag: float | None = None
    points_per_s: float = 0.0
    silent: float = 0.0  # seconds since anything was heard from the agent
    cursor: int = 0
    error: str = ""
    warning: str = ""  # what the agent says is wrong on its side (a full disk, a damaged journal), asked every
    # STATE_EVERY-th run list


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
        self._written = threading.Condition()  # the writer took this link's pages off its hands
        self._unwritten = 0  # points handed to the writer, not yet written
        self._error: Exception | None = None  # the writer could not write this link's pages
        self._lists = 0  # run lists answered: the agent's state is asked with every STATE_EVERY-th

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
        writer = StoreWriter.acquire(self.store_path)
        try:
            with contextlib.ExitStack() as stack:
                feed = stack.enter_context(Client(self.url))  # own socket: request() would eat stream data
                ask = stack.enter_context(Client(self.url, timeout=self.poll * 2))
                self._follow(writer, feed, ask)
        except SecurityError as exc:  # no key for this agent, or an exposed one: the health says what to run
            self._set(error=str(exc))
        except Exception as exc:  # a bug or a broken store: say so in the health, never die silently
            self._set(error=f"{type(exc).__name__}: {exc}")
            raise
        finally:
            with contextlib.suppress(Exception):  # a broken store said so already
                writer.call(lambda store: None)  # this link's pages written (or failed) before it ends
            writer.release()
            self._set(state="stopped")
            if self.on_health is not None:
                self.on_health(self.health())

    def _follow(self, writer: StoreWriter, feed: Client, ask: Client) -> None:
        url = self.url
        cursor = writer.call(lambda store: store.cursor(url))
        journal: str | None = None  # checked on every page: no entry of a new journal lands under the old one
        heard = started = time.monotonic()
        next_runs = reported = 0.0
        rate: deque[tuple[float, int]] = deque()
        in_window = 0  # the points in ``rate``: summed as they come and go (a sum per page cost the link's thread)
        pages = feed.follow(after=cursor, idle=self.poll)
        try:
            while not self._stop.is_set() and self._error is None:
                page = next(pages)
                now = time.monotonic()
                if page.journal is not None and page.journal != journal:
                    journal = page.journal
                    # after this link's queued pages: the old journal's are written before it is moved aside
                    if writer.call(lambda store: store.adopt_journal(url, journal)):  # wiped, restarted: from 0
                        pages.close()
                        cursor = 0
                        pages = feed.follow(after=0, idle=self.poll)
                        continue
                runs = None
                if now >= next_runs:
                    runs, heard = self._refresh_runs(ask, heard)  # written with the page, at once
                    next_runs = time.monotonic() + self.runs_every
                if page.entries or page.cursor > cursor or runs is not None:
                    cursor = max(cursor, page.cursor)
                    self._queue(writer, Write(url, page.entries, cursor, runs, self))
                if page.entries:
                    heard = now
                    rate.append((now, sum(e.n for e in page.entries if e.kind == KIND_METRIC)))
                    in_window += rate[-1][1]
                while rate and rate[0][0] < now - RATE_WINDOW:
                    in_window -= rate.popleft()[1]
                changed = self._update(now, heard, started, in_window)
                if self.on_health is not None and (changed or now - reported >= 1.0):
                    reported = now
                    self.on_health(self.health())
            if self._error is not None:
                raise self._error
        finally:
            pages.close()

    def _queue(self, writer: StoreWriter, job: Write) -> None:
        """Hand a page to the writer; wait while this link has MAX_UNWRITTEN points there (the agent
        holds the rest: credit flow), so a slow store never piles pages up in memory."""
        points = sum(e.n for e in job.entries)
        with self._written:
            while self._unwritten >= MAX_UNWRITTEN and not self._stop.is_set() and self._error is None:
                self._written.wait(self.poll)
            self._unwritten += points
        writer.write(job)

    # --- called on the writer's thread (``store_writer.Writer``) ---------------------------------

    def written(self, entries: list[Entry], cursor: int, runs: list[dict] | None) -> None:
        with self._written:
            self._unwritten -= sum(e.n for e in entries)
            self._written.notify()
        self._set(cursor=cursor)
        if self.on_batch is not None and (entries or runs is not None):
            self.on_batch(self.url, joined(entries, cursor), runs)

    def failed(self, error: Exception) -> None:
        with self._written:
            self._error = error  # the link ends with it, as if it had written the page itself
            self._written.notify()

    def busy(self, message: str) -> None:
        self._set(warning=message)

    def stopped(self) -> bool:
        return self._stop.is_set()

    def _refresh_runs(self, ask: Client, heard: float) -> tuple[list[dict] | None, float]:
        """The agent's run list (None: no answer), and when it was heard."""
        sent = time.monotonic()
        try:
            runs = ask.runs()
        except (AgentError, ProtocolError) as exc:  # no answer, a refused key, garbage: shown, tried again
            self._set(error=str(exc))
            return None, heard
        answered = time.monotonic()
        self._set(lag=answered - sent, error="")
        if self._lists % STATE_EVERY == 0:
            try:
                state = ask.ping()
                warning = state.get("disk_full") or state.get("damaged") or ""
            except (AgentError, ProtocolError) as exc:
                warning = f"no state from the agent: {exc}"
            self._set(warning=str(warning))
        self._lists += 1
        return runs, answered

    def _update(self, now: float, heard: float, started: float, points: int) -> bool:
        """Recompute state and rate; True when the state changed."""
        silent = now - heard
        old = self.health().state
        if silent >= self.dead_after:
            state = "reconnecting"
        else:
            state = "connected" if heard > started else "connecting"
        span = min(RATE_WINDOW, max(now - started, 1e-3))
        self._set(state=state, silent=silent, points_per_s=points / span)
        return state != old

    def _set(self, **changes: object) -> None:
        with self._lock:
            self._health = replace(self._health, **changes)


class Links:
    """The app's agents: remembered in the local store, one ``AgentLink`` each while started.  An agent
    added with ``remember=False`` (one of the user's running local agents, ``pilothouse.local_agents``)
    is followed for this session only: a demo's agent on a random port, once ended, must not be
    chased as a dead agent by every later start of the app.  Its runs stay in the store either way."""

    def __init__(self, store_path: str | Path | None = None, *, on_batch: BatchCallback | None = None,
                 on_health: HealthCallback | None = None, **link_options: float):
        self.store_path = store_path
        self.on_batch = on_batch
        self.on_health = on_health
        self.link_options = link_options
        self.store = LocalStore(store_path)  # this (the caller's) thread's connection
        self.links: dict[str, AgentLink] = {}
        self.session: list[str] = []  # followed, not remembered (``add(remember=False)``), in the order added
        self.started = False

    def agents(self) -> list[dict]:
        """The agents followed: the remembered ones (url, name, added, cursor), then this session's."""
        remembered = self.store.agents()
        known = {a["url"] for a in remembered}
        return remembered + [{"url": u, "name": None, "added": None, "cursor": None}
                             for u in self.session if u not in known]

    def remembered(self, url: str) -> bool:
        return any(a["url"] == url for a in self.store.agents())

    def add(self, url: str, name: str | None = None, remember: bool = True) -> AgentLink | None:
        """Follow an agent (validated URL) once the links are started; remember it in the store
        (followed by every later start) unless ``remember`` is False."""
        url = check_url(url)
        if remember:
            self.store.add_agent(url, name)
            if url in self.session:
                self.session.remove(url)
        elif url not in self.session and not self.remembered(url):
            self.session.append(url)
        if self.started:
            return self._start(url)
        return None

    def remove(self, url: str, keep_data: bool = True) -> None:
        if url in self.session:
            self.session.remove(url)
        link = self.links.pop(url, None)
        if link is not None:
            link.stop()
            StoreWriter.settle(self.store_path)  # its pages in a write under way land before its data goes
        self.store.remove_agent(url, keep_data=keep_data)

    def start(self) -> None:
        self.started = True
        for agent in self.agents():
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
