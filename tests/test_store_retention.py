"""Retention in the app's store: run sizes, removal that spares every other run (even when killed
half-way), and clean-ups that pick the oldest ended runs and never a live one."""

from __future__ import annotations

import signal
import subprocess
import sys
import time

import pytest
from support.app_store import DAY, NOW, SPECIAL, A, B, body, chunk, fill, run
from support.paths import ROOT
from support.waiting import wait_until

from pilothouse.gui.local_store import LiveRunError, LocalStore, StoredRun, pick


def snapshot(store: LocalStore, url: str, run_id: str) -> tuple:
    """Everything stored of a run, as bytes: to compare bit for bit."""
    series = tuple(b"".join(a.tobytes() for a in store.series(url, run_id, m)) for m in store.metrics(url, run_id))
    rollouts = [(step, store.rollout_rows(url, run_id, step)) for step, _, _ in store.rollout_steps(url, run_id)]
    return series, store.events(url, run_id), rollouts


def test_sizes_follow_writes_ignore_resends_and_are_counted_once_for_an_old_store(tmp_path):
    store = LocalStore(tmp_path / "s.sqlite")
    next_id = fill(store, A, "big", 1, 300, points=100)
    fill(store, A, "small", next_id, 30, points=100)
    sizes = store.run_sizes()
    assert 9 < sizes[(A, "big")] / sizes[(A, "small")] < 11  # ten times the entries, ten times the bytes
    used = store.db.execute("SELECT (page_count - freelist_count) * page_size FROM pragma_page_count, "
                            "pragma_freelist_count, pragma_page_size").fetchone()[0]
    assert abs(sum(sizes.values()) - used) <= 0.01 * used  # the runs' shares add up to the file's used pages
    fill(store, A, "small", next_id, 30, points=100)  # a page re-sent after a reconnect
    assert store.run_sizes() == sizes
    store.db.execute("DROP TABLE run_bytes")  # a store from before run sizes
    store.db.execute("DROP TRIGGER entry_bytes")
    store.db.execute("PRAGMA user_version=0")  # as a file from before the schema was numbered
    store.close()
    assert LocalStore(tmp_path / "s.sqlite").run_sizes() == sizes


def test_removal_spares_other_runs_bit_for_bit_and_a_removed_run_stays_removed(tmp_path):
    store = LocalStore(tmp_path / "s.sqlite")
    for url in (A, B):
        store.put_runs(url, [run("r1"), run("r2")])
        store.write_page(url, [chunk(1, "r1", "reward/mean", range(7), SPECIAL),
                               body(2, "r1", "e", {"event": "status", "status": "finished"}),
                               body(3, "r1", "r", {"step": 1, "time": 1.0, "rows": [{"prompt": "p", "reward": 1.0}]}),
                               chunk(4, "r2", "reward/mean", range(7), SPECIAL[::-1])], 4)
        fill(store, url, "r2", 5, 500)
    store.remember_selection([(A, "r1"), (A, "r2")])
    before = {key: snapshot(store, *key) for key in ((A, "r1"), (B, "r1"), (B, "r2"))}
    size = store.run_sizes()[(A, "r2")]

    assert store.remove_runs([(A, "r2")], batch=64) == size
    assert {key: snapshot(store, *key) for key in before} == before
    assert snapshot(store, A, "r2") == ((), [], [])
    assert (A, "r2") not in store.run_sizes() and {(r["agent"], r["id"]) for r in store.runs()} == set(before)
    assert store.selection() == [(A, "r1")] and store.removed() == {(A, "r2")} and store.pending_removals() == []

    store.put_runs(A, [run("r1"), run("r2")])  # the agent still lists it and re-sends its pages
    store.write_page(A, [chunk(4, "r2", "reward/mean", range(7), SPECIAL), chunk(600, "r2", "m0", [9], [1.0]),
                         chunk(601, "r1", "loss", [0], [0.5])], 601)
    assert (A, "r2") not in {(r["agent"], r["id"]) for r in store.runs()} and store.metrics(A, "r2") == []
    assert store.series(A, "r1", "loss")[1].tolist() == [0.5]  # the other runs keep recording


def test_a_live_run_is_removed_only_by_force_and_never_collected(tmp_path):
    store = LocalStore(tmp_path / "s.sqlite")
    store.put_runs(A, [run(status, status, ended=None, last_seen=1.0) for status in ("running", "paused", "stale")])
    for i, status in enumerate(("running", "paused", "stale")):
        fill(store, A, status, 1 + 100 * i, 50)
    assert store.collect(older_than=0.0, max_size=0, now=NOW) == []
    with pytest.raises(LiveRunError, match="running"):
        store.remove_runs([(A, "running"), (A, "paused")])
    assert len(store.runs()) == 3 and store.removed() == set() and store.metrics(A, "paused") == ["m0", "m1", "m2"]
    store.remove_runs([(A, "running")], force=True)
    assert [r["id"] for r in store.runs()] == ["paused", "stale"] and store.metrics(A, "running") == []


