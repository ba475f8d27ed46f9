"""Fuzz the app's side of the wire: a fake agent (a real ROUTER on loopback, ``FakeAgent``) answers the app.

``test_fuzz.py`` fuzzes the agent's port.  Here the roles turn round: the fake agent answers the app's
network layer (``pilothouse.client.Client`` and ``pilothouse.gui.network.AgentLink``, which writes into
``pilothouse.gui.local_store.LocalStore``) with hypothesis-drawn garbage: raw bytes, random msgpack, and
replies shaped like the protocol's (``r``/``err``/``data``/``welcome``/``ack``...) with wrong field
types, out-of-range and negative cursors, entries of the wrong arity, NaN, deep nesting and long
strings.  The app must skip or refuse what it cannot use, keep following, keep reporting health,
never touch what it already stored, and follow an honest agent again afterwards.  The strategies and
``build`` are in ``support/reply_fuzz.py`` (they also make the frames of ``test_fuzz_agent_memory.py``),
with why fuzzed cursors and ids stay below ``HONEST_BASE``.

Memory: the link's Python heap under a long stream of garbage stays under a fixed bound.
Hypothesis is derandomized (the same examples on every run) and does not shrink: the link
and the fake agent are threads with state, so an example's failure is reported as drawn.
"""

from __future__ import annotations

import gc
import random
import sqlite3
import threading
import time
import tracemalloc
from collections import deque
from pathlib import Path

import msgpack
import numpy as np
import psutil
import pytest
import zmq
from hypothesis import given, settings
from hypothesis import strategies as st
from support.reply_fuzz import (
    ANSWER,
    DEEP,
    ECHO,
    GARBAGE,
    HONEST_BASE,
    HONEST_RUN,
    JOURNAL,
    REPLY,
    SETTINGS,
    STREAM,
    WEIRD,
    build,
    shaped,
)
from support.sockets import free_port, owner_agent_socket
from support.waiting import wait_until

from pilothouse.client import AgentError, Client
from pilothouse.gui.local_store import LocalStore
from pilothouse.gui.network import AgentLink
from pilothouse.wire.entries import Entry, Page
from pilothouse.wire.messages import MAX_MESSAGE_BYTES, ProtocolError

GOOD_URL = "tcp://127.0.0.1:9"  # an agent the app heard from earlier; its stored rows must not change
ALLOWED = (AgentError, ProtocolError)  # what the client may raise at a bad reply (AgentUnavailable is an AgentError)

# --- the fake agent --------------------------------------------------------------------------

def metric_entry(entry_id: int, run: str, steps: range) -> list:
    s = np.array(steps, np.int64)
    vals = np.where(s % 7 == 0, np.nan, s * 0.25).astype(np.float64)
    return [entry_id, run, "m", "loss", 0, len(s), s.tobytes(), vals.tobytes(),
            np.full(len(s), time.time()).tobytes(), None]


