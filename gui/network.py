"""Links to agents: one background thread (``link_hub``) owns every agent's sockets.

Why a thread: ZeroMQ sockets must stay on the thread that made them, and network I/O must never
run on the Qt thread; one for all agents, since a thread each made 64 agents fight the UI thread for
the GIL.  A link follows its agent's journal from the cursor kept in the local
store (history, then live), refreshes the run list about once a second, and hands both to the
store's one writing thread (``store_writer``), which writes them and then calls
``on_batch(url, entries, cursor, runs)`` on its own thread (``runs`` is None in a turn where the
run list was not refreshed); the Qt layer hands that to its thread through an ``Inbox``, which joins
a metric stream's chunks into one entry (``joined``) there, not on the busier writer's thread.
Everything is in the local store before the callback runs.

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

import math
import threading
from collections import deque
from collections.abc import Callable, Iterator
from concurrent.futures import Future
from dataclasses import dataclass, replace
from pathlib import Path

import zmq

from pilothouse.client import AgentError, Client, check_ping, check_runs
from pilothouse.security import SecurityError
from pilothouse.wire.entries import KIND_METRIC, Entry, Page
from pilothouse.wire.messages import MAX_PAGE_POINTS, ProtocolError
from pilothouse.wire.urls import check_url

from .link_hub import LinkHub
from .local_store import LocalStore
from .store_writer import StoreWriter, Write, join_writes

BatchCallback = Callable[[str, list[Entry], int, "list[dict] | None"], None]
HealthCallback = Callable[["Health"], None]

RATE_WINDOW = 5.0  # seconds over which points_per_s is averaged
HEALTH_EVERY = 0.1  # seconds between updates of a link's silence and rate (its state: at once)
STATE_EVERY = 5  # the agent's own state (a full disk, a damaged journal) is asked with every fifth run list: a
# second request per agent each second was a third of what 64 link threads did (bench_load.py --app)
RESEND = 0.01  # seconds between tries to send a query while the agent is not connected
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
    """Follows one agent; see the module docstring.  Its sockets live on the links' one thread
    (``link_hub``), which calls ``open``, ``step`` and ``close``; the store's writer calls ``written``,
    ``failed`` and ``busy``; the rest is for any thread."""

    def __init__(self, url: str, store_path: str | Path | None = None, *,
                 on_batch: BatchCallback | None = None, on_health: HealthCallback | None = None,
                 dead_after: float = 3.0, runs_every: float = 1.0, poll: float = 0.2):
        self.url = check_url(url)
        self.store_path = store_path
        self.on_batch = on_batch
        self.on_health = on_health
        self.dead_after = dead_after
        self.runs_every = runs_every
        self.poll = poll  # seconds between idle pages (and the run list's timeout, twice this)
        self._health = Health(self.url)
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._started = False
        self._ended = threading.Event()  # closed, its pages written: ``stop`` waits for this
        self._unwritten = 0  # points handed to the writer, not yet written (credit flow: ``reading``)
        self._error: Exception | None = None  # the writer could not write this link's pages
        self._lists = 0  # run lists answered: the agent's state is asked with every STATE_EVERY-th
        # the links' thread's own (``open`` on): the store, the sockets, what is under way
        self._writer: StoreWriter | None = None
        self._feed: Client | None = None
        self._ask: Client | None = None
        self._opening: Future | None = None  # the store reading the cursor to start from
        self._pages: Iterator[Page] | None = None  # ``Client.follow`` from that cursor
        self._adopting: Future | None = None  # the store moving an old journal's rows aside
        self._held: Page | None = None  # the page of a new journal, until then
        self._asking: tuple[str, int | None, float] | None = None  # (op, request id, sent)
        self._journal: str | None = None  # checked on every page: no entry of a new journal lands under the old
        self._cursor = 0
        self._heard = self._began = 0.0  # when the agent was last heard, when the link opened
        self._next_page = self._next_runs = self._reported = self._updated = 0.0
        self._state = self._health.state
        self._rate: deque[tuple[float, int]] = deque()
        self._in_window = 0  # the points in ``_rate``: summed as they come and go

    def start(self) -> None:
        if not self._started:
            self._started = True
            LinkHub.add(self)

    def stop(self, wait: bool = True) -> None:
        """Ask the link to end; with ``wait``, until its pages are written (well under a second)."""
        self._stop.set()
        LinkHub.wake()
        if wait and self._started:
            self._ended.wait(self.poll * 5 + 1.0)

    def running(self) -> bool:
        """Started and not ended (stopped, or ended by an error its health says)."""
        return self._started and not self._ended.is_set()

    def health(self) -> Health:
        with self._lock:
            return self._health

    # --- on the links' thread (``link_hub``) ----------------------------------------------------

    def open(self, now: float) -> None:
        self._writer = StoreWriter.acquire(self.store_path)
        self._feed = Client(self.url)  # own socket: an answer would be taken for stream data
        self._ask = Client(self.url, timeout=self.poll * 2)
        url = self.url
        self._opening = self._writer.submit(lambda store: store.cursor(url))
        self._opening.add_done_callback(_wake)
        self._heard = self._began = now

    def sockets(self) -> list[zmq.Socket]:
        """What the link waits on now: the feed while it reads, the query socket while a query waits."""
        out = [self._feed.socket] if self._pages is not None and self._reading() else []
        if self._asking is not None and self._asking[1] is not None:
            out.append(self._ask.socket)
        return out

    def due(self, now: float) -> float:
        """When the link has something to do whatever its sockets say (what the store answers wakes the
        hub itself: ``_wake``)."""
        due = math.inf
        if self._asking is not None:  # its answer's deadline, or another try to send it (not connected yet)
            due = self._asking[2] + self._ask.timeout if self._asking[1] is not None else now + RESEND
        elif self._pages is not None:
            due = self._next_runs
        if self._pages is not None and self._adopting is None and self._reading():
            due = min(due, self._next_page)
        return due

    def step(self, now: float) -> None:
        """Whatever is ready: an answer, the store's, a page; a run list asked when due; the health."""
        if self._error is not None:
            raise self._error
        if self._asking is not None:
            self._take_answer(now)
        if self._pages is None:
            if not self._opening.done():
                return
            self._cursor = self._opening.result()
            self._pages = self._feed.follow(after=self._cursor, idle=0)
        if self._adopting is not None:
            if self._adopting.done():
                self._adopted(now)
        elif self._reading() and (now >= self._next_page or self._feed.socket.poll(0, zmq.POLLIN)):
            self._next_page = now + self.poll
            self._take(next(self._pages), now)
        if self._asking is None and now >= self._next_runs:
            self._send("runs", now)
        changed = self._update(now)
        if self.on_health is not None and (changed or now - self._reported >= 1.0):
            self._reported = now
            self.on_health(self.health())

    def broke(self, exc: Exception) -> None:
        self._set(error=str(exc) if self.quiet(exc) else f"{type(exc).__name__}: {exc}")

    @staticmethod
    def quiet(exc: Exception) -> bool:
        """An error the health says all of: no key for this agent, or an exposed one (what to run)."""
        return isinstance(exc, SecurityError)

    def close(self) -> None:
        """Its sockets closed here; it ends once its pages queued are written (or failed)."""
        for part in (self._pages, self._feed, self._ask):
            if part is not None:
                part.close()
        writer = self._writer
        if writer is None:
            self._end()
            return
        writer.submit(lambda store: None).add_done_callback(lambda _: (writer.release(), self._end()))

    def _end(self) -> None:
        self._set(state="stopped")
        if self.on_health is not None:
            self.on_health(self.health())
        self._ended.set()

    def _reading(self) -> bool:
        """Credit flow: while MAX_UNWRITTEN of its points wait for the writer the link reads no page (the
        agent holds the rest), so a slow store never piles pages up in memory."""
        return self._unwritten < MAX_UNWRITTEN

    def _take(self, page: Page, now: float) -> None:
        if page.journal is not None and page.journal != self._journal:
            self._journal = journal = page.journal
            url = self.url
            # after this link's queued pages: the old journal's are written before it is moved aside
            self._held, self._adopting = page, self._writer.submit(lambda store: store.adopt_journal(url, journal))
            self._adopting.add_done_callback(_wake)
            return
        if page.entries or page.cursor > self._cursor:
            self._cursor = max(self._cursor, page.cursor)
            self._queue(Write(self.url, page.entries, self._cursor, None, self))
        if page.entries:
            self._heard = now
            self._rate.append((now, sum(e.n for e in page.entries if e.kind == KIND_METRIC)))
            self._in_window += self._rate[-1][1]

    def _adopted(self, now: float) -> None:
        wiped, page = self._adopting.result(), self._held
        self._adopting = self._held = None
        if wiped:  # a wiped or restarted agent: read from 0
            self._pages.close()
            self._cursor = 0
            self._pages = self._feed.follow(after=0, idle=0)
        else:
            self._take(page, now)

    def _queue(self, job: Write) -> None:
        """Hand a page (or a run list) to the writer."""
        points = sum(e.n for e in job.entries)
        with self._lock:
            self._unwritten += points
        self._writer.write(job)

    def _send(self, op: str, now: float) -> None:
        self._asking = (op, self._ask.send(op), now)

    def _take_answer(self, now: float) -> None:
        """The answer to the query asked, if it came; a query not sent yet (not connected) is sent."""
        op, req, sent = self._asking
        try:
            if req is None:
                req = self._ask.send(op)
                self._asking = (op, req, sent)
            if req is not None:
                done, data = self._ask.answer(req)
                if done:
                    self._asking = None
                    self._answered(op, data, sent, now)
                    return
            if now - sent > self._ask.timeout or self._ask.refused():
                raise self._ask.unavailable()
        except (AgentError, ProtocolError) as exc:  # no answer, a refused key, garbage: shown, asked again
            self._asking = None
            if op == "runs":
                self._set(error=str(exc))
                self._next_runs = now + self.runs_every
            else:
                self._set(warning=f"no state from the agent: {exc}")

    def _answered(self, op: str, data: object, sent: float, now: float) -> None:
        if op == "ping":
            state = check_ping(data)
            self._set(warning=str(state.get("disk_full") or state.get("damaged") or ""))
            return
        runs = check_runs(data)
        self._set(lag=now - sent, error="")
        self._heard = now
        self._next_runs = now + self.runs_every
        self._queue(Write(self.url, [], self._cursor, runs, self))  # written with the pages queued
        if self._lists % STATE_EVERY == 0:
            self._send("ping", now)
        self._lists += 1

    def _update(self, now: float) -> bool:
        """Recompute state and rate (the health itself at most every HEALTH_EVERY, or when the state
        changes: a page at a time, its copy cost the links' thread); True when the state changed."""
        while self._rate and self._rate[0][0] < now - RATE_WINDOW:
            self._in_window -= self._rate.popleft()[1]
        silent = now - self._heard
        if silent >= self.dead_after:
            state = "reconnecting"
        else:
            state = "connected" if self._heard > self._began else "connecting"
        changed = state != self._state
        if changed or now - self._updated >= HEALTH_EVERY:
            self._state, self._updated = state, now
            span = min(RATE_WINDOW, max(now - self._began, 1e-3))
            self._set(state=state, silent=silent, points_per_s=self._in_window / span)
        return changed

    # --- called on the writer's thread (``store_writer.Writer``) ---------------------------------

    def written(self, entries: list[Entry], cursor: int, runs: list[dict] | None) -> None:
        with self._lock:
            blocked = not self._reading()
            self._unwritten -= sum(e.n for e in entries)
        if blocked and self._reading():
            LinkHub.wake()
        self._set(cursor=cursor)
        if self.on_batch is not None and (entries or runs is not None):
            self.on_batch(self.url, entries, cursor, runs)

    def failed(self, error: Exception) -> None:
        self._error = error  # the link ends with it, as if it had written the page itself
        LinkHub.wake()

    def busy(self, message: str) -> None:
        self._set(warning=message)

    def stopped(self) -> bool:
        """Asked to stop (the writer skips its pages; the hub closes it)."""
        return self._stop.is_set()

    def _set(self, **changes: object) -> None:
        with self._lock:
            self._health = replace(self._health, **changes)


