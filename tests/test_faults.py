"""Fault injection with real processes: SIGKILLed agents, readers and trainers, and a stalled reader.

Every trainer here logs metrics whose value is its step, steps 0..N-1; every check compares what
was stored or received with exactly range(N): nothing lost, nothing doubled.
"""

from __future__ import annotations

import json
import random
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np
import psutil
import zmq
from support.paths import ROOT
from support.processes import finish, start_trainer
from support.runs import run_events
from support.sockets import as_owner
from support.waiting import wait_until

from pilothouse.client import Client
from pilothouse.gui.local_store import LocalStore
from pilothouse.wire.entries import ENTRY_FIELDS, KIND_METRIC, entry_points
from pilothouse.wire.messages import pack, unpack

# Logs {"x": s, "y": 2s} at steps 0, 1, 2, ... until the file ARGS[1] exists, then finishes.
UNTIL_TOLD = """
import json, os
run = ph.init(project="faults", name=ARGS[0], agent=URL, heartbeat=0.2)
print(run.id, flush=True)
stop_file, delay = ARGS[1], float(ARGS[2])
s = 0
while not os.path.exists(stop_file):
    run.log({"x": float(s), "y": s * 2.0}, step=s)
    s += 1
    time.sleep(delay)
ok = run.finish(timeout=60)
print(json.dumps({"ok": ok, "n": s, **run.stats}), flush=True)
"""


def run_row(url: str, run_id: str, timeout: float = 5.0) -> dict:
    """The agent's row for one run, {} if it does not know it yet (a fresh client each time:
    the agent may have restarted since the last call)."""
    with Client(url, timeout=timeout) as c:
        return next((r for r in c.runs() if r["id"] == run_id), {})


def assert_steps_exactly_once(steps: np.ndarray, n: int, what: str) -> None:
    """``steps`` must be 0..n-1, each exactly once (order aside)."""
    steps = np.asarray(steps)
    uniq, counts = np.unique(steps, return_counts=True)
    doubled = int((counts > 1).sum())
    missing = n - int(np.isin(np.arange(n), uniq).sum())
    extra = int((~np.isin(uniq, np.arange(n))).sum())
    assert (len(steps), missing, doubled, extra) == (n, 0, 0, 0), (
        f"{what}: {len(steps)} points for {n} steps, {missing} missing, {doubled} doubled, {extra} unknown")


def assert_agent_has_every_step_once(url: str, run_id: str, n: int) -> None:
    """Both metrics, read back through the client, hold steps 0..n-1 once with value = step x scale."""
    with Client(url, timeout=10) as c:
        for metric, scale in (("x", 1.0), ("y", 2.0)):
            steps, vals, _ = c.series(run_id, metric)
            assert_steps_exactly_once(steps, n, f"agent {metric}")
            assert np.array_equal(vals, steps * scale), f"agent {metric}: values do not match their steps"


def trainer_report(proc: subprocess.Popen) -> dict:
    """The JSON line a trainer script prints last (it must exit 0)."""
    return json.loads(finish(proc).splitlines()[-1])


def end_trainer(proc: subprocess.Popen, stop_file: Path) -> None:
    """Cleanup after a failure: tell the trainer to stop, kill it if it does not."""
    stop_file.touch()
    if proc.poll() is None:
        try:
            proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def assert_no_trainer_loss(report: dict) -> None:
    """The trainer's own counters: everything acknowledged, nothing dropped."""
    n = report["n"]
    assert report["ok"], report
    assert (report["records"], report["acked_seq"], report["dropped_records"], report["dropped_points"],
            report["buffered_records"]) == (n, n, 0, 0, 0), report


# --- 1. the agent SIGKILLed again and again ---------------------------------------------------------

AGENT_KILLS = 10