class FakeAgent:
    """A ROUTER on loopback.  Requests (q, sub, credit) get the next scripted reply if any, else
    an honest answer from a small journal (``honest``) or none; ``push`` frames and the ``flood``
    iterator go unasked to the last connection that subscribed (the app's stream socket)."""

    def __init__(self):
        self.url = f"tcp://127.0.0.1:{free_port()}"
        self.sock = owner_agent_socket(zmq.Context.instance().socket(zmq.ROUTER))
        self.sock.setsockopt(zmq.LINGER, 0)
        self.sock.bind(self.url)
        self.lock = threading.Lock()
        self.script: deque[tuple] = deque()
        self.push: deque[bytes] = deque()
        self.flood = None
        self.flooded = 0
        self.honest = True
        self.then_honest = False  # after a scripted reply, answer honestly too
        self.entries: list[list] = []
        self.reader: bytes | None = None
        self.reader_cursor = 0
        self.requests = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._serve, name="fake agent", daemon=True)
        self._thread.start()

    def load(self, script: list[tuple], push: list[tuple]) -> None:
        with self.lock:
            self.script.extend(script)
            self.push.extend(build(p, {}) for p in push)

    def pending(self) -> int:
        with self.lock:
            return len(self.script) + len(self.push)

    def close(self) -> None:
        self._stop.set()
        self._thread.join(5)
        self.sock.close(linger=0)

    def _send(self, ident: bytes, frame: bytes) -> None:
        try:
            self.sock.send_multipart([ident, frame], zmq.NOBLOCK)
        except zmq.ZMQError:
            pass  # the app's queue is full: dropped, as a real ROUTER does

    def _serve(self) -> None:
        while not self._stop.is_set():
            with self.lock:
                pushed = list(self.push) if self.reader is not None else []
                if pushed:
                    self.push.clear()
            for frame in pushed:
                self._send(self.reader, frame)
            if self.flood is not None and self.reader is not None:
                for frame in self.flood:
                    self._send(self.reader, frame)
                    self.flooded += 1
                    if self.flooded % 50 == 0:
                        break
            if self.honest and self.reader is not None:
                self._stream()
            if not self.sock.poll(2, zmq.POLLIN):
                continue
            ident, *_, frame = self.sock.recv_multipart()
            try:
                msg = msgpack.unpackb(frame, raw=False, strict_map_key=False)
            except Exception:
                continue
            if not isinstance(msg, dict):
                continue
            self.requests += 1
            if msg.get("t") in ("sub", "credit"):
                self.reader = ident
                if msg.get("t") == "sub":
                    self.reader_cursor = msg["after"]
            with self.lock:
                item = self.script.popleft() if self.script else None
            if item is not None:
                self._send(ident, build(item, msg))
            if self.honest and (item is None or self.then_honest):
                self._answer(ident, msg)

    def _page(self, after: int) -> tuple[list, int]:
        page = [e for e in self.entries if e[0] > after][:20]
        head = self.entries[-1][0] if self.entries else 0
        return page, (page[-1][0] if page else max(after, head))

    def _stream(self) -> None:
        page, cursor = self._page(self.reader_cursor)
        if page:
            self.reader_cursor = cursor
            self._send(self.reader, msgpack.packb({"t": "data", "cursor": cursor, "entries": page}))

    def _answer(self, ident: bytes, msg: dict) -> None:
        if msg.get("t") == "sub":
            page, cursor = self._page(msg["after"])
            self.reader_cursor = cursor
            self._send(ident, msgpack.packb({"t": "data", "cursor": cursor, "entries": page}))
        if msg.get("t") != "q":
            return
        op, args = msg.get("op"), msg.get("args") or {}
        if op == "ping":
            data = {"journal": JOURNAL, "head": self._page(0)[1], "host": "fakehost", "pid": 1, "bad_frames": 0}
        elif op == "runs":
            data = [{"id": HONEST_RUN, "project": "p", "name": "n", "kind": "train", "status": "running",
                     "host": "fakehost", "last_step": 0, "created": 1.0}]
        elif op == "read":
            page, cursor = self._page(args.get("after", 0))
            data = {"entries": page, "cursor": cursor}
        else:
            self._send(ident, msgpack.packb({"t": "err", "id": msg.get("id"), "msg": f"unknown query {op!r}"}))
            return
        self._send(ident, msgpack.packb({"t": "r", "id": msg.get("id"), "data": data}))


@pytest.fixture
def fake():
    f = FakeAgent()
    yield f
    f.close()


# --- checks ----------------------------------------------------------------------------------

def seed_good_agent(path: Path) -> None:
    """Data the app received earlier from another agent: metric chunks (NaN, -0.0), an event, a run."""
    store = LocalStore(path)
    store.add_agent(GOOD_URL, "good node")
    entries = [metric_entry(i, "goodrun", range(10 * i, 10 * i + 10)) for i in range(1, 4)]
    entries.append([4, "goodrun", "e", None, 0, 0, None, None, None, msgpack.packb({"what": "finished"})])
    store.write_page(GOOD_URL, entries, 4)
    store.put_runs(GOOD_URL, [{"id": "goodrun", "project": "p", "name": "good", "kind": "train",
                               "status": "finished", "host": "h", "last_step": 39, "created": 2.0}])
    store.close()


def snapshot_good(path: Path) -> list:
    con = sqlite3.connect(path, timeout=10)
    try:
        return [con.execute(f"SELECT * FROM {table} WHERE {key}=? ORDER BY 1, 2", [GOOD_URL]).fetchall()
                for table, key in (("agents", "url"), ("runs", "agent"), ("entries", "agent"))]
    finally:
        con.close()