def _wake(_: Future) -> None:
    """The store answered a link (its cursor, a journal adopted): its step can go on."""
    LinkHub.wake()


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


class Inbox:
    """Batches from the store's writer, held per agent until the UI thread takes them all at once.

    Why: the UI pays per batch and per entry (the run rows, a timeline lookup and a curve's append per
    metric chunk), and a batch a write for each agent reached it up to 50 times a second with a point or
    two per stream.  A signal per batch queued them one by one behind a busy UI thread, which then paid
    for each as if it were on time.  Here a batch joins what waits of its agent (``join_writes``, as the
    writer joins one write's pages; a stream's chunks become one entry when taken: ``joined``; the newest
    run list wins), and the UI is signalled only when the inbox was empty: the further behind the UI
    thread is, the more each take holds and the less it pays per point, so it catches up."""

    def __init__(self, notify: Callable[[], None]) -> None:
        self.notify = notify
        self._lock = threading.Lock()
        self._waiting: list[Write] = []

    def put(self, url: str, entries: list[Entry], cursor: int, runs: list[dict] | None) -> None:
        """A written batch, entries as the agent sent them (a ``BatchCallback``; on the writer's thread)."""
        with self._lock:
            first = not self._waiting
            self._waiting.append(Write(url, entries, cursor, runs, None))
        if first:
            self.notify()

    def take(self) -> list[tuple[str, list[Entry], list[dict] | None]]:
        """Everything waiting, per agent in the order they first had a batch: (url, entries, runs)."""
        with self._lock:
            waiting, self._waiting = self._waiting, []
        return [(w.url, joined(w.entries, w.cursor), w.runs) for w in join_writes(waiting)]


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
