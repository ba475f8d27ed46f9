"""The agent journal's tiers, on real SQLite files and a real agent: every level equal to a fold
of the raw points (spikes, NaN, ±Inf and re-logged steps included) after live turns, packing, a
crash, an import-like rebuild and a journal from before the tiers; a real trainer's run answered
over the socket by ``Client.tiers``; bad tiers queries refused with the reason."""

from __future__ import annotations

import socket
import sqlite3
import time

import numpy as np
import pytest
from support.messages import batch_fields
from support.processes import AgentProcess, start_trainer
from support.sockets import free_port
from support.tier_records import same_buckets
from support.tier_records import spiky as spiky_walk
from support.waiting import wait_until

from pilothouse.client import AgentError
from pilothouse.node import journal_tiers
from pilothouse.node.compactor import Compactor
from pilothouse.node.journal import Store
from pilothouse.node.journal_tiers import MAX_QUERY_BLOCKS, NotReady
from pilothouse.store.tiers import LEVELS, WIDTHS, columns, level_for, levels
from pilothouse.wire.messages import MAX_TIER_METRICS

ALL = (-2.0 ** 63, 2.0 ** 63)


def spiky(seed: int, n: int) -> tuple[np.ndarray, np.ndarray]:
    """test_tiers' random walk (spikes, NaN, ±Inf, a gap, steps logged again), from a seed."""
    return spiky_walk(np.random.default_rng(seed), n)


def ingest(store: Store, run: str, series: dict[str, tuple[np.ndarray, np.ndarray]], per_turn: int,
           seq: int = 1) -> int:
    """Each metric's points through Store.ingest, ``per_turn`` steps per committed turn."""
    n = len(next(iter(series.values()))[0])
    for lo in range(0, n, per_turn):
        recs = [(0, int(series["loss"][0][i]), 1.0 + i, {m: float(v[i]) for m, (_, v) in series.items()})
                for i in range(lo, min(lo + per_turn, n))]
        store.begin()
        store.ingest((run, 0, ""), seq, seq, batch_fields(recs), time.time())
        store.commit()
        seq += len(recs)
    return seq


def new_run(store: Store, run: str) -> None:
    store.begin()
    store.upsert_run({"run": run, "project": "tiers", "name": run, "host": socket.gethostname(), "pid": 1,
                      "config": {}}, time.time())
    store.commit()


def one_run(path, seed: int, n: int, per_turn: int) -> tuple[Store, tuple[np.ndarray, np.ndarray]]:
    """A journal at ``path`` holding run r1's spiky "loss" of ``n`` points, ``per_turn`` a turn."""
    store = Store(path)
    new_run(store, "r1")
    points = spiky(seed, n)
    ingest(store, "r1", {"loss": points}, per_turn=per_turn)
    return store, points


