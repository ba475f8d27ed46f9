"""The README's promises under real faults: real agent and trainer processes, real sockets."""

from __future__ import annotations

import json
import signal
import threading
import time

import numpy as np
from support.processes import AgentProcess, finish, start_trainer
from support.sockets import free_port
from support.waiting import wait_until

import pilothouse as ph
from pilothouse.client import Client
from pilothouse.wire.entries import entry_points

TRAINER = """
run = ph.init(project="dur", name=ARGS[0], agent=URL, heartbeat=0.2)
print(run.id, flush=True)
n, delay = int(ARGS[1]), float(ARGS[2])
for s in range(n):
    run.log({"x": float(s), "y": s * 2.0}, step=s)
    if delay:
        time.sleep(delay)
ok = run.finish(timeout=60)
import json
print(json.dumps({"ok": ok, **run.stats}), flush=True)
"""


def assert_complete(client: Client, run_id: str, n: int) -> None:
    for metric, scale in (("x", 1.0), ("y", 2.0)):
        steps, vals, _ = client.series(run_id, metric)
        assert len(steps) == n, f"{metric}: {len(steps)} points stored, {n} logged"
        assert np.array_equal(np.sort(steps), np.arange(n)), f"{metric}: gaps or duplicates"
        assert np.array_equal(vals, steps * scale)


def test_agent_sigkilled_and_restarted_twice_every_point_once(tmp_path, agent_proc):
    n = 4000
    trainer = start_trainer(tmp_path, TRAINER, agent_proc.url, "survivor", str(n), "0.001")
    run_id = trainer.stdout.readline().strip()
    for _ in range(2):
        with agent_proc.client() as c:
            wait_until(lambda: c.runs() and any(r["id"] == run_id and r["last_step"] for r in c.runs()),
                       what="trainer data to arrive")
        agent_proc.kill(signal.SIGKILL)
        time.sleep(0.7)
        agent_proc.start()
    stats = json.loads(finish(trainer).splitlines()[-1])
    assert stats["ok"] and stats["dropped_records"] == 0 and stats["acked_seq"] == n
    with agent_proc.client() as c:
        assert_complete(c, run_id, n)
        run = next(r for r in c.runs() if r["id"] == run_id)
        assert run["status"] == "finished" and run["lost_records"] == 0


def follow_steps(client: Client, run_id: str, after: int, stop: threading.Event, got: list, until: int):
    """Collect x's steps from a live follow until ``until`` points or ``stop``; returns the cursor."""
    cursor = after
    for page in client.follow(after=after, run=run_id, kinds=["m"], idle=0.1):
        for e in page.entries:
            if e.metric == "x":
                got.extend(entry_points(e)[0].tolist())
        cursor = page.cursor
        if stop.is_set() or len(got) >= until:
            return cursor
    return cursor