class Watch:
    """Health reports and uncaught exceptions of threads, for a link under fuzz."""

    def __init__(self, monkeypatch):
        self.reports: list[tuple[float, str]] = []
        self.crashes: list[str] = []
        hook = threading.excepthook
        monkeypatch.setattr(threading, "excepthook", lambda args: (
            self.crashes.append(f"{args.exc_type.__name__}: {args.exc_value}"), hook(args)))

    def on_health(self, health) -> None:
        self.reports.append((time.monotonic(), health.state))


def start_link(fake: FakeAgent, path: Path, watch: Watch) -> AgentLink:
    link = AgentLink(fake.url, path, on_health=watch.on_health, dead_after=1.0, runs_every=0.0, poll=0.02)
    link.start()
    return link


def assert_link_alive(link: AgentLink, watch: Watch) -> None:
    health = link.health()
    # a health error text is allowed (a garbled answer is reported); a dead thread is not
    assert link.running() and health.state != "stopped" and not watch.crashes, (
        f"the link died: {health.error or watch.crashes}")


def assert_honest_data_arrives(fake: FakeAgent, link: AgentLink, path: Path, watch: Watch, first: int) -> None:
    """The fake turns honest and appends to its journal: the link gets all of it, exactly once."""
    with fake.lock:
        fake.script.clear()
        fake.push.clear()
        fake.flood = None
        fake.honest = True
        fake.entries.extend(metric_entry(first + i, HONEST_RUN, range(100 + 5 * i, 105 + 5 * i)) for i in range(1, 6))
        want = np.concatenate([np.frombuffer(e[6], np.int64) for e in fake.entries])
    store = LocalStore(path)
    try:
        wait_until(lambda: len(store.series(fake.url, HONEST_RUN, "loss")[0]) >= len(want), timeout=10,
                   what="the honest journal after the fuzz")
        steps, vals, _ = store.series(fake.url, HONEST_RUN, "loss")
        assert sorted(steps.tolist()) == sorted(want.tolist()), "gap or duplicate"
        want_vals = np.where(steps % 7 == 0, np.nan, steps * 0.25)
        assert vals.tobytes() == want_vals.tobytes()
        assert any(r["id"] == HONEST_RUN for r in store.runs(fake.url))
    finally:
        store.close()
    wait_until(lambda: link.health().state == "connected", timeout=5, what="connected")
    reports = len(watch.reports)
    wait_until(lambda: len(watch.reports) > reports, timeout=3, what="health reports")  # at least once a second
    assert_link_alive(link, watch)


# --- the client ------------------------------------------------------------------------------

def client_call(client: Client, op: str):
    if op == "follow":
        pages = client.follow(idle=0.05, resubscribe=60)
        try:
            return [next(pages) for _ in range(3)]
        finally:
            pages.close()
    return getattr(client, op)()


def test_client_skips_garbage_frames(fake):
    """Frames that are not a reply to the request (raw bytes, random msgpack) are skipped: the honest
    answer behind them comes through.  Nothing but AgentError-family errors may leave the client."""
    fake.entries = [metric_entry(1, HONEST_RUN, range(5))]
    fake.then_honest = True
    client = Client(fake.url, timeout=2.0)

    @settings(SETTINGS, max_examples=60)
    @given(st.sampled_from(["ping", "runs", "read", "follow"]), st.lists(GARBAGE, min_size=1, max_size=4))
    def fuzz(op, frames):
        # every garbage frame answers the request; the honest answer follows
        fake.load(frames[:1], frames[1:])
        got = client_call(client, op)
        if op == "ping":
            assert got["journal"] == JOURNAL
        elif op == "read":
            assert [e.id for e in got.entries] == [1] and got.cursor == 1
        elif op == "follow":
            assert [e.id for p in got for e in p.entries] in ([], [1])
        wait_until(lambda: fake.pending() == 0, timeout=2, what="the garbage sent")

    try:
        fuzz()
    finally:
        client.close()


def _well_typed(op: str, got) -> None:
    if op == "ping":
        assert isinstance(got, dict), f"ping returned {type(got).__name__}"
        assert got.get("journal") is None or isinstance(got["journal"], str), got
    elif op == "runs":
        assert isinstance(got, list) and all(isinstance(r, dict) and isinstance(r.get("id"), str) for r in got), got
    else:
        pages = got if op == "follow" else [got]
        for page in pages:
            assert isinstance(page, Page) and type(page.cursor) is int and 0 <= page.cursor < 2 ** 63, page.cursor
            for e in page.entries:
                assert isinstance(e, Entry) and type(e.id) is int and e.id <= page.cursor, e[:6]


