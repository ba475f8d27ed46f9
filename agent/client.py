"""The reader's side of the protocol, used by the CLI and the desktop app.

A ``Client`` owns one DEALER socket and must stay on the thread that created it
(the app runs it on its network thread).  ``follow`` reads the journal by cursor with
credit-based flow control and survives agent restarts: it re-subscribes from the last
cursor it processed and drops anything at or below it, so nothing is missed or doubled.
"""

from __future__ import annotations

import getpass
import itertools
import socket
import time
import uuid
from collections.abc import Iterable, Iterator, Sequence
from typing import Any
from urllib.parse import urlsplit

import numpy as np
import zmq
import zmq.utils.monitor

from pilothouse.security import HANDSHAKE_FAILED, Keyring, SecurityError, client_keys
from pilothouse.store.tiers import RECORD, level_for
from pilothouse.wire.checks import INT64_MAX
from pilothouse.wire.entries import KIND_METRIC, KIND_ROLLOUTS, Entry, Page, check_page, join_chunks
from pilothouse.wire.messages import (
    ACK_STATES,
    MAX_MESSAGE_BYTES,
    MAX_PAGE_POINTS,
    MAX_TIER_METRICS,
    ProtocolError,
    message,
    pack,
    unpack,
)
from pilothouse.wire.records import check_rollouts
from pilothouse.wire.rollouts import MAX_SEARCH_HITS, unpack_batch
from pilothouse.wire.urls import DEFAULT_URL, ENV_AGENT, check_url

MAX_GATHER = 64  # messages ``follow`` takes from its queue into one page at most (an agent's most credit)
RETURN_SECONDS = 1.0  # a follower's owed credit goes back this long after its last return at most (``_Owed``)


class AgentError(RuntimeError):
    """The agent answered with an error."""


class AgentUnavailable(AgentError):
    """No answer from the agent within the timeout; ``refused``: it (or what listens there) turned
    this client away, so asking again will not help."""

    def __init__(self, text: str, refused: bool = False):
        super().__init__(text)
        self.refused = refused


HOLD = 20.0  # seconds one command request lets the agent hold its answer; longer waits ask again

# what a call through a Client can raise short of a bug: the agent's refusal or silence, a
# garbled answer, keys that are missing or exposed; callers on worker threads catch these
CALL_ERRORS = (AgentError, ProtocolError, SecurityError)