def test_agent_sigkilled_10_times_at_random_moments_every_point_once(tmp_path, agent_proc):
    """Kill -9 at random moments (seeded) while a trainer logs, restart on the same data and port:
    the trainer resends what was not acknowledged, the journal keeps each step exactly once."""
    stop_file = tmp_path / "stop"
    trainer = start_trainer(tmp_path, UNTIL_TOLD, agent_proc.url, "kill9", str(stop_file), "0.001")
    run_id = trainer.stdout.readline().strip()
    rng = random.Random(1234)
    stored_at_kill: list[int] = []
    try:
        wait_until(lambda: run_row(agent_proc.url, run_id).get("last_step"), what="first points stored")
        for _ in range(AGENT_KILLS):
            time.sleep(rng.uniform(0.05, 0.6))
            stored_at_kill.append(run_row(agent_proc.url, run_id)["last_step"] or 0)
            agent_proc.kill(signal.SIGKILL)
            agent_proc.start()
        time.sleep(0.3)
        stop_file.touch()
        report = trainer_report(trainer)
    finally:
        end_trainer(trainer, stop_file)
    print(f"\n{AGENT_KILLS} agent kills; last stored step before each: {stored_at_kill}; "
          f"{report['n']} steps logged")
    grew = sum(b > a for a, b in zip(stored_at_kill, stored_at_kill[1:]))
    assert grew >= (AGENT_KILLS - 1) // 2, f"data arrived between only {grew} of {AGENT_KILLS - 1} kills"
    assert_no_trainer_loss(report)
    assert_agent_has_every_step_once(agent_proc.url, run_id, report["n"])
    row = run_row(agent_proc.url, run_id)
    assert (row["status"], row["lost_records"], row["last_step"]) == ("finished", 0, report["n"] - 1), row


# --- 2. the app's process SIGKILLed and restarted -----------------------------------------------------

READER_KILLS = 3


