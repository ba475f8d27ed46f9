"""Agent links against a real agent subprocess and a real trainer: complete data, health, resume."""

from __future__ import annotations

import signal
import threading
import time

import numpy as np
from conftest import finish, free_port, start_trainer, wait_until

from pilothouse.gui.local_store import LocalStore
from pilothouse.gui.network import AgentLink, Links

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
    """Collects what a link hands over, as the Qt layer would (from the link's thread)."""

    def __init__(self):
        self.lock = threading.Lock()
        self.entries: list = []
        self.runs: list | None = None
        self.states: list[str] = []

    def on_batch(self, url, entries, runs):
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
    from conftest import AgentProcess

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