class Client:
    """Talks CURVE to every agent (see ``pilothouse.security``): with the key pinned for the URL, or on
    loopback with the owner's local keys; refuses a network URL it holds no agent key for."""

    def __init__(self, url: str | None = None, timeout: float = 5.0, context: zmq.Context | None = None,
                 keys: Keyring | None = None):
        self.url = check_url(url or DEFAULT_URL)
        self.timeout = timeout
        self._curve = client_keys(self.url, keys)
        self._ctx = context or zmq.Context.instance()
        self._ids = itertools.count(1)
        self._sock: zmq.Socket | None = None
        self._monitor: zmq.Socket | None = None
        self._failed: set[int] = set()

    def _socket(self) -> zmq.Socket:
        if self._sock is None:
            sock = self._ctx.socket(zmq.DEALER)
            sock.setsockopt(zmq.LINGER, 0)
            sock.setsockopt(zmq.IMMEDIATE, 1)
            sock.setsockopt(zmq.IPV6, 1)
            sock.setsockopt(zmq.MAXMSGSIZE, MAX_MESSAGE_BYTES)  # a broken agent cannot make us buffer more
            self._curve.secure(sock)
            self._monitor = sock.get_monitor_socket(HANDSHAKE_FAILED)
            sock.connect(self.url)
            self._sock = sock
        return self._sock

    def _reset(self) -> None:
        """Lazy-Pirate style: after a lost answer, a fresh socket drops whatever was queued."""
        if self._sock is not None:
            if self._monitor is not None:
                self._sock.disable_monitor()
                self._monitor.close(linger=0)
                self._monitor = None
            self._sock.close(linger=0)
            self._sock = None
        self._failed = set()

    def _handshakes(self) -> set[int]:
        """The failed-handshake events seen on this socket so far."""
        while self._monitor is not None and self._monitor.poll(0):
            self._failed.add(zmq.utils.monitor.parse_monitor_message(self._monitor.recv_multipart())["event"])
        return self._failed

    def unavailable(self) -> AgentUnavailable:
        """Why no answer came: a refused or failed CURVE handshake says so, a program that is not ZeroMQ
        holding the port too (else "start one" sends the user to an agent that cannot bind it);
        anything else is silence.  The next call starts on a fresh socket."""
        events = set(self._handshakes())
        self._reset()
        if zmq.EVENT_HANDSHAKE_FAILED_AUTH in events:
            return AgentUnavailable(self._curve.refused(self.url), refused=True)
        if events:
            return AgentUnavailable(self._curve.failed(self.url), refused=True)
        if self.url.startswith("tcp://") and _squatted(self.url):
            return AgentUnavailable(f"something else, not a pilothouse agent, listens at {self.url} (it does not "
                                    f"speak ZeroMQ): another program holds port {urlsplit(self.url).port}; run the "
                                    f"agent on another port (`pilothouse agent --bind tcp://127.0.0.1:PORT`) and "
                                    f"point clients at it (`--agent tcp://127.0.0.1:PORT`, or ${ENV_AGENT})",
                                    refused=True)
        return AgentUnavailable(f"no answer from the agent at {self.url} within {self.timeout:g} s "
                                f"(start one with `pilothouse agent`)")

    def close(self) -> None:
        self._reset()

    def __enter__(self) -> "Client":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # --- request / reply -------------------------------------------------------------------

    def request(self, op: str, *, held: float = 0.0, **args: Any) -> Any:
        """One query and its answer; ``held``: seconds the agent may hold the answer on purpose,
        added to the timeout."""
        deadline = time.monotonic() + self.timeout + held
        req_id = None
        while True:
            left = deadline - time.monotonic()
            if left <= 0 or self.refused():  # a refused key: said at once
                raise self.unavailable()
            if req_id is None:
                req_id = self.send(op, **args)
                if req_id is None:  # not connected yet
                    time.sleep(min(0.01, left))
                    continue
            if self._socket().poll(int(min(left, 0.1) * 1000) + 1, zmq.POLLIN):
                done, data = self.answer(req_id)
                if done:
                    return data

    # the two halves of ``request`` for a caller that waits on many sockets at once (``zmq.select`` on
    # ``socket``; the app's links): neither blocks

    @property
    def socket(self) -> zmq.Socket:
        """The socket answers come on (made on first use; a fresh one after ``unavailable``)."""
        return self._socket()

    def send(self, op: str, **args: Any) -> int | None:
        """Send a query; its id, or None when the socket is not connected yet (send it again later)."""
        req_id = next(self._ids)
        try:
            self._socket().send(pack(message("q", id=req_id, op=op, args=args)), zmq.NOBLOCK)
        except zmq.Again:
            return None
        return req_id

    def answer(self, req_id: int) -> tuple[bool, Any]:
        """Take the messages waiting on the socket until the answer to ``req_id``: (True, its data),
        or (False, None) when it has not come yet; an error the agent sent for it is raised."""
        sock = self._socket()
        while sock.poll(0, zmq.POLLIN):
            msg = _decode(sock.recv())
            if msg.get("t") == "err" and msg.get("id") in (req_id, None):
                text = msg.get("msg")
                raise AgentError(text[:2000] if isinstance(text, str) else "the agent sent a malformed error")
            if msg.get("t") == "r" and msg.get("id") == req_id:
                return True, msg.get("data")
        return False, None

    def refused(self) -> bool:
        """Whether the agent turned this client's key away (its CURVE handshake failed on authentication)."""
        return zmq.EVENT_HANDSHAKE_FAILED_AUTH in self._handshakes()

    def ping(self) -> dict:
        return check_ping(self.request("ping"))

    def runs(self) -> list[dict]:
        return check_runs(self.request("runs"))

    def resolve(self, ref: str) -> str:
        return self.request("resolve", ref=ref)

    def read(self, after: int = 0, run: str | None = None, kinds: Iterable[str] | None = None,
             limit_points: int | None = None) -> Page:
        args: dict[str, Any] = {"after": after, "run": run, "kinds": list(kinds or [])}
        if limit_points is not None:
            args["limit_points"] = limit_points
        data = self.request("read", **args)
        if not isinstance(data, dict):
            raise ProtocolError("the agent's read answer is malformed")
        return check_page(data.get("entries"), data.get("cursor"))

    def tiers(self, run: str, metrics: Sequence[str], x0: float, x1: float, pixels: int = 1000,
              level: int | None = None, by_column: bool = False) -> dict[str, np.ndarray] | None:
        """Per metric of ``metrics``, the buckets of its tiers over steps x0..x1
        (``pilothouse.store.tiers.RECORD``), at ``level`` or at the one that gives ``pixels`` columns at
        least two buckets each; with ``by_column``, folded per pixel column by the agent
        (``pilothouse.store.tiers.columns``: bucket is the column).  Asked MAX_TIER_METRICS metrics a
        request (every chart of a run in one round trip).  None while the agent is still building
        the run's tiers (read its points instead)."""
        if isinstance(metrics, str):
            raise TypeError("metrics is a list of metric names, not one name")
        if level is None:
            level = max(level_for(x0, x1, pixels), 0)
        names = list(dict.fromkeys(metrics))
        got: dict[str, np.ndarray] = {}
        for at in range(0, len(names), MAX_TIER_METRICS):
            part = names[at:at + MAX_TIER_METRICS]
            data = self.request("tiers", run=run, metrics=part, level=level, x0=x0, x1=x1,
                                **({"pixels": pixels} if by_column else {}))
            if not isinstance(data, dict) or not isinstance(data.get("ready"), bool):
                raise ProtocolError("the agent's tiers answer is malformed")
            if not data["ready"]:
                return None
            if data.get("fields") != list(RECORD.names):  # an agent of another version: its records differ
                raise ProtocolError(f"the agent's tiers hold the fields {data.get('fields')}, this reader reads "
                                    f"{list(RECORD.names)}: run the same pilothouse version on both sides")
            blobs = data.get("records")
            if data.get("level") != level or not isinstance(blobs, list) or len(blobs) != len(part) or any(
                    not isinstance(b, bytes) or len(b) % RECORD.itemsize for b in blobs):
                raise ProtocolError("the agent's tiers answer is malformed")
            got.update(zip(part, (np.frombuffer(b, RECORD) for b in blobs)))
        return got

    def history(self, run: str | None = None, kinds: Iterable[str] | None = None,
                after: int = 0) -> Iterator[Page]:
        """Every stored entry (of a run, of some kinds), page by page, until the current head."""
        kinds = list(kinds or [])
        while True:
            page = self.read(after, run, kinds)
            if page.entries:
                yield page
            if page.cursor == after or not page.entries:
                return
            after = page.cursor

    def series(self, run: str, metric: str) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        rows = [(e.steps, e.vals, e.times) for page in self.history(run, [KIND_METRIC])
                for e in page.entries if e.metric == metric]
        return join_chunks(rows)

    def rollouts(self, run: str, step: int | None = None, last: int = 1) -> list[dict]:
        """A run's rollouts ``{"step", "time", "rows"}`` per step, oldest step first: of ``step``, or of
        the ``last`` steps logged latest.  A step's batches (several calls or ranks) are joined in
        arrival order, ``time`` the latest's.  The agent reads from the run's end, not its start, in
        pages of bounded size; a step with none is an AgentError naming the nearest that have some."""
        args: dict[str, Any] = {"run": run, "step": step} if step is not None else {"run": run, "last": last}
        entries: list[Entry] = []
        ceiling = INT64_MAX  # each page lies below the last: a broken agent cannot make this loop forever
        while True:
            data = self.request("rollouts", **args)
            more = data.get("next") if isinstance(data, dict) else None
            page = check_page(data.get("entries") if isinstance(data, dict) else None, ceiling)
            if not all(e.kind == KIND_ROLLOUTS and e.run == run for e in page.entries):
                raise ProtocolError("the agent's rollouts answer holds entries of another kind or run")
            entries.extend(page.entries)
            if more is None:
                break
            ceiling = min((e.id for e in page.entries), default=0) - 1
            if not isinstance(more, dict) or more.get("before") != ceiling + 1 or ceiling < 1:
                raise ProtocolError("the agent's rollouts answer goes on from where it did not stop")
            args = {**more, "run": run}
        steps: dict[int, dict] = {}
        for e in sorted(entries, key=lambda e: e.id):
            body = unpack_batch(e.body)
            batch = steps.setdefault(body["step"], {"step": body["step"], "time": body["time"], "rows": []})
            batch["time"] = max(batch["time"], body["time"])
            batch["rows"].extend(body["rows"])
        return [steps[s] for s in sorted(steps)]

    def search_rollouts(self, run: str, words: str, limit: int = 100,
                        in_prompt: bool = False) -> tuple[list[dict], bool]:
        """Up to ``limit`` rows of ``run`` whose prompt or completion (``in_prompt``: prompt; of a chat,
        any message, tool call or tool result) holds ``words`` (every word; a ``"quoted phrase"`` as one;
        ``word*`` a prefix), newest first, each ``{"step", "row", "rollout"}``
        (``row``: its place in the step's batch); and whether the agent still had batches to index (not
        searched yet).  Pages until ``limit``; words it cannot search are an AgentError."""
        hits: list[dict] = []
        indexing = False
        args: dict[str, Any] = {"run": run, "search": words, **({"in_prompt": True} if in_prompt else {})}
        ceiling = INT64_MAX  # each page lies below the last: a broken agent cannot make this loop forever
        while len(hits) < limit:
            data = self.request("rollouts", **args, limit=min(limit - len(hits), MAX_SEARCH_HITS))
            page = data.get("hits") if isinstance(data, dict) else None
            more = data.get("next") if isinstance(data, dict) else None
            if not isinstance(page, list) or not all(_hit(h) for h in page) or not (
                    more is None or type(more) is int and 0 < more < ceiling):
                raise ProtocolError("the agent's rollout search answer is malformed")
            hits.extend({"step": h[0], "row": h[1], "rollout": h[3]} for h in page)
            indexing = data.get("indexing") is True
            if more is None or not page:
                break
            ceiling = more
            args["before"] = more
        return hits, indexing

    def command(self, run: str, cmd: str, values: dict[str, Any] | None = None, at_step: int | None = None,
                wait: float = 30.0, who: dict[str, str] | None = None) -> dict:
        """Send a command and wait up to ``wait`` s for the trainer's answer.

        Returns the command's record; ``state`` is applied, rejected, scheduled, or
        timeout (the command stays queued and applies at the trainer's next sync).
        One id per call: retrying after a lost answer can never apply it twice."""
        cid = uuid.uuid4().hex[:20]
        args = {"cid": cid, "run": run, "cmd": cmd, "values": values, "at_step": at_step,
                "who": claimed_sender(who)}
        deadline = time.monotonic() + wait
        row: dict | None = None
        silence: AgentUnavailable | str = f"no answer from the agent at {self.url} within {wait:g} s"
        while (left := deadline - time.monotonic()) > 0:
            hold = min(left, HOLD)  # the agent answers when the trainer's ack commits, or after this
            try:
                row = (self.request("command", held=hold, wait=hold, **args) if row is None
                       else self.request("command_status", held=hold, wait=hold, cid=cid))
            except AgentUnavailable as exc:
                if exc.refused:
                    raise
                silence = exc
                continue  # the agent restarts or is busy: ask again with the same id
            if row["state"] in ACK_STATES:  # the trainer answered (or the agent refused)
                return row
        if row is None:  # the agent never answered: nothing says the command is queued anywhere
            raise AgentUnavailable(f"{silence}; command {cid} may not have reached it")
        return {**row, "state": "timeout"}

    # --- retention --------------------------------------------------------------------------

    def remove(self, runs: list[str], force: bool = False, plan: bool = False) -> list[dict]:
        """Remove runs (ids or names), all or none: ``{"id", "project", "name", "status", "points",
        "bytes", ...}`` each.  The agent hides them at once and deletes their rows in the background;
        it refuses a live run unless ``force``.  ``plan``: only say what would go."""
        return self.request("remove", runs=runs, force=force, plan=plan, who=claimed_sender())

    def gc_plan(self, older_than: float | None = None, max_size: int | None = None) -> dict:
        """Which ended runs a gc would remove (``runs``), and the journal's data now and after
        (``total``, ``left``, bytes).  Changes nothing: pass the ids to ``remove``."""
        return self.request("gc", older_than=older_than, max_size=max_size)

    # --- alerts -----------------------------------------------------------------------------

    def alerts(self) -> dict:
        """``{"rules": [...], "firing": [...], "recent": [...]}`` across this agent's runs."""
        data = self.request("alerts")
        if not isinstance(data, dict) or not all(isinstance(data.get(k), list) for k in ("rules", "firing", "recent")):
            raise ProtocolError("the agent's alert list is malformed")
        return data

    def add_alert(self, rule: dict, run: str | None = None) -> dict:
        """Add (or replace, by name) a rule for every run, or for one run; returns the stored rule."""
        return self.request("alert_add", rule=rule, run=run)

    def remove_alert(self, name: str, run: str | None = None) -> dict:
        return self.request("alert_rm", name=name, run=run)

    # --- streaming -------------------------------------------------------------------------

    def follow(self, after: int = 0, run: str | None = None, kinds: Iterable[str] | None = None,
               credit: int = 8, idle: float = 0.5, resubscribe: float = 2.0) -> Iterator[Page]:
        """History after ``after``, then live entries, forever.  Yields an empty page every
        ``idle`` seconds without data so the caller can stop or redraw.  Pages already queued
        when one arrives are yielded with it as one (up to MAX_PAGE_POINTS points, MAX_GATHER
        messages): a caller that falls behind gets fewer, larger pages, so what it pays per page
        does not pile up.

        After ``resubscribe`` seconds with nothing to read (the agent restarted, or dropped this
        reader) it subscribes again from its cursor, under a new number the agent echoes in each
        page: pages of the earlier sub still in flight are dropped, since the new one reads them
        again (a re-read may hold them packed under a higher id: kept, they would arrive twice)."""
        sub = message("sub", after=after, credit=credit, run=run, kinds=list(kinds or []), sub=0)
        owed = _Owed(credit)
        cursor = after
        last_heard = 0.0
        held: Page | None = None  # a page of another journal than the one yielded with it
        try:
            while True:
                if held is not None:
                    page, held = held, None
                else:
                    now = time.monotonic()
                    if now - last_heard > resubscribe and not (last_heard and self._socket().poll(0, zmq.POLLIN)):
                        sub["after"], sub["sub"] = cursor, next(self._ids)  # quiet, not merely unread: ask again
                        owed.pages = 0  # the earlier sub's credit died with it
                        try:
                            self._socket().send(pack(sub), zmq.NOBLOCK)
                            last_heard = now
                        except zmq.Again:  # not connected yet: ask again as soon as it is, not in 2 s
                            self._socket().poll(int(idle * 1000), zmq.POLLOUT)
                            if time.monotonic() - now < idle:
                                continue
                    if not self._socket().poll(int(idle * 1000), zmq.POLLIN):
                        yield Page([], cursor)
                        continue
                    heard, page = self._page(sub["sub"], owed)
                    if heard:  # an earlier sub's page too: the agent is there, the new sub queued
                        last_heard = time.monotonic()
                    if page is None:
                        continue
                entries = [e for e in page.entries if e.id > cursor]  # a packed entry's part, too (wire.entries)
                cursor = max(cursor, page.cursor)
                points, taken = sum(e.n for e in entries), 1
                while points < MAX_PAGE_POINTS and taken < MAX_GATHER and self._socket().poll(0, zmq.POLLIN):
                    taken += 1  # messages, pages or not: a stream of garbage cannot hold the caller here
                    _, more = self._page(sub["sub"], owed)
                    if more is None:
                        continue
                    if more.journal != page.journal:
                        held = more
                        break
                    entries += [e for e in more.entries if e.id > cursor]
                    points += sum(e.n for e in more.entries)
                    cursor = max(cursor, more.cursor)
                yield Page(entries, cursor, page.journal)
        finally:
            if self._sock is not None:
                try:
                    self._sock.send(pack(message("unsub")), zmq.NOBLOCK)
                except zmq.ZMQError:
                    pass

    def _page(self, sub: int, owed: _Owed) -> tuple[bool, Page | None]:
        """The next message: whether it is a page at all, and the page if it answers ``sub`` and is
        well formed (its credit is owed, see ``_Owed``; an earlier sub's credit died with it)."""
        msg = _decode(self._socket().recv())
        if msg.get("t") != "data":
            return False, None
        if msg.get("sub", sub) != sub:  # an agent that does not echo it: every page is current
            return True, None
        owed.pages += 1
        now = time.monotonic()
        if owed.due(now):
            self._socket().send(pack(message("credit", n=owed.pages)), zmq.NOBLOCK)
            owed.returned(now)
        try:
            page = check_page(msg.get("entries"), msg.get("cursor"))
        except ProtocolError:
            return True, None  # a malformed page is skipped; its credit is returned all the same
        journal = msg.get("journal")
        page.journal = journal if isinstance(journal, str) and 0 < len(journal) <= 64 else None
        return True, page


