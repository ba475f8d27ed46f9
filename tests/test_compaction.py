"""Packing small metric entries into large compressed ones: every point back bit for bit, to
every reader, wherever its cursor stood; on the agent's own Store and on a real agent."""

from __future__ import annotations

import sqlite3
import time

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from support.agent_journal import SIZE_SQL, write_runs
from support.float_bits import bits
from support.processes import AgentProcess, start_trainer
from support.sockets import free_port
from support.waiting import wait_until

from pilothouse.node.compactor import Compactor
from pilothouse.node.journal import Store
from pilothouse.store.packing import MAX_POINTS, MIN_ROWS
from pilothouse.wire import packed_chunks
from pilothouse.wire.entries import KIND_METRIC, entry_points

i64 = st.integers(-2**63, 2**63 - 1)


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(i64, i64, i64, st.integers(1, 5)), min_size=1, max_size=60), st.integers(0, 400))
def test_any_bits_come_back_and_a_cursor_inside_gets_exactly_the_rest(points, after):
    """Steps, values and times as any 64-bit patterns (NaN payloads, -0.0, subnormals, wrapping
    deltas), joined from entries of 1-5 points: the points of entries above ``after`` come back."""
    counts = np.array([c for *_, c in points], np.uint32)
    origins = np.cumsum(np.arange(1, len(points) + 1) * 3)  # ascending ids with gaps (other runs' entries)
    steps, vals, times = (np.repeat(np.array([p[i] for p in points], np.int64), counts) for i in range(3))
    blob = packed_chunks.pack(origins, counts, packed_chunks.Points(steps.tobytes(), vals.tobytes(), times.tobytes()))
    skip = int(counts[origins <= after].sum())
    n, back = packed_chunks.unpack(blob, after)
    assert n == len(steps) - skip
    assert back == (steps[skip:].tobytes(), vals[skip:].tobytes(), times[skip:].tobytes())


def test_a_pack_that_does_not_add_up_is_refused():
    with pytest.raises(ValueError, match="do not hold"):
        packed_chunks.pack(np.array([1, 2]), np.array([1, 1], np.uint32), packed_chunks.Points(b"\0" * 8, b"\0" * 8,
                                                                                            b"\0" * 8))


def points_by_metric(store: Store, after: int = 0) -> dict[str, list[tuple]]:
    """Every (step, value bits, time bits) a reader from ``after`` gets, per metric, in order."""
    out: dict[str, list[tuple]] = {}
    while True:
        entries, cursor = store.read(after, kinds=[KIND_METRIC], limit_points=997)  # pages end mid-pack
        for e in entries:
            s, v, t = entry_points(e)
            out.setdefault(e.metric, []).extend(zip(s.tolist(), v.view(np.int64).tolist(), t.view(np.int64).tolist()))
        if not entries:
            return out
        after = cursor


def pack_all(store: Store, compactor: Compactor) -> int:
    packed = 0
    while compactor.pending():
        store.begin()
        packed += compactor.step()
        store.commit()
    return packed