def start_reader(url: str, store: Path) -> subprocess.Popen:
    """The app's network layer in a process of its own (tests/support/fault_reader.py), started and ready."""
    reader = Path(__file__).parent / "support" / "fault_reader.py"
    proc = subprocess.Popen([sys.executable, str(reader), url, str(store)],
                            cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    line = proc.stdout.readline().strip()
    assert line == "ready qt=False", f"reader did not start cleanly: {line!r} {'' if line else proc.stderr.read()}"
    return proc


def local_steps(store: LocalStore, url: str, run_id: str, metric: str = "x") -> np.ndarray:
    return store.series(url, run_id, metric)[0]


def test_reader_process_sigkilled_3_times_local_store_holds_every_point_once(tmp_path, agent_proc):
    """The app dies mid-stream (kill -9, mid-transaction or not) and stays dead for a second while
    the trainer logs; restarted on the same store file it resumes at its cursor: every step once."""
    url = agent_proc.url
    stop_file, path = tmp_path / "stop", tmp_path / "app.sqlite"
    trainer = start_trainer(tmp_path, UNTIL_TOLD, url, "appkill", str(stop_file), "0.001")
    run_id = trainer.stdout.readline().strip()
    reader = start_reader(url, path)
    store = LocalStore(path)
    rng = random.Random(99)
    try:
        local_at_kill: list[int] = []
        for _ in range(READER_KILLS):
            have = len(local_steps(store, url, run_id))
            wait_until(lambda: len(local_steps(store, url, run_id)) > have, what="the reader storing points")
            time.sleep(rng.uniform(0.1, 0.5))
            reader.kill()  # SIGKILL
            reader.wait(timeout=10)
            local_at_kill.append(len(local_steps(store, url, run_id)))
            agent_before = run_row(url, run_id)["last_step"]
            time.sleep(1.0)
            agent_after = run_row(url, run_id)["last_step"]
            assert agent_after > agent_before, "the trainer must keep logging while the reader is dead"
            reader = start_reader(url, path)
        stop_file.touch()
        report = trainer_report(trainer)
        assert_no_trainer_loss(report)
        n = report["n"]
        wait_until(lambda: min(len(local_steps(store, url, run_id, m)) for m in ("x", "y")) >= n,
                   timeout=15, what="every point in the local store")
        time.sleep(0.3)  # a late duplicate would land now
        print(f"\nreader killed {READER_KILLS} times with {local_at_kill} points stored; {n} steps logged")
        assert local_at_kill == sorted(local_at_kill) and 0 < local_at_kill[0] and local_at_kill[-1] < n
        with Client(url) as c:
            for metric, scale in (("x", 1.0), ("y", 2.0)):
                steps, vals, times = store.series(url, run_id, metric)
                assert_steps_exactly_once(steps, n, f"local store {metric}")
                assert np.array_equal(vals, steps * scale)
                ref = c.series(run_id, metric)  # and bit for bit what the agent holds
                assert all(a.tobytes() == b.tobytes() for a, b in zip((steps, vals, times), ref)), metric
        ids = [i for (i,) in store.db.execute("SELECT id FROM entries WHERE agent=?", [url])]
        assert len(ids) == len(set(ids)) and store.cursor(url) >= max(ids)
    finally:
        end_trainer(trainer, stop_file)
        reader.kill()
        reader.wait(timeout=10)
        store.close()


# --- 3. a stalled reader costs the agent a cursor, and the trainer nothing ---------------------------

# Logs N records of 10 scalars (each = the step) as fast as it can, timing every log() call.
FAST = """
import json, statistics
run = ph.init(project="faults", name=ARGS[0], id=ARGS[0], agent=URL, heartbeat=0.2)
n = int(ARGS[1])
pc = time.perf_counter
took = [0.0] * n
start = time.monotonic()
for s in range(n):
    f = float(s)
    m = {"x": f, "m1": f, "m2": f, "m3": f, "m4": f, "m5": f, "m6": f, "m7": f, "m8": f, "m9": f}
    t0 = pc()
    run.log(m, step=s)
    took[s] = pc() - t0
logged = time.monotonic()
ok = run.finish(timeout=60)
print(json.dumps({"ok": ok, "n": n, "median_us": statistics.median(took) * 1e6, "log_s": logged - start,
                  "finish_s": time.monotonic() - logged, **run.stats}), flush=True)
"""
FAST_STEPS = 400_000


class RssWatch(threading.Thread):
    """Samples a process's resident set size every 10 ms; ``peak()`` since the last ``reset()``."""

    def __init__(self, pid: int):
        super().__init__(daemon=True)
        self.proc = psutil.Process(pid)
        self.top = 0
        self.quit = threading.Event()

    def run(self) -> None:
        while not self.quit.wait(0.01):
            self.top = max(self.top, self.proc.memory_info().rss)

    def peak(self) -> int:
        return max(self.top, self.proc.memory_info().rss)

    def reset(self) -> None:
        self.top = self.proc.memory_info().rss


class SlowReader(threading.Thread):
    """An app that reads one page at a time (credit 1) and sleeps 0.5 s per page while ``stalled``
    is set, then reads as fast as it can; collects the steps of metric ``x`` of one run."""

    def __init__(self, url: str, run_id: str, n: int):
        super().__init__(daemon=True)
        self.url, self.run_id, self.n = url, run_id, n
        self.stalled, self.subscribed, self.quit = threading.Event(), threading.Event(), threading.Event()
        self.stalled.set()
        self.steps: list[int] = []
        self.stalled_pages = 0

    def run(self) -> None:
        with Client(self.url) as c:
            for page in c.follow(after=0, run=self.run_id, kinds=["m"], credit=1, idle=0.1):
                if page.cursor > 0:
                    self.subscribed.set()  # the agent answered the subscription
                for e in page.entries:
                    if e.metric == "x":
                        self.steps.extend(entry_points(e)[0].tolist())
                if self.quit.is_set():
                    return
                if len(self.steps) >= self.n:  # keep listening a little: a late duplicate would show
                    self.quit.wait(0.3)
                    self.quit.set()
                if self.stalled.is_set() and page.entries:
                    self.stalled_pages += 1
                    time.sleep(0.5)


class MuteReader:
    """A hand-written reader that subscribes with credit 1, then never reads and never returns credit.
    Its receive queue holds one message (RCVHWM 1, small kernel buffer), so anything the agent
    sent it beyond that would pile up in the agent's own memory."""

    CREDIT = 1

    def __init__(self, url: str, run_id: str):
        self.sock = zmq.Context.instance().socket(zmq.DEALER)
        self.sock.setsockopt(zmq.LINGER, 0)
        self.sock.setsockopt(zmq.RCVHWM, 1)
        self.sock.setsockopt(zmq.RCVBUF, 64 << 10)
        as_owner(self.sock)
        self.sock.connect(url)
        self.sock.send(pack({"t": "sub", "after": 0, "credit": self.CREDIT, "run": run_id, "kinds": []}))

    def drain(self) -> tuple[int, int]:
        """(data pages, metric points) that waited for it; then it leaves."""
        pages = points = 0
        while self.sock.poll(300, zmq.POLLIN):
            msg = unpack(self.sock.recv())
            if isinstance(msg, dict) and msg.get("t") == "data":
                pages += 1
                points += sum(e[ENTRY_FIELDS.index("n")] for e in msg["entries"] if e[2] == KIND_METRIC)
        self.sock.close(linger=0)
        return pages, points


RSS_BOUND_MB = 64
POINT_BYTES = 24  # step (int64), value and wall time (float64) of one point, as stored and sent


def test_stalled_readers_bound_agent_memory_and_leave_step_time_alone(tmp_path, agent_proc):
    """400k records of 10 scalars, once with no reader and once with a reader that takes a page every
    0.5 s plus one that never returns credit: the agent's memory stays bounded (credit, not buffers),
    the trainer's log() time stays put, and the slow reader, once it speeds up, gets every step once."""
    url = agent_proc.url
    watch = RssWatch(agent_proc.proc.pid)
    watch.start()
    time.sleep(0.3)
    rss0 = watch.peak()

    base = trainer_report(start_trainer(tmp_path, FAST, url, "baseline", str(FAST_STEPS), name="baseline"))
    rss_base = watch.peak()

    slow = SlowReader(url, "stalled", FAST_STEPS)
    slow.start()
    try:
        assert slow.subscribed.wait(10), "the slow reader's subscription was never answered"
        mute = MuteReader(url, "stalled")
        watch.reset()
        rss1 = watch.peak()  # after the baseline run: SQLite's cache and the allocator are warm
        stalled = trainer_report(start_trainer(tmp_path, FAST, url, "stalled", str(FAST_STEPS), name="stalled"))
        time.sleep(0.3)  # both readers still lag: the agent holds their cursors, nothing more
        rss_stalled = watch.peak()
        behind = len(slow.steps)
        slow.stalled.clear()  # the slow reader catches up at full speed
        slow.join(timeout=30)
        mute_pages, mute_points = mute.drain()
    finally:
        slow.quit.set()
        watch.quit.set()

    mb = 1 / (1 << 20)
    growth = (rss_stalled - rss1) * mb
    unread = (FAST_STEPS * 10 - mute_points) * POINT_BYTES * mb
    # the same run with no reader rose this far above idle at its peak (ingest batches, SQLite's cache, the
    # allocator: 67.7 MB in one CI run); readers that take nothing may add no more than 16 MB to that, and the
    # bound stays 16 MB below what they left unread, so an agent that held it would fail
    allowance = max(RSS_BOUND_MB, min((rss_base - rss0) * mb + 16, unread - 16))
    print(f"\nagent RSS: idle {rss0 * mb:.1f} MB, peak during the run without reader {rss_base * mb:.1f} MB, "
          f"{rss1 * mb:.1f} MB after it; peak with stalled readers {rss_stalled * mb:.1f} MB (+{growth:.1f} MB, "
          f"bound {allowance:.1f} MB; the mute reader left {unread:.0f} MB unread after {mute_pages} pages)")
    print(f"trainer log() median: {base['median_us']:.2f} us without reader, {stalled['median_us']:.2f} us "
          f"with stalled readers; wall {base['log_s']:.1f}+{base['finish_s']:.1f} s vs "
          f"{stalled['log_s']:.1f}+{stalled['finish_s']:.1f} s (logging+finish); the slow reader had "
          f"{behind}/{FAST_STEPS} steps after {slow.stalled_pages} slow pages when the trainer finished")
    assert_no_trainer_loss(base)
    assert_no_trainer_loss(stalled)
    assert 0 < behind < FAST_STEPS, "the slow reader was not behind: nothing was tested"
    assert unread > RSS_BOUND_MB, "too little data left unread for the memory bound to mean anything"
    assert growth < allowance, "the agent's memory grew with the data its stalled readers did not take"
    assert 1 <= mute_pages <= MuteReader.CREDIT + 1, "a reader got more pages than its credit (+1 for the sub)"
    assert stalled["median_us"] <= 2 * base["median_us"] + 2.0, "a stalled reader slowed the trainer's log()"
    assert not slow.is_alive(), f"the slow reader, read fast, got only {len(slow.steps)} of {FAST_STEPS} steps"
    assert_steps_exactly_once(np.array(slow.steps), FAST_STEPS, "slow reader x")


# --- 4. trainers SIGKILLed while paused, and while the agent is down ----------------------------------

STEERED = """
run = ph.init(project="faults", name=ARGS[0], agent=URL, heartbeat=0.2)
print(run.id, flush=True)
for s in range(10**7):
    run.sync(s)
    run.log({"x": float(s)}, step=s)
    time.sleep(0.01)
"""


def statuses(url: str, run_id: str) -> list[str]:
    """The run's status changes as recorded in the journal's events, oldest first."""
    with Client(url) as c:
        return [b["status"] for b in run_events(c, run_id, "status")]


def status_and_step(url: str, run_id: str) -> tuple[str | None, int | None]:
    row = run_row(url, run_id)
    return row.get("status"), row.get("last_step")


def test_trainers_killed_while_paused_and_while_the_agent_is_down_show_crashed(tmp_path, agent_proc):
    """A paused trainer stays paused across an agent restart and shows crashed once killed; a trainer
    killed while the agent was down shows crashed after the agent comes back (not running forever)."""
    url = agent_proc.url
    paused = start_trainer(tmp_path, STEERED, url, "paused", name="paused")
    orphan = start_trainer(tmp_path, STEERED, url, "orphan", name="orphan")
    paused_id, orphan_id = paused.stdout.readline().strip(), orphan.stdout.readline().strip()
    try:
        wait_until(lambda: run_row(url, paused_id).get("last_step") and run_row(url, orphan_id).get("last_step"),
                   what="both trainers logging")
        with Client(url) as c:
            answer = c.command(paused_id, "pause", wait=10)
        assert answer["state"] == "applied", answer
        held = answer["step"]  # paused in sync(step): the run's step is the one it holds at
        wait_until(lambda: status_and_step(url, paused_id) == ("paused", held), what="the pause and its step stored")

        agent_proc.kill(signal.SIGKILL)
        orphan.kill()  # dies while nobody watches
        orphan.wait(timeout=10)
        time.sleep(0.5)
        agent_proc.start()
        back = time.monotonic()
        time.sleep(0.6)  # the restarted agent counts silence from its start: let some pass
        wait_until(lambda: run_row(url, paused_id)["silent"] < 0.5, what="the paused trainer's heartbeat again")
        assert status_and_step(url, paused_id) == ("paused", held), "pause must survive an agent restart"
        paused.kill()
        paused.wait(timeout=10)
        killed = time.monotonic()
        wait_until(lambda: run_row(url, orphan_id)["status"] == "crashed", timeout=10,
                   what="the orphan's status crashed after the agent restart")
        orphan_after = time.monotonic() - back
        wait_until(lambda: run_row(url, paused_id)["status"] == "crashed", timeout=10,
                   what="the paused trainer's status crashed")
        paused_after = time.monotonic() - killed
        print(f"\ncrashed shown {orphan_after:.1f} s after the agent came back, {paused_after:.1f} s after "
              f"the paused trainer died (agent --stale-after 3)")
        assert run_row(url, paused_id)["last_step"] == held, "a paused trainer logged steps"
        with Client(url) as c:
            assert c.series(paused_id, "x")[0].max() == held - 1  # nothing logged since the pause
        assert statuses(url, orphan_id)[-1:] == ["crashed"] and "running" in statuses(url, orphan_id)
        assert statuses(url, paused_id)[-2:] == ["paused", "crashed"], statuses(url, paused_id)
    finally:
        for proc in (paused, orphan):
            if proc.poll() is None:
                proc.kill()
                proc.wait()


RAISES = """
run = ph.init(project="faults", name="raises", agent=URL, heartbeat=0.2)
print(run.id, flush=True)
for s in range(5):
    run.log({"x": float(s)}, step=s)
raise RuntimeError("loss exploded at step 4")
"""


def test_a_trainer_that_raises_ends_crashed_with_its_error(tmp_path, agent_proc):
    """An uncaught exception is not a finished run: on-call must see the crash and why at once."""
    proc = start_trainer(tmp_path, RAISES, agent_proc.url)
    run_id = proc.stdout.readline().strip()
    proc.wait(timeout=30)
    assert proc.returncode == 1 and "RuntimeError: loss exploded" in proc.stderr.read()  # Python's own report
    row = run_row(agent_proc.url, run_id)
    assert row["status"] == "crashed" and row["last_step"] == 4  # everything logged was kept
    with Client(agent_proc.url) as c:
        last = run_events(c, run_id, "status")[-1]
    assert last["status"] == "crashed" and last["reason"] == "RuntimeError: loss exploded at step 4"