def test_client_refuses_malformed_replies(fake):
    """Replies shaped like the protocol's but wrong: the client returns well-typed results or raises an
    AgentError/ProtocolError; never TypeError, KeyError, IndexError, RecursionError..."""
    fake.honest = False
    client = Client(fake.url, timeout=0.1)
    failures: list[str] = []

    @settings(SETTINGS, max_examples=120)
    @given(st.sampled_from(["ping", "runs", "read", "follow"]), st.one_of(ANSWER, STREAM, DEEP),
           st.lists(st.one_of(STREAM, REPLY), max_size=2))
    def fuzz(op, reply, pushed):
        fake.load([reply], pushed if op == "follow" else [])
        try:
            _well_typed(op, client_call(client, op))
        except ALLOWED:
            pass
        except Exception as exc:  # collected, so the report names every kind of failure at once
            failures.append(f"{op}: {type(exc).__name__}: {str(exc)[:100]}")
        with fake.lock:
            fake.script.clear()
            fake.push.clear()

    try:
        fuzz()
    finally:
        client.close()
    assert not failures, f"{len(failures)} malformed replies crashed the client, e.g.:\n" + "\n".join(
        sorted(set(f.split(":")[0] + ":" + f.split(":")[1] for f in failures)))


def test_client_caps_reply_frame_size(fake):
    """A frame larger than the protocol allows is refused by the socket, not buffered: memory stays bounded."""
    fake.load([("raw", b"\x00" * (MAX_MESSAGE_BYTES + 1))], [])
    with Client(fake.url, timeout=1.0) as client:
        with pytest.raises(AgentError):
            client.ping()
        assert 0 < client._socket().getsockopt(zmq.MAXMSGSIZE) <= MAX_MESSAGE_BYTES


# --- the link --------------------------------------------------------------------------------

def test_link_survives_a_broken_agent(tmp_path, fake, monkeypatch):
    """A real AgentLink follows the fake agent through malformed replies to its requests and pushed
    stream frames: it keeps running and reporting health, the rows stored from another agent stay
    bit for bit, and once the agent answers honestly again its journal arrives exactly once."""
    path = tmp_path / "app.sqlite"
    seed_good_agent(path)
    good = snapshot_good(path)
    watch = Watch(monkeypatch)
    fake.entries = [metric_entry(i, HONEST_RUN, range(5 * i, 5 * i + 5)) for i in range(1, 6)]
    link = start_link(fake, path, watch)
    try:
        store = LocalStore(path)
        wait_until(lambda: len(store.series(fake.url, HONEST_RUN, "loss")[0]) == 25, what="the honest journal")
        store.close()

        @settings(SETTINGS, max_examples=80)
        @given(st.lists(REPLY, min_size=1, max_size=3), st.lists(REPLY, max_size=3))
        def fuzz(script, pushed):
            fake.load(script, pushed)
            wait_until(lambda: fake.pending() == 0 or not link.running(), timeout=5, what="replies taken")
            time.sleep(0.01)  # the last one handled
            assert_link_alive(link, watch)

        fuzz()
        assert snapshot_good(path) == good, "the fuzz changed rows stored from another agent"
        assert_honest_data_arrives(fake, link, path, watch, HONEST_BASE)
        assert snapshot_good(path) == good
    finally:
        link.stop()