def test_reader_disconnecting_mid_stream_misses_nothing(tmp_path, agent_proc):
    n = 3000
    trainer = start_trainer(tmp_path, TRAINER, agent_proc.url, "reader", str(n), "0.001")
    run_id = trainer.stdout.readline().strip()
    got: list[int] = []
    stop = threading.Event()
    cursor = 0
    for part in range(1, 4):  # three readers in turn, each picking up at the last cursor
        with Client(agent_proc.url) as c:
            cursor = follow_steps(c, run_id, cursor, stop, got, until=n * part // 3)
        time.sleep(0.3)  # gone for a while: the trainer keeps logging
    finish(trainer)
    assert sorted(got) == list(range(n)), "a reconnecting reader missed or doubled points"


def test_late_joiner_gets_history_then_live_without_gap_at_the_seam(tmp_path, agent_proc):
    n = 3000
    trainer = start_trainer(tmp_path, TRAINER, agent_proc.url, "late", str(n), "0.001")
    run_id = trainer.stdout.readline().strip()
    with agent_proc.client() as c:
        wait_until(lambda: any(r["id"] == run_id and (r["last_step"] or 0) > n // 3 for r in c.runs()),
                   what="a third of the run")
        got: list[int] = []
        follow_steps(c, run_id, 0, threading.Event(), got, until=n)
    finish(trainer)
    assert got == list(range(n))  # history and live in order, nothing twice


def test_four_trainers_at_once_into_one_agent(tmp_path, agent_proc):
    n = 2000
    trainers = [start_trainer(tmp_path, TRAINER, agent_proc.url, f"t{i}", str(n), "0", name=f"t{i}")
                for i in range(4)]
    ids = [t.stdout.readline().strip() for t in trainers]
    for t in trainers:
        assert json.loads(finish(t).splitlines()[-1])["ok"]
    with agent_proc.client() as c:
        for run_id in ids:
            assert_complete(c, run_id, n)
        statuses = {r["id"]: r["status"] for r in c.runs()}
        assert all(statuses[i] == "finished" for i in ids), statuses


def test_no_agent_training_continues_and_drops_are_counted_exactly(tmp_path):
    port = free_port()
    url = f"tcp://127.0.0.1:{port}"
    run = ph.init(project="alone", name="no-agent", agent=url, buffer_mb=0.25)
    n = 20_000
    for s in range(n):
        run.log({"a": float(s), "b": 1.0, "c": 2.0}, step=s)
    wait_until(lambda: run.stats["records"] == n, what="the outbox to batch every record")
    st = run.stats
    assert st["dropped_records"] > 0, "a 256 KB buffer cannot hold 20k records"
    assert st["dropped_records"] + st["buffered_records"] == n
    assert st["dropped_points"] == 3 * st["dropped_records"]
    # the agent appears late: what the buffer kept arrives, what it dropped is reported as lost
    proc = AgentProcess(tmp_path / "late-agent", port).start()
    try:
        assert run.finish(timeout=30)
        with proc.client() as c:
            steps, _, _ = c.series(run.id, "a")
            kept = n - st["dropped_records"]
            assert np.array_equal(steps, np.arange(n - kept, n)), "the newest records are the ones kept"
            row = next(r for r in c.runs() if r["id"] == run.id)
            assert row["lost_records"] == st["dropped_records"] == row["dropped_records"]
            events = [e for p in c.history(run.id, ["e"]) for e in p.entries]
            assert any(b"loss" in e.body for e in events)
    finally:
        proc.stop()


def test_sigkilled_trainer_shows_crashed_within_10_s(tmp_path, agent_proc):
    trainer = start_trainer(tmp_path, TRAINER, agent_proc.url, "doomed", "1000000", "0.01")
    run_id = trainer.stdout.readline().strip()
    with agent_proc.client() as c:
        wait_until(lambda: any(r["id"] == run_id and r["last_step"] for r in c.runs()), what="data")
        trainer.kill()
        trainer.wait()
        killed = time.monotonic()
        wait_until(lambda: next(r for r in c.runs() if r["id"] == run_id)["status"] == "crashed",
                   timeout=10, what="status crashed")
        assert time.monotonic() - killed < 10


def test_rollouts_keep_every_step(tmp_path, agent_proc):
    run = ph.init(project="rl", name="rollouts", agent=agent_proc.url)
    for step in range(5):
        run.log_rollouts(step, [{"prompt": f"{step}+1=", "completion": str(step + 1), "reward": 1.0},
                                {"prompt": f"{step}+2=", "completion": "?", "reward": 0.0}])
    assert run.finish()
    with agent_proc.client() as c:
        entries = [e for p in c.history(run.id, ["r"]) for e in p.entries]
    from pilothouse.wire.entries import entry_body
    bodies = [entry_body(e) for e in entries]
    assert [b["step"] for b in bodies] == [0, 1, 2, 3, 4]
    assert bodies[3]["rows"][0] == {"prompt": "3+1=", "completion": "4", "reward": 1.0}