def assert_exact(store: Store, run: str, metric: str, steps: np.ndarray, vals: np.ndarray) -> None:
    """These are the metric's points, and every level over the whole range and over a slice is the
    fold of them (with the journal's wall times), bit for bit but for the sums' rounding."""
    kept, values, times = store.series(run, metric)
    assert kept.tobytes() == np.asarray(steps, np.int64).tobytes() and values.tobytes() == vals.tobytes()
    want = dict(levels(steps, vals, times))
    lo, hi = float(np.quantile(steps, 0.3)), float(np.quantile(steps, 0.6))
    for level in range(LEVELS):
        got = store.tier_buckets(run, metric, level, *ALL)
        assert same_buckets(got, want[level]), f"level {level}"
        width = 16 * 4 ** level
        part = want[level][(want[level]["bucket"] >= lo // width) & (want[level]["bucket"] <= hi // width)]
        if len(store.tiers.table.rows((run, metric), level, 0, 0)) or level:  # any range, same buckets
            assert same_buckets(store.tier_buckets(run, metric, level, lo, hi), part), f"slice {level}"


def pack(store: Store) -> int:
    """Pack every stream as the agent does between turns; returns the packed rows there are then."""
    compactor = Compactor(store)
    while compactor.pending():
        store.begin()
        compactor.step()
        store.commit()
    return store.db.execute("SELECT COUNT(*) FROM journal WHERE first_id IS NOT NULL").fetchone()[0]


def build(store: Store) -> None:
    while store.tiers.building:
        store.begin()
        store.build_tiers_some()
        store.commit()


def test_live_turns_waiting_points_and_packing_give_the_fold_of_the_raw_points(tmp_path):
    store = Store(tmp_path / "journal.sqlite")
    new_run(store, "r1")
    loss, reward = spiky(1, 6000), spiky(2, 6000)
    ingest(store, "r1", {"loss": loss, "reward": (loss[0], reward[1])}, per_turn=7)
    assert store.tiers.waiting  # not folded yet: a query folds what waits into its answer
    assert_exact(store, "r1", "loss", *loss)
    assert_exact(store, "r1", "reward", loss[0], reward[1])
    store.begin()
    store.tiers.flush_all()
    store.commit()
    assert not store.tiers.waiting and not store.db.execute("SELECT * FROM tier_marks").fetchall()
    assert pack(store) > 0
    assert_exact(store, "r1", "loss", *loss)  # packing leaves the tiers as they are
    top = store.tier_buckets("r1", "loss", LEVELS - 1, *ALL)
    assert top["max"].max() == 1e6 and top["min"].min() == -1e6  # the spikes
    assert top["bad"].sum() == (~np.isfinite(loss[1])).sum() > 0


def test_a_crash_with_points_waiting_is_rebuilt_from_the_journal_between_turns(tmp_path, monkeypatch):
    monkeypatch.setattr(journal_tiers, "BUILD_POINTS", 500)
    path = tmp_path / "journal.sqlite"
    store = Store(path)
    new_run(store, "r1")
    first, second = spiky(3, 3000), spiky(4, 3000)
    seq = ingest(store, "r1", {"loss": first}, per_turn=50)
    store.begin()
    store.tiers.flush_all()  # folded up to here
    store.commit()
    ingest(store, "r1", {"loss": second}, per_turn=9, seq=seq)
    assert pack(store) > 0  # packed entries that join folded entries and waiting ones
    store.db.close()  # killed: what waited in memory is gone, its mark is on disk
    store = Store(path)
    assert set(store.tiers.building) == {"r1"}
    with pytest.raises(NotReady, match="being built"):
        store.tier_buckets("r1", "loss", 0, *ALL)
    ingest(store, "r1", {"loss": (second[0][:400] + 10_000_000, second[1][:400])}, per_turn=1, seq=10_000)
    compactor = Compactor(store)  # 400 new plain entries: ready to pack, but not while the tiers are built
    packed = store.db.execute("SELECT COUNT(*) FROM journal WHERE first_id IS NOT NULL").fetchone()[0]
    steps_done = 0
    while store.tiers.building:
        store.begin()
        store.build_tiers_some()
        if compactor.pending():
            compactor.step()
        store.commit()
        steps_done += 1
        if store.tiers.building:
            assert store.db.execute("SELECT COUNT(*) FROM journal WHERE first_id IS NOT NULL").fetchone()[0] == packed
    assert steps_done > 3  # bounded steps, not one
    assert pack(store) > 0  # then packed again: the tiers stay as they are
    assert_exact(store, "r1", "loss", np.concatenate([first[0], second[0], second[0][:400] + 10_000_000]),
                 np.concatenate([first[1], second[1], second[1][:400]]))


def test_a_journal_from_before_the_tiers_builds_them_and_a_removal_deletes_them(tmp_path):
    path = tmp_path / "journal.sqlite"
    store = Store(path)
    runs = {run: spiky(seed, 2500) for seed, run in enumerate(("r1", "r2"))}
    for run, points in runs.items():
        new_run(store, run)
        ingest(store, run, {"loss": points}, per_turn=7)
    assert pack(store) > 0
    store.db.execute("DROP TABLE tiers")
    store.db.execute("DROP TABLE tier_marks")
    store.db.execute("PRAGMA user_version=0")  # as a file from before the schema was numbered
    store.db.close()
    store = Store(path)
    assert set(store.tiers.building) == {"r1", "r2"}
    build(store)
    for run, points in runs.items():
        assert_exact(store, run, "loss", *points)
    store.begin()
    store.hide("r1", time.time())
    store.commit()
    while "r1" in store.removing:
        store.begin()
        store.remove_some(100, 1 << 16)
        store.commit()
    assert store.db.execute("SELECT COUNT(*) FROM tiers WHERE run='r1'").fetchone()[0] == 0
    assert_exact(store, "r2", "loss", *runs["r2"])
    store.begin()
    store.tiers.rebuild("r2")  # as an import does
    store.commit()
    build(store)
    assert_exact(store, "r2", "loss", *runs["r2"])



def test_a_journal_with_tiers_of_an_older_record_drops_them_and_builds_them_again(tmp_path):
    """Blocks of the 12-field record (before sums and wall times) are not misread: the journal drops
    them at start and builds every run's tiers again from its points, a bounded step at a time."""
    path = tmp_path / "journal.sqlite"
    store, points = one_run(path, seed=4, n=3000, per_turn=9)
    store.begin()
    store.tiers.flush_all()
    store.commit()
    store.db.execute("ALTER TABLE tiers RENAME COLUMN buckets TO records")  # as a journal of the last version
    store.db.execute("PRAGMA user_version=0")  # as a file from before the schema was numbered
    store.db.close()
    store = Store(path)
    assert set(store.tiers.building) == {"r1"} and not store.db.execute("SELECT COUNT(*) FROM tiers").fetchone()[0]
    with pytest.raises(NotReady):
        store.tier_buckets("r1", "loss", 0, *ALL)
    build(store)
    assert_exact(store, "r1", "loss", *points)


TRAINER = """
run = ph.init(project="tiers", name="socket", agent=URL)
print(run.id, flush=True)
n = int(ARGS[0])
for step in range(n):
    loss = math.sin(step / 500.0) + (1e6 if step % 7919 == 0 else 0.0)
    odd = (float("nan"), float("inf"), -float("inf"))[step % 3] if step % 4001 == 0 else step * 1e-3
    run.log({"loss": loss, "odd": odd}, step=step)
    if step < 300:
        run.log({"sparse": float(step % 5)}, step=3_000_000 + step * 2048)  # a level-0 block each
    if step % 2000 == 0:
        time.sleep(0.01)
run.finish()
"""


def finished_run(tmp_path, proc: AgentProcess, steps: int) -> str:
    """A real trainer's run of ``steps`` steps, logged and finished on the agent; its id."""
    trainer = start_trainer(tmp_path, TRAINER, proc.url, str(steps))
    run = trainer.stdout.readline().strip()
    assert trainer.wait(120) == 0, trainer.stderr.read()
    with proc.client() as client:
        wait_until(lambda: any(r["id"] == run and r["status"] == "finished" for r in client.runs()),
                   what="the run to finish")
    return run


def test_a_real_agent_answers_tiers_equal_to_a_fold_of_a_real_trainers_points(tmp_path):
    proc = AgentProcess(tmp_path / "agent", free_port()).start()
    try:
        run = finished_run(tmp_path, proc, 40_000)
        with proc.client() as client:
            folds = {}
            for metric in ("loss", "odd", "sparse"):
                want = folds[metric] = dict(levels(*client.series(run, metric)))
                for level in (0, 2, 5, LEVELS - 1):
                    if metric == "sparse" and level == 0:
                        continue
                    got = client.tiers(run, [metric], *ALL, level=level)[metric]
                    assert same_buckets(got, want[level]), (metric, level)
            for x0, x1, pixels in ((1234.0, 20_000.5, 300), (0, 3_600_000, 500), (17, 39_999, 64)):
                level = level_for(x0, x1, pixels)
                width = WIDTHS[level]
                every = client.tiers(run, ["loss", "odd", "sparse"], x0, x1, pixels)  # the level that fits
                cols = client.tiers(run, ["loss", "odd", "sparse"], x0, x1, pixels, by_column=True)  # one request
                assert list(every) == list(cols) == ["loss", "odd", "sparse"]
                for metric, want in folds.items():
                    rec = want[level][(want[level]["bucket"] >= x0 // width) & (want[level]["bucket"] <= x1 // width)]
                    assert same_buckets(every[metric], rec), (metric, x0, x1, pixels)
                    assert same_buckets(cols[metric], columns(rec, level, x0, x1, pixels)[0])
                    assert len(cols[metric]) <= pixels
            top = client.tiers(run, ["loss"], *ALL, level=LEVELS - 1)["loss"]
            assert top["max"].max() == pytest.approx(1e6, rel=1e-3) and top["xmax"][0] % 7919 == 0  # the spike
            assert client.tiers(run, ["odd"], *ALL, level=LEVELS - 1)["odd"]["bad"].sum() == 10  # NaN and ±Inf counted

            bad = [
                ({"run": "nope"}, "no run with id"),
                ({"metrics": ["nope"]}, "has no metric"),
                ({"metrics": ["loss", "nope"]}, "has no metric"),  # one unknown metric refuses the whole query
                ({"level": LEVELS}, r"level must be an int in \[0, 15\]"),
                ({"level": -1}, "level must be an int"),
                ({"level": "2"}, "level must be an int"),
                ({"level": True}, "level must be an int"),
                ({"x0": "a"}, "x0 must be a number"),
                ({"x1": None}, "x1 must be a number"),
                ({"x0": float("nan")}, "x0 must be a finite step"),
                ({"x1": float("inf")}, "x1 must be a finite step"),
                ({"x1": 2.0 ** 70}, "x1 must be a finite step"),
                ({"x0": 10.0, "x1": 5.0}, "x1 must not be below x0"),
                ({"metrics": ["sparse"], "level": 0}, f"more than the {MAX_QUERY_BLOCKS} a query reads"),
                ({"metrics": ["loss", "sparse"], "level": 0}, f"more than the {MAX_QUERY_BLOCKS} a query reads"),
                ({"run": 7}, "run must be str"),
                ({"metrics": "loss"}, "metrics must be list"),
                ({"metrics": None}, "metrics must be list"),
                ({"metrics": {"loss": 1}}, "metrics must be list"),
                ({"metrics": []}, f"metrics must list 1 to {MAX_TIER_METRICS} metric names, got 0"),
                ({"metrics": ["loss"] * (MAX_TIER_METRICS + 1)}, f"must list 1 to {MAX_TIER_METRICS} metric names"),
                ({"metrics": ["loss", 7]}, "metric name must be a string, not int"),
                ({"metrics": [["loss"]]}, "metric name must be a string, not list"),
                ({"metrics": ["loss", "lo\u200bss"]}, "invisible format character"),
                ({"pixels": 0}, r"pixels must be an int in \[1, 16384\]"),
                ({"pixels": 10 ** 9}, "pixels must be an int"),
                ({"pixels": 2.5}, "pixels must be an int"),
                ({"width": 3}, "a tiers query takes run, metrics, level, x0, x1 and pixels, not width"),
                ({"metric": "loss"}, "a tiers query takes run, metrics, level, x0, x1 and pixels, not metric"),
            ]
            for change, why in bad:
                args = {"run": run, "metrics": ["loss"], "level": 0, "x0": ALL[0], "x1": ALL[1], **change}
                with pytest.raises(AgentError, match=why):
                    client.request("tiers", **args)
            with pytest.raises(TypeError, match="not one name"):
                client.tiers(run, "loss", *ALL, level=LEVELS - 1)  # a name is not a list of its letters
            ping = client.ping()
            assert ping["bad_frames"] == len(bad) and ping["internal_errors"] == 0  # refused, nothing broken
            assert client.tiers(run, ["loss"], *ALL, level=LEVELS - 1)["loss"].tobytes() == top.tobytes()
    finally:
        proc.stop()


def test_a_salvaged_journal_builds_its_tiers_again(tmp_path):
    from pilothouse.node.recover import recover

    path = tmp_path / "journal.sqlite"
    store, points = one_run(path, seed=5, n=2000, per_turn=11)
    store.close()
    salvage = recover(path)  # every row copied into a fresh journal; the tiers are not among them
    assert salvage.kept["journal"] > 0 and not any(salvage.lost.values())
    store = Store(path)
    assert set(store.tiers.building) == {"r1"} and not store.db.execute("SELECT COUNT(*) FROM tiers").fetchone()[0]
    build(store)
    assert_exact(store, "r1", "loss", *points)


def test_an_agent_killed_with_points_waiting_builds_their_tiers_when_it_starts_again(tmp_path):
    proc = AgentProcess(tmp_path / "agent", free_port()).start()
    try:
        run = finished_run(tmp_path, proc, 20_000)
        with proc.client() as client:
            assert client.tiers(run, ["loss"], *ALL, level=3) is not None  # answered from what waits in memory
        proc.kill()  # SIGKILL: the points waiting to be folded are lost from memory, their mark is on disk
        con = sqlite3.connect(proc.data / "journal.sqlite")
        assert (run,) in con.execute("SELECT run FROM tier_marks").fetchall()
        con.close()
        proc.start()
        with proc.client() as client:
            points = client.series(run, "loss")
            wait_until(lambda: client.tiers(run, ["loss"], *ALL, level=0) is not None, what="the tiers built again")
            for level in (0, 4, LEVELS - 1):
                want = dict(levels(*points))[level]
                assert same_buckets(client.tiers(run, ["loss"], *ALL, level=level)["loss"], want)
    finally:
        proc.stop()


def test_points_waiting_in_all_runs_together_stay_bounded(tmp_path, monkeypatch):
    monkeypatch.setattr(journal_tiers, "MAX_WAITING", 1500)
    store = Store(tmp_path / "journal.sqlite")
    runs = {"r1": spiky(6, 1200), "r2": spiky(7, 400)}
    for run, points in runs.items():
        new_run(store, run)
        ingest(store, run, {"loss": points}, per_turn=50)
    waiting = sum(len(steps) // 8 for metrics in store.tiers.waiting.values() for chunks in metrics.values()
                  for steps, *_ in chunks)
    assert 0 < waiting <= 1500 and "r1" not in store.tiers.waiting  # the run with the most was folded
    for run, points in runs.items():
        assert_exact(store, run, "loss", *points)