def test_link_memory_bounded_under_a_garbage_stream(tmp_path, fake, monkeypatch):
    """A fake agent streams garbage the link must skip (raw bytes, random msgpack, frames of an unknown
    type, err replies, 64 KiB junk) for a few seconds: the link's Python heap stays bounded, it keeps
    running, the other agent's rows are unchanged, and honest data still arrives."""
    path = tmp_path / "app.sqlite"
    seed_good_agent(path)
    good = snapshot_good(path)
    pool: list[tuple] = []

    @settings(SETTINGS, max_examples=300)
    @given(st.one_of(GARBAGE, st.integers(0, 2 ** 32).map(lambda seed: ("raw", random.Random(seed).randbytes(65_536))),
                     shaped("zzz", data=WEIRD).map(lambda o: ("obj", o)),
                     shaped("err", id=st.just(ECHO), msg=st.text(max_size=50)).map(lambda o: ("obj", o))))
    def collect(item):
        pool.append(item)

    collect()
    frames = [build(item, {"id": 0}) for item in pool]
    replies = [item for item in pool if item[0] == "obj" and isinstance(item[1], dict) and item[1].get("t") == "err"]
    assert len(frames) >= 250 and replies
    watch = Watch(monkeypatch)
    fake.entries = [metric_entry(1, HONEST_RUN, range(5))]
    link = start_link(fake, path, watch)
    rss = psutil.Process().memory_info
    try:
        store = LocalStore(path)
        wait_until(lambda: len(store.series(fake.url, HONEST_RUN, "loss")[0]) == 5, what="the honest journal")
        store.close()

        def stream(seconds: float) -> int:
            fake.flooded = 0
            fake.flood = (frames[i % len(frames)] for i in range(10 ** 9))
            end = time.monotonic() + seconds
            while time.monotonic() < end:
                if fake.pending() < 4:
                    fake.load(replies[:4], [])  # and the ping/runs requests get err replies
                time.sleep(0.02)
            fake.flood = None
            time.sleep(0.3)  # the link drains its queue
            return fake.flooded

        def settled_heap() -> int:
            """The least of three samples over half a second: what the link still has in flight on a busy
            machine is gone by a later sample, a leak is not."""
            samples = []
            for _ in range(3):
                gc.collect()
                samples.append(tracemalloc.get_traced_memory()[0])
                time.sleep(0.25)
            return min(samples)

        stream(0.7)  # warm-up: imports, caches, sqlite pages
        gc.collect()
        tracemalloc.start()
        rss0 = rss().rss
        sent, heaps = 0, []
        for _ in range(3):
            sent += stream(0.8)
            heaps.append(settled_heap())
        peak = tracemalloc.get_traced_memory()[1]
        rss2 = rss().rss
        tracemalloc.stop()
        print(f"\nlink under {sent} garbage frames: Python heap +{' / +'.join(f'{h / 2**20:.2f}' for h in heaps)} "
              f"MiB after each third (peak +{peak / 2**20:.2f}), RSS {rss0 / 2**20:.1f} -> {rss2 / 2**20:.1f} MiB")
        assert sent >= 5_000, sent
        # msgpack interns every map key it decodes, and the interpreter's table of interned strings never
        # shrinks: when garbage keys make it resize, its new table (one block of 1.9 MiB in a process
        # with a test's imports, seen once; more with more modules loaded) is traced. That happens once,
        # not per frame: a leak grows in every third, the table in one at most.
        growth = sorted(b - a for a, b in zip([0, *heaps], heaps))
        assert growth[1] < 2 ** 20 and heaps[-1] < 16 * 2 ** 20, f"the link's heap grows under garbage: {heaps}"
        assert peak < 16 * 2 ** 20  # one frame at a time, not a backlog
        assert rss2 - rss0 < 64 * 2 ** 20  # ZMQ's own queue is bounded by the HWM (1000 frames of <= 64 KiB)
        assert_link_alive(link, watch)
        assert snapshot_good(path) == good
        assert_honest_data_arrives(fake, link, path, watch, 10)
    finally:
        link.stop()


def test_tiers_of_an_agent_of_another_version_are_refused_with_the_reason(fake):
    """An agent from before the buckets kept sums and wall times answers 12-field records: records of
    96 B, some of whose blobs divide by today's 120 B too; the client says which versions differ
    rather than misread them."""
    from pilothouse.store.tiers import RECORD

    fake.honest = False
    old = (np.arange(5 * 12, dtype=np.int64)).tobytes()  # five old records: 480 B = four of today's
    assert len(old) % RECORD.itemsize == 0
    answers = [{"ready": True, "level": 0, "width": 16, "pixels": None, "records": [old]},  # no fields named
               {"ready": True, "level": 0, "width": 16, "pixels": None, "records": [old],
                "fields": list(RECORD.names)[:12]}]
    with Client(fake.url, timeout=2.0) as client:
        for answer in answers:
            fake.load([("obj", {"t": "r", "id": ECHO, "data": answer})], [])
            with pytest.raises(ProtocolError, match="run the same pilothouse version on both sides"):
                client.tiers("r1", ["loss"], 0, 100, level=0)