"""Agent links against a real agent subprocess and a real trainer: complete data, health, resume."""

from __future__ import annotations

import signal
import socket
import threading
import time

import numpy as np
import zmq
from support.messages import batch_fields
from support.processes import AgentProcess, finish, start_trainer
from support.sockets import as_owner, free_port
from support.waiting import wait_until

from pilothouse.gui.local_store import LocalStore
from pilothouse.gui.network import AgentLink, Inbox, Links
from pilothouse.gui.store_writer import StoreWriter, Write
from pilothouse.node.compactor import Compactor
from pilothouse.node.journal import Store
from pilothouse.wire.entries import KIND_METRIC, Entry, entry_points
from pilothouse.wire.messages import pack, unpack

TRAINER = """
run = ph.init(project="net", name=ARGS[0], agent=URL, heartbeat=0.2)
print(run.id, flush=True)
n, delay = int(ARGS[1]), float(ARGS[2])
for s in range(n):
    run.log({"reward/mean": float("nan") if s % 97 == 0 else s * 0.5, "loss": float(s)}, step=s)
    if delay:
        time.sleep(delay)
ok = run.finish(timeout=60)
print(ok, flush=True)
"""


class Recorder:
    """Collects what a link hands over, as the Qt layer would (from the store writer's and the links' threads)."""

    def __init__(self):
        self.lock = threading.Lock()
        self.entries: list = []
        self.runs: list | None = None
        self.states: list[str] = []

    def on_batch(self, url, entries, cursor, runs):
        with self.lock:
            self.entries.extend(entries)
            if runs is not None:
                self.runs = runs

    def on_health(self, health):
        with self.lock:
            if not self.states or self.states[-1] != health.state:
                self.states.append(health.state)


def complete(store: LocalStore, url: str, run_id: str, n: int) -> bool:
    return len(store.series(url, run_id, "loss")[0]) >= n


def assert_exactly_once(store: LocalStore, url: str, run_id: str, n: int, agent_client) -> None:
    for metric in ("reward/mean", "loss"):
        steps, vals, times = store.series(url, run_id, metric)
        assert np.array_equal(np.sort(steps), np.arange(n)), f"{metric}: gap or duplicate"
        ref = agent_client.series(run_id, metric)
        assert all(a.tobytes() == b.tobytes() for a, b in zip((steps, vals, times), ref)), metric


def test_link_gets_everything_once_across_an_agent_sigkill(tmp_path, agent_proc):
    n = 3000
    trainer = start_trainer(tmp_path, TRAINER, agent_proc.url, "survivor", str(n), "0.001")
    run_id = trainer.stdout.readline().strip()
    rec = Recorder()
    path = tmp_path / "app.sqlite"
    link = AgentLink(agent_proc.url, path, on_batch=rec.on_batch, on_health=rec.on_health, dead_after=1.0)
    link.start()
    store = LocalStore(path)
    try:
        wait_until(lambda: link.health().state == "connected", what="link connected")
        wait_until(lambda: len(store.series(agent_proc.url, run_id, "loss")[0]) > 0, what="first points")
        agent_proc.kill(signal.SIGKILL)
        wait_until(lambda: link.health().state == "reconnecting", timeout=15, what="reconnecting")
        agent_proc.start()
        wait_until(lambda: link.health().state == "connected", timeout=10, what="connected again")
        assert finish(trainer).splitlines()[-1] == "True"
        wait_until(lambda: complete(store, agent_proc.url, run_id, n), timeout=15, what="all points local")
        wait_until(lambda: any(r["id"] == run_id and r["status"] == "finished" for r in store.runs()),
                   what="finished status stored")
        health = link.health()
        assert health.lag is not None and health.lag >= 0 and health.cursor == store.cursor(agent_proc.url)
        with agent_proc.client() as c:
            assert_exactly_once(store, agent_proc.url, run_id, n, c)
        ids = [e.id for e in rec.entries]
        assert len(ids) == len(set(ids)) and ids == sorted(ids)  # the callback saw no duplicate either
        assert rec.runs and any(r["id"] == run_id for r in rec.runs)
        assert "reconnecting" in rec.states and rec.states[-1] == "connected"
    finally:
        t = time.monotonic()
        link.stop()
        assert time.monotonic() - t < 5.0  # joins promptly (no hang); its speed is not a test matter
        assert link.health().state == "stopped"


def test_unreachable_agent_reports_reconnecting_and_stops_fast(tmp_path):
    link = AgentLink(f"tcp://127.0.0.1:{free_port()}", tmp_path / "app.sqlite", dead_after=0.5)
    link.start()
    wait_until(lambda: link.health().state == "reconnecting", timeout=3, what="reconnecting")
    t = time.monotonic()
    assert link.health().silent >= 0.5 and time.monotonic() - t < 0.05  # health() never blocks
    link.stop()
    assert time.monotonic() - t < 5.0 and link.health().state == "stopped"


def test_every_link_runs_on_one_thread_and_dead_agents_hold_up_none(tmp_path, agent_proc):
    """The links share one thread (``link_hub``: a thread each made 64 agents fight the UI thread for the
    GIL); agents that never answer (nothing listens at their ports) delay no other: the live agent's
    run-list round trips stay under the query timeout the dead ones run into every second."""
    path = tmp_path / "app.sqlite"
    dead = [AgentLink(f"tcp://127.0.0.1:{free_port()}", path, dead_after=1.0) for _ in range(3)]
    live = AgentLink(agent_proc.url, path, dead_after=1.0)
    links = [*dead, live]
    for link in links:
        link.start()
    try:
        wait_until(lambda: live.health().state == "connected", what="the live agent connected")
        wait_until(lambda: all("no answer from the agent" in d.health().error for d in dead), what="dead agents")
        lags = []
        for _ in range(3):  # three run lists, each while the dead agents' queries wait for their timeouts
            lag = live.health().lag
            wait_until(lambda: live.health().lag != lag, what="the next run list")
            lags.append(live.health().lag)
        assert max(lags) < 2 * live.poll, lags
        assert live.health().error == "" and all(d.health().state != "connected" for d in dead)
        names = [t.name for t in threading.enumerate()]
        assert names.count("link hub") == 1 and not any(n.startswith("link tcp") for n in names), names
    finally:
        for link in links:
            link.stop(wait=False)
        for link in links:
            link.stop()
    assert all(not link.running() and link.health().state == "stopped" for link in links)


def test_a_new_link_resumes_at_the_cursor(tmp_path, agent_proc):
    n = 500
    trainer = start_trainer(tmp_path, TRAINER, agent_proc.url, "resume", str(n), "0")
    run_id = trainer.stdout.readline().strip()
    finish(trainer)
    path = tmp_path / "app.sqlite"
    store = LocalStore(path)
    first = Recorder()
    links = Links(path, on_batch=first.on_batch)
    links.add(agent_proc.url, "node-a")
    links.start()
    wait_until(lambda: complete(store, agent_proc.url, run_id, n), what="history downloaded")
    links.close()
    cursor = store.cursor(agent_proc.url)
    assert cursor >= max(e.id for e in first.entries)

    second = Recorder()
    links = Links(path, on_batch=second.on_batch)  # a restarted app: the agent list is remembered
    assert [a["url"] for a in links.agents()] == [agent_proc.url]
    links.start()
    wait_until(lambda: second.runs is not None, what="runs refreshed")
    time.sleep(1.2)  # the system sampler adds an entry a second: the stream is live
    links.close()
    assert all(e.id > cursor for e in second.entries), "history fetched again"
    assert not any(e.run == run_id for e in second.entries)
    with agent_proc.client() as c:
        assert_exactly_once(store, agent_proc.url, run_id, n, c)


def test_links_add_and_remove(tmp_path):
    path = tmp_path / "app.sqlite"
    links = Links(path, dead_after=0.5)
    links.start()
    a, b = f"tcp://127.0.0.1:{free_port()}", f"tcp://127.0.0.1:{free_port()}"
    links.add(a)
    links.add(b, "node-b")
    assert set(links.links) == {a, b}
    wait_until(lambda: all(h.state == "reconnecting" for h in links.health()), timeout=3, what="both down")
    t = time.monotonic()
    links.remove(a)
    assert [x["url"] for x in links.agents()] == [b] and set(links.links) == {b}
    links.close()
    assert time.monotonic() - t < 2.0
    assert [(x["url"], x["name"]) for x in Links(path).agents()] == [(b, "node-b")]


def test_an_agent_restarted_on_a_new_journal_is_followed_from_its_start(tmp_path):
    from support.processes import AgentProcess

    port = free_port()
    store_path = tmp_path / "app.sqlite"
    first = AgentProcess(tmp_path / "journal-1", port).start()
    link = AgentLink(first.url, store_path)
    try:
        old = start_trainer(tmp_path, TRAINER, first.url, "before", "50", "0", name="before")
        old_id = old.stdout.readline().strip()
        finish(old)
        link.start()
        store = LocalStore(store_path)
        wait_until(lambda: complete(store, first.url, old_id, 50), what="the first journal")
        first.stop()
        second = AgentProcess(tmp_path / "journal-2", port).start()  # same URL, wiped data: ids restart
        try:
            new = start_trainer(tmp_path, TRAINER, second.url, "after", "30", "0", name="after")
            new_id = new.stdout.readline().strip()
            finish(new)
            wait_until(lambda: complete(store, second.url, new_id, 30), timeout=20, what="the new journal")
            moved = [r for r in store.runs() if r["id"] == old_id]
            assert len(moved) == 1 and moved[0]["agent"].startswith(first.url + "#")  # still browsable
            assert len(store.series(moved[0]["agent"], old_id, "loss")[0]) == 50
        finally:
            second.stop()
    finally:
        link.stop()
        first.stop()


def write_packed_history(path, runs: list[str], steps: int) -> int:
    """Finished runs logging "loss" every step and "reward" every third, 13 steps per batch, packed
    as the agent packs them: the two streams' packed entries overlap at uneven ids, so pages of
    200 k points end inside one (the second and third page too).  Returns the journal's head."""
    store = Store(path)
    now = time.time()
    for run in runs:
        store.begin()
        store.upsert_run({"run": run, "project": "pack", "name": run, "host": socket.gethostname(), "pid": 1,
                          "pid_started": None, "config": {}}, now)
        for lo in range(0, steps, 13):
            recs = [(0, s, now + s, {"loss": 1.0 / (s + 1), **({"reward": float(s)} if s % 3 == 0 else {})})
                    for s in range(lo, min(lo + 13, steps))]
            store.ingest((run, 0, ""), lo + 1, lo + 1, batch_fields(recs), now)
        store.set_status(run, "finished", now)
        store.commit()
    compactor = Compactor(store)
    while compactor.pending():
        store.begin()
        compactor.step()
        store.commit()
    after, parts = 0, 0
    while (page := store.read(after))[0]:
        parts += sum(e.id > page[1] for e in page[0])
        after = page[1]
    head = store.head
    store.db.close()
    assert parts >= 2, "pages end inside no packed entry beyond the first: the test would not test it"
    return head


def test_a_packed_history_arrives_once_though_pages_end_inside_packed_entries_and_the_link_stalls(tmp_path,
                                                                                                monkeypatch):
    """A page ending inside a packed entry carries its part above the page's cursor, the rest comes
    under the same id (the app dropped such pages whole as malformed, and its store would have kept
    the part only).  The link stalls past ``Client.follow``'s resubscribe time with pages
    queued (as when the app holds it): it reads them rather than subscribing again.  Each point
    reaches the callback and the store exactly once, in order, bit for bit."""
    runs, steps = ["a", "b", "c", "d"], 96_000  # 512 k points: three pages, two end inside packed entries
    proc = AgentProcess(tmp_path / "agent", free_port())
    proc.data.mkdir()
    head = write_packed_history(proc.data / "journal.sqlite", runs, steps)
    # the app's store packs nothing here: a packed run's bytes fall below its points' (checked at the end)
    monkeypatch.setattr("pilothouse.store.packing.MIN_ROWS", 10 ** 9)
    proc.start()
    got: dict[tuple[str, str], list] = {}
    stalls = [2.5]  # once, on the first page with points: longer than the 2 s resubscribe time

    def on_batch(url, entries, cursor, runs_):
        if entries and stalls:
            time.sleep(stalls.pop())
        for e in entries:
            if e.kind == KIND_METRIC and e.run in runs:
                s, v, _ = entry_points(e)
                got.setdefault((e.run, e.metric), []).extend(zip(s.tolist(), v.tolist()))

    path = tmp_path / "app.sqlite"
    link = AgentLink(proc.url, path, on_batch=on_batch)
    link.start()
    store = LocalStore(path)
    try:
        wait_until(lambda: store.cursor(proc.url) >= head, timeout=60, what="the history stored")
        time.sleep(1.0)  # what a second sub would repeat has arrived by now
        want = {"loss": [(s, 1.0 / (s + 1)) for s in range(steps)],
                "reward": [(s, float(s)) for s in range(0, steps, 3)]}
        with proc.client() as client:
            for run in runs:
                for metric, points in want.items():
                    assert got[(run, metric)] == points, f"{run}/{metric}: a point missing, repeated or out of order"
                    s, v, _ = store.series(proc.url, run, metric)
                    assert list(zip(s.tolist(), v.tolist())) == points, f"stored {run}/{metric}"
                    s, v, _ = client.series(run, metric)  # Client.history: pages with parts, too
                    assert list(zip(s.tolist(), v.tolist())) == points, f"read back {run}/{metric}"
        sizes = {(a, r): b for a, r, b in store.db.execute("SELECT agent, run, bytes FROM run_bytes")}
        assert all(sizes[(proc.url, run)] >= 24 * steps * 4 // 3 for run in runs)  # a part's rest counted
    finally:
        link.stop()
        store.close()
        proc.stop()


def test_each_page_names_the_sub_it_answers_so_an_earlier_subs_pages_are_told_apart(agent_proc):
    """A reader that subscribes again (after silence) may still receive pages of its earlier sub,
    which the new sub reads again, packed under a higher id by then: ``Client.follow`` drops
    pages whose number is not its latest sub's.  A bad number is refused."""
    sock = as_owner(zmq.Context.instance().socket(zmq.DEALER))
    sock.connect(agent_proc.url)
    try:
        def pages(until: int) -> list[dict]:
            out: list[dict] = []
            deadline = time.monotonic() + 10
            while time.monotonic() < deadline and not (out and out[-1].get("sub") == until):
                if sock.poll(200, zmq.POLLIN):
                    msg = unpack(sock.recv())
                    assert msg["t"] == "data", msg
                    out.append(msg)
                    sock.send(pack({"t": "credit", "n": 1}))
            return out

        sock.send(pack({"t": "sub", "after": 0, "credit": 2, "run": None, "kinds": [], "sub": 7}))
        assert [p["sub"] for p in pages(7)][-1] == 7
        sock.send(pack({"t": "sub", "after": 0, "credit": 2, "run": None, "kinds": [], "sub": 8}))
        numbers = [p["sub"] for p in pages(8)]
        assert numbers[-1] == 8 and set(numbers) <= {7, 8} and numbers == sorted(numbers)
        for bad in (-1, "8", 2 ** 63):
            sock.send(pack({"t": "sub", "after": 0, "credit": 2, "run": None, "kinds": [], "sub": bad}))
            deadline = time.monotonic() + 10
            while time.monotonic() < deadline and sock.poll(int((deadline - time.monotonic()) * 1000), zmq.POLLIN):
                msg = unpack(sock.recv())
                if msg["t"] == "err":
                    assert "'sub' number" in msg["msg"]
                    break
            else:
                raise AssertionError(f"sub number {bad!r} not refused")
    finally:
        sock.close(linger=0)


class WriterLink:
    """What a link hears from the store's writer (``store_writer.Writer``), recorded."""

    def __init__(self):
        self.heard: list[tuple[list[int], int]] = []
        self.errors: list[Exception] = []
        self.busy_said: list[str] = []

    def written(self, entries, cursor, runs):
        self.heard.append(([e.id for e in entries], cursor))

    def failed(self, error):
        self.errors.append(error)

    def busy(self, message):
        self.busy_said.append(message)

    def stopped(self):
        return self.stop_asked

    stop_asked = False


def one_point(i: int, run: str = "r") -> Entry:
    s = np.array([i], np.int64)
    return Entry(i, run, KIND_METRIC, "loss", 0, 1, s.tobytes(), s.astype(float).tobytes(), s.astype(float).tobytes(),
                 None)


def test_the_store_writer_commits_what_queued_meanwhile_in_one_transaction_and_a_bad_page_fails_alone(tmp_path):
    """Pages queued while the writer is busy go into its next transaction, each agent's joined (one
    tier fold per metric); links hear of their pages in order.  A page the store refuses fails its
    own link only: the others' pages in the same transaction are written."""
    import sqlite3


    path = tmp_path / "app.sqlite"
    LocalStore(path).close()
    watcher = sqlite3.connect(path)  # another connection: PRAGMA data_version counts the writer's commits
    writer = StoreWriter.acquire(path)
    try:
        writer.call(lambda store: None)  # opened, first rollout indexing done
        a, b, bad = WriterLink(), WriterLink(), WriterLink()

        def while_busy(*writes: Write) -> int:
            """The writes queued while the writer is in a call; the commits they took."""
            gate = threading.Event()
            busy = threading.Thread(target=writer.call, args=(lambda store: gate.wait(10),))
            busy.start()
            for w in writes:
                writer.write(w)
            before = watcher.execute("PRAGMA data_version").fetchone()[0]
            gate.set()
            busy.join(10)
            writer.call(lambda store: None)  # everything queued before it is written
            return watcher.execute("PRAGMA data_version").fetchone()[0] - before

        assert while_busy(Write("tcp://a:1", [one_point(1), one_point(2)], 2, None, a), Write("tcp://b:1", [one_point(1)], 1, None, b),
                          Write("tcp://a:1", [one_point(3)], 3, None, a)) == 1
        assert a.heard == [([1, 2, 3], 3)] and b.heard == [([1], 1)]  # a's two pages joined: one tier fold
        commits = while_busy(Write("tcp://bad:1", [one_point(1)[:-1]], 1, None, bad),  # a field short: refused
                             Write("tcp://a:1", [one_point(4)], 4, None, a))
        assert commits == 1 and a.heard[-1] == ([4], 4)  # the joint try rolled back, then a alone
        assert a.errors == b.errors == [] and bad.heard == [] and len(bad.errors) == 1
    finally:
        writer.release()
        watcher.close()
    store = LocalStore(path)
    assert store.series("tcp://a:1", "r", "loss")[0].tolist() == [1, 2, 3, 4]
    assert store.series("tcp://b:1", "r", "loss")[0].tolist() == [1]
    assert (store.cursor("tcp://a:1"), store.cursor("tcp://b:1"), store.cursor("tcp://bad:1")) == (4, 1, 0)
    store.close()


def test_a_link_whose_callback_fails_ends_alone_and_the_writer_goes_on(tmp_path):
    """A link's callback that raises (a bug in what it feeds) fails that link; the writer keeps
    writing the other links' pages."""

    class Broken(WriterLink):
        def written(self, entries, cursor, runs):
            raise RuntimeError("the UI fell over")

    path = tmp_path / "app.sqlite"
    writer = StoreWriter.acquire(path)
    try:
        broken, fine = Broken(), WriterLink()
        writer.write(Write("tcp://a:1", [one_point(1)], 1, None, broken))
        writer.call(lambda store: None)
        writer.write(Write("tcp://b:1", [one_point(1)], 1, None, fine))
        writer.call(lambda store: None)
        assert [str(e) for e in broken.errors] == ["the UI fell over"] and fine.heard == [([1], 1)]
    finally:
        writer.release()


def test_a_stopped_links_queued_pages_are_not_written(tmp_path):
    """Pages a link queued before it was stopped (the agent removed, the app closing) are not written:
    a removed agent's data must not come back, and a link started again reads them from its cursor."""
    path = tmp_path / "app.sqlite"
    writer = StoreWriter.acquire(path)
    try:
        gate = threading.Event()
        busy = threading.Thread(target=writer.call, args=(lambda store: gate.wait(10),))
        busy.start()
        gone, kept = WriterLink(), WriterLink()
        writer.write(Write("tcp://gone:1", [one_point(1)], 1, None, gone))
        writer.write(Write("tcp://kept:1", [one_point(1)], 1, None, kept))
        gone.stop_asked = True
        gate.set()
        busy.join(10)
        StoreWriter.settle(path)
        assert gone.heard == [] and kept.heard == [([1], 1)]
    finally:
        writer.release()
    store = LocalStore(path)
    assert (store.cursor("tcp://gone:1"), store.cursor("tcp://kept:1")) == (0, 1)
    assert store.series("tcp://kept:1", "r", "loss")[0].tolist() == [1]
    store.close()


def chunk(i: int, metric: str, steps: list[int], rank: int = 0) -> Entry:
    """A metric entry of run "r" whose values and times are its steps."""
    s = np.array(steps, np.int64)
    return Entry(i, "r", "m", metric, rank, len(s), s.tobytes(), s.astype(float).tobytes(), s.astype(float).tobytes(),
                 None)


def test_a_batch_reaches_the_ui_with_each_metric_streams_chunks_joined_in_id_order():
    """The UI pays per entry: a batch's chunks of one (run, metric, rank) arrive as one, under the last
    id, every point in order; events and a packed entry's part (id above the cursor) as they are."""
    from pilothouse.gui.network import joined

    event = Entry(4, "r", "e", None, 0, 0, None, None, None, b"\x80")
    batch = [chunk(1, "loss", [0, 1]), chunk(2, "kl", [0]), chunk(3, "loss", [2]), event, chunk(5, "kl", [1, 2]),
             chunk(6, "loss", [3], rank=1), chunk(9, "loss", [4, 5])]  # 9: a part, above the cursor 6
    out = joined(batch, 6)
    assert [(e.id, e.kind, e.metric, e.rank) for e in out] == [
        (3, "m", "loss", 0), (4, "e", None, 0), (5, "m", "kl", 0), (6, "m", "loss", 1), (9, "m", "loss", 0)]
    assert [entry_points(e)[0].tolist() for e in out if e.kind == "m"] == [[0, 1, 2], [0, 1, 2], [3], [4, 5]]
    assert out[0].n == 3 and entry_points(out[0])[1].tolist() == [0.0, 1.0, 2.0]


def test_batches_waiting_for_the_ui_thread_are_taken_at_once_each_stream_joined():
    """A UI thread behind the writer takes every batch waiting in one go, an agent's stream chunks joined
    (it pays per entry, so it catches up), the newest run list, and is signalled once until it took them;
    a part above its batch's cursor is joined once a later batch's cursor passes it, as one write joins pages."""
    signals = []
    inbox = Inbox(lambda: signals.append(1))
    inbox.put("tcp://a:1", [chunk(1, "loss", [0]), chunk(2, "kl", [0])], 2, [{"id": "r"}])
    inbox.put("tcp://b:1", [chunk(1, "loss", [7])], 1, None)
    inbox.put("tcp://a:1", [chunk(3, "loss", [1]), chunk(5, "loss", [2])], 4, None)  # 5: a part, above 4
    inbox.put("tcp://a:1", [chunk(5, "loss", [3]), chunk(6, "kl", [1])], 6, [{"id": "r"}, {"id": "s"}])
    assert signals == [1]  # one signal for the four batches
    (a, a_entries, a_runs), (b, b_entries, b_runs) = inbox.take()
    assert (a, b, a_runs, b_runs) == ("tcp://a:1", "tcp://b:1", [{"id": "r"}, {"id": "s"}], None)
    assert [(e.id, e.metric, entry_points(e)[0].tolist()) for e in a_entries] == [(5, "loss", [0, 1, 2, 3]),
                                                                                 (6, "kl", [0, 1])]
    assert [(e.id, entry_points(e)[0].tolist()) for e in b_entries] == [(1, [7])]
    assert inbox.take() == []
    inbox.put("tcp://a:1", [chunk(7, "loss", [4])], 7, None)
    assert signals == [1, 1]  # taken: the next batch signals again