def test_the_store_packs_one_point_entries_and_readers_anywhere_lose_and_repeat_nothing(tmp_path):
    path = tmp_path / "journal.sqlite"
    write_runs(path, {"a": {"steps": 3000, "per_call": 1}, "b": {"steps": 40, "per_call": 1}})
    store = Store(path)
    rows_before = store.db.execute("SELECT COUNT(*) FROM journal WHERE kind='m'").fetchone()[0]
    everything = points_by_metric(store)
    cursors = [store.head // 7, store.head // 2, store.head - 3]
    seen = {c: points_by_metric(store, c) for c in cursors}  # what readers there still had to get
    size_before = {r: b for r, _, b in store.db.execute(SIZE_SQL)}

    packed = pack_all(store, Compactor(store))
    rows_after = store.db.execute("SELECT COUNT(*) FROM journal WHERE kind='m'").fetchone()[0]
    assert packed > 5000 and rows_after < rows_before / 20
    assert points_by_metric(store) == everything
    for c in cursors:
        assert points_by_metric(store, c) == seen[c]  # a cursor inside a packed entry: exactly the rest
    steps, values, _ = store.series("a", "loss")
    assert steps.tolist() == list(range(3000)) and values.tolist() == [1.0 / (s + 1) for s in range(3000)]
    # the run's size follows its rows, and shrank; "b" has too few entries to be packed
    sizes = {r: (n, b) for r, n, b in store.db.execute(SIZE_SQL)}
    assert {r["id"]: (r["points"], r["bytes"]) for r in store.db.query("SELECT id, points, bytes FROM runs")} == sizes
    assert sizes["a"][1] < size_before["a"] / 5 and sizes["b"][1] == size_before["b"]
    assert store.db.execute("SELECT COUNT(*) FROM journal WHERE run='b' AND first_id IS NOT NULL").fetchone()[0] == 0
    assert max(n for (n,) in store.db.execute("SELECT n FROM journal WHERE first_id IS NOT NULL")) <= MAX_POINTS
    store.db.close()


def test_a_packing_undone_is_counted_again_and_changes_nothing(tmp_path):
    path = tmp_path / "journal.sqlite"
    write_runs(path, {"a": {"steps": 600, "per_call": 1}})
    store = Store(path)
    before = store.db.execute("SELECT * FROM journal ORDER BY id").fetchall()
    compactor = Compactor(store)
    store.begin()
    compactor.step()  # the survey
    store.commit()
    store.begin()
    assert compactor.step() > 0
    store.rollback()  # as a full disk makes the agent do
    compactor.failed()
    assert store.db.execute("SELECT * FROM journal ORDER BY id").fetchall() == before
    compactor._held_until = 0.0  # the second's wait, skipped
    assert pack_all(store, compactor) > 0 and points_by_metric(store)["loss"][-1][0] == 599
    store.db.close()


LOGS = """
run = ph.init(project="pack", name="live", agent=URL)
print(run.id, flush=True)
odd = [float("nan"), float("inf"), -0.0, 5e-324, -float("inf")]
for step in range(int(ARGS[0])):
    run.log({"loss": 1.0 / (step + 1), "odd": odd[step % 5], "gpu/util": float(step % 7)}, step=step)
    if step % 5 == 0:
        time.sleep(0.01)  # turns of a few points: many small entries, as a paced trainer makes
run.finish()
"""


def test_an_agent_packs_a_live_trainers_points_while_a_reader_follows(tmp_path):
    proc = AgentProcess(tmp_path / "agent", free_port(), [])
    (tmp_path / "agent").mkdir()
    write_runs(proc.data / "journal.sqlite", {"old": {"steps": 2000, "per_call": 1}})  # packed by the survey
    proc.start()
    steps = 3000
    try:
        with proc.client() as client:
            head = client.read(0).cursor
            follower = client.follow(after=head // 3, kinds=[KIND_METRIC], idle=0.2)
            trainer = start_trainer(tmp_path, LOGS, proc.url, str(steps))
            run = trainer.stdout.readline().strip()
            got: dict[tuple[str, str], list] = {}
            deadline = time.monotonic() + 60
            while sum(len(v) for k, v in got.items() if k[0] == run) < 3 * steps and time.monotonic() < deadline:
                for e in next(follower).entries:
                    s, v, _t = entry_points(e)
                    got.setdefault((e.run, e.metric), []).extend(zip(s.tolist(), bits(v)))
            assert trainer.wait(30) == 0

            def packed() -> int:
                con = sqlite3.connect(f"file:{proc.data / 'journal.sqlite'}?mode=ro", uri=True, timeout=10)
                try:
                    return con.execute("SELECT COUNT(*) FROM journal WHERE run=? AND first_id IS NOT NULL",
                                       [run]).fetchone()[0]
                finally:
                    con.close()
            wait_until(lambda: packed() > 0, timeout=30, what="the live run's entries packed")
            odd = [float("nan"), float("inf"), -0.0, 5e-324, -float("inf")]
            want = {"loss": [1.0 / (s + 1) for s in range(steps)], "odd": [odd[s % 5] for s in range(steps)],
                    "gpu/util": [float(s % 7) for s in range(steps)]}
            for metric, values in want.items():
                expected = list(zip(range(steps), bits(np.array(values))))
                assert got[(run, metric)] == expected  # followed live: each point once, in order
                s, v, _ = client.series(run, metric)  # read back after packing
                assert list(zip(s.tolist(), bits(v))) == expected
            s, v, _ = client.series("old", "loss")
            assert s.tolist() == list(range(2000)) and v.tolist() == [1.0 / (x + 1) for x in range(2000)]
            rows = {r["id"]: r for r in client.runs()}
            assert rows[run]["points"] == 3 * steps and rows["old"]["bytes"] < 2000 * 2 * 88 / 4
    finally:
        proc.stop()


def test_a_stream_below_the_threshold_stays_plain(tmp_path):
    path = tmp_path / "journal.sqlite"
    write_runs(path, {"a": {"steps": MIN_ROWS - 1, "per_call": 1}})
    store = Store(path)
    assert pack_all(store, Compactor(store)) == 0
    assert store.db.execute("SELECT COUNT(*) FROM journal WHERE first_id IS NOT NULL").fetchone()[0] == 0
    store.db.close()