def test_collect_picks_by_age_and_by_size_oldest_ended_first(tmp_path):
    store = LocalStore(tmp_path / "s.sqlite")
    store.put_runs(A, [run("old", ended=NOW - 40 * DAY), run("crashed", "crashed", ended=NOW - 35 * DAY),
                       run("recent", ended=NOW - 2 * DAY),
                       run("quiet", "crashed", ended=None, last_seen=NOW - 50 * DAY),  # no end: last heard of
                       run("live", "running", ended=None, last_seen=NOW - 90 * DAY)])
    for i, run_id in enumerate(("old", "crashed", "recent", "quiet", "live")):
        fill(store, A, run_id, 1 + 1000 * i, 100)
    ids = lambda runs: [r.run_id for r in runs]  # noqa: E731
    assert ids(store.collect(30 * DAY, None, NOW)) == ["quiet", "old", "crashed"]
    assert ids(store.collect(45 * DAY, None, NOW)) == ["quiet"]
    total = sum(store.run_sizes().values())
    each = store.run_sizes()[(A, "old")]
    assert ids(store.collect(None, total - each // 2, NOW)) == ["quiet"]  # one run's worth over: the oldest goes
    assert ids(store.collect(None, total - 2.5 * each, NOW)) == ["quiet", "old", "crashed"]
    assert ids(store.collect(None, 0, NOW)) == ["quiet", "old", "crashed", "recent"]  # the live one stays
    assert ids(store.collect(45 * DAY, total - 1.5 * each, NOW)) == ["quiet", "old"]
    assert ids(store.collect(None, None, NOW)) == [] and store.runs() and len(store.run_sizes()) == 5


def test_pick_stops_at_the_first_run_neither_old_nor_needed():
    runs = [StoredRun(A, f"r{i}", f"p/r{i}", "finished", ended=float(i), size=10) for i in range(5)]
    assert [r.run_id for r in pick(runs, older_than=2.5, max_size=None, now=5.0)] == ["r0", "r1", "r2"]
    assert [r.run_id for r in pick(runs, older_than=None, max_size=25, now=5.0)] == ["r0", "r1", "r2"]
    assert pick(runs, older_than=None, max_size=50, now=5.0) == []


def test_marks_move_with_an_old_journal_and_go_with_the_agents_data(tmp_path):
    store = LocalStore(tmp_path / "s.sqlite")
    store.adopt_journal(A, "j1")
    store.put_runs(A, [run("r1")])
    fill(store, A, "r1", 1, 10)
    store.remove_runs([(A, "r1")])
    assert store.adopt_journal(A, "j2") is True  # the agent was wiped: its new r1 is another run
    store.put_runs(A, [run("r1")])
    fill(store, A, "r1", 1, 10)
    assert store.removed() == {(f"{A}#j1", "r1")} and [r["id"] for r in store.runs(A)] == ["r1"]
    store.remove_runs([(A, "r1")])
    store.remove_agent(A, keep_data=False)  # forgotten with its data: re-added, everything comes again
    assert store.removed() == {(f"{A}#j1", "r1")}
    store.put_runs(A, [run("r1")])
    assert [r["id"] for r in store.runs(A)] == ["r1"]


KILLED_REMOVER = """
import sys
from pilothouse.gui import local_store
local_store.BATCH_PAUSE = 0.005
store = local_store.LocalStore(sys.argv[1])
print("marking", flush=True)
store.remove_runs([(sys.argv[2], "big")], batch=20)
print("done", flush=True)
"""


def test_a_removal_killed_half_way_leaves_the_run_hidden_then_finishes_and_spares_the_others(tmp_path):
    path = tmp_path / "s.sqlite"
    store = LocalStore(path)
    store.put_runs(A, [run("big"), run("other")])
    store.put_runs(B, [run("big")])
    next_id = fill(store, A, "big", 1, 4000)
    fill(store, A, "other", next_id, 200)
    fill(store, B, "big", 1, 200)  # the same run id on another agent
    store.remember_selection([(A, "big"), (A, "other")])
    spared = {key: snapshot(store, *key) for key in ((A, "other"), (B, "big"))}
    count = lambda: store.db.execute("SELECT COUNT(*) FROM entries WHERE agent=? AND run='big'",  # noqa: E731
                                     [A]).fetchone()[0]

    remover = subprocess.Popen([sys.executable, "-c", KILLED_REMOVER, str(path), A], cwd=ROOT,
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        wait_until(lambda: count() <= 4000 - 5 * 20 or remover.poll() is not None, timeout=20, what="a few batches")
        remover.send_signal(signal.SIGKILL)
        remover.wait(timeout=10)
    finally:
        if remover.poll() is None:
            remover.kill()
    assert remover.returncode == -signal.SIGKILL, remover.stderr.read()
    assert 0 < count() < 4000  # killed mid-way

    store.close()
    store = LocalStore(path)  # the app starts again
    assert [(r["agent"], r["id"]) for r in store.runs()] == [(A, "other"), (B, "big")]
    assert store.pending_removals() == [(A, "big")] and (A, "big") not in store.run_sizes()
    assert store.selection() == [(A, "other")]
    started = time.monotonic()
    assert store.finish_removals() == 1
    assert time.monotonic() - started < 5
    assert count() == 0 and store.pending_removals() == [] and store.removed() == {(A, "big")}
    assert {key: snapshot(store, *key) for key in spared} == spared