class _Owed:
    """The credit of the pages a follower took, returned in one message once half its window is owed
    (the agent still holds the other half: a reader keeping up never makes it wait) or a second after
    the last return (the agent hears from a slow stream's reader as before, and drops only silent
    ones).  One message a page made a turn of the agent's loop a page per reader, each as costly as
    a tenth of a trainer's batch."""

    def __init__(self, window: int) -> None:
        self.every = max(1, window // 2)
        self.pages = 0
        self._returned = 0.0

    def due(self, now: float) -> bool:
        return self.pages >= self.every or now - self._returned >= RETURN_SECONDS

    def returned(self, now: float) -> None:
        self.pages, self._returned = 0, now


def check_ping(data: Any) -> dict:
    """An agent's ping answer (its state), checked."""
    if not isinstance(data, dict) or not isinstance(data.get("journal", ""), (str, type(None))):
        raise ProtocolError("the agent's ping answer is malformed")
    return data


def check_runs(data: Any) -> list[dict]:
    """An agent's run list, checked."""
    if not isinstance(data, list) or not all(isinstance(r, dict) and isinstance(r.get("id"), str) for r in data):
        raise ProtocolError("the agent's run list is malformed")
    return data


def claimed_sender(who: dict[str, str] | None = None) -> dict[str, str]:
    """Who a request says it comes from; the agent keeps this beside what it knows (the key, over CURVE)."""
    return {"user": getpass.getuser(), "host": socket.gethostname(), "client": "cli", **(who or {})}


def _decode(frame: bytes) -> dict:
    try:
        msg = unpack(frame)
    except ProtocolError:
        return {}
    return msg if isinstance(msg, dict) else {}


def reachable(url: str, timeout: float = 0.3) -> bool:
    """Whether an agent answers at ``url`` within ``timeout`` seconds."""
    with Client(url, timeout=timeout) as client:
        try:
            client.ping()
            return True
        except AgentUnavailable:
            return False


def _squatted(url: str, wait: float = 0.5) -> bool:
    """Whether what takes TCP connections at ``url`` is not ZeroMQ: every ZeroMQ socket (a busy
    agent's too) greets a connection at once from its I/O thread, its first byte 0xff.  Nobody
    listening, or a connection closed at once (an SSH tunnel with no agent at its far end), is no squatter."""
    parts = urlsplit(url)
    try:
        conn = socket.create_connection((parts.hostname, parts.port), timeout=wait)
    except OSError:
        return False  # refused, or no answer to the connection itself: nothing there to name
    with conn:
        try:
            first = conn.recv(1)
        except TimeoutError:
            return True  # it took the connection and says nothing: an HTTP server, a bare listener
        except OSError:
            return False
    return first not in (b"", b"\xff")


def _hit(hit: Any) -> bool:
    """A search hit as the agent sends it: [step, row, entry id, the row]."""
    if not (isinstance(hit, list) and len(hit) == 4 and all(type(v) is int and v >= 0 for v in hit[:3])):
        return False
    try:
        check_rollouts([hit[3]])
    except ProtocolError:
        return False
    return True
