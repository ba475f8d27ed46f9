"""The app's local store on a real SQLite file: idempotent, cursor-consistent, bit-exact."""

from __future__ import annotations

import numpy as np
from support.app_store import SPECIAL, A, B, body, chunk

from pilothouse.gui.local_store import ENV_APP_DATA, STORE_FILE, LocalStore, default_path
from pilothouse.wire.entries import Entry


def page() -> list[Entry]:
    return [chunk(1, "r1", "reward/mean", [0, 1, 2], SPECIAL[:3]),
            chunk(2, "r1", "loss", [0, 1, 2], [3.0, 2.0, 1.0]),
            body(3, "r1", "r", {"step": 2, "time": 1.0, "rows": [{"prompt": "2+2", "completion": "4", "reward": 1.0}]}),
            chunk(4, "r1", "reward/mean", range(3, 7), SPECIAL[3:]),
            body(5, "r1", "e", {"event": "status", "status": "finished"})]


def test_entries_are_idempotent_and_the_cursor_survives_reopening(tmp_path):
    path = tmp_path / "app" / "store.sqlite"
    store = LocalStore(path)
    store.add_agent(A, "node-a")
    entries = page()
    store.write_page(A, entries[:3], 3)
    store.write_page(A, entries, 5)  # a page re-sent across a reconnect
    store.write_page(A, entries[3:], 5)
    store.close()

    store = LocalStore(path)
    assert store.cursor(A) == 5 and store.cursor(B) == 0
    assert store.db.execute("SELECT COUNT(*) FROM entries").fetchone()[0] == 5
    steps, vals, times = store.series(A, "r1", "reward/mean")
    assert steps.tolist() == list(range(7))
    assert vals.tobytes() == SPECIAL.tobytes()  # NaN, ±Inf, -0.0, 1e308, denormal: bit for bit
    assert np.array_equal(times, 1.7e9 + np.arange(7))
    assert store.metrics(A, "r1") == ["loss", "reward/mean"]
    assert not store.index_rollouts()
    assert store.rollout_rows(A, "r1", 2)[0]["completion"] == "4"
    assert [e["status"] for e in store.events(A, "r1")] == ["finished"]
    assert store.agents()[0]["name"] == "node-a"


def test_a_packed_entrys_part_and_its_rest_store_alike_in_one_write_or_two(tmp_path):
    """A page ending inside a packed entry carries its part under an id above the cursor; the rest
    comes under the same id.  Written in two transactions or joined in one (the writer joins an
    agent's queued pages), the store holds the same entry, tiers and sizes; a repeat adds nothing."""
    part, rest = chunk(4, "r1", "loss", [0, 1], [1.0, 2.0]), chunk(4, "r1", "loss", [2, 3, 4], [3.0, np.nan, 5.0])
    before = chunk(3, "r1", "loss", [], [])

    def stored(store: LocalStore) -> tuple:
        store.fold_tiers()
        return (store.series(A, "r1", "loss")[0].tolist(), store.cursor(A),
                store.db.execute("SELECT id, n FROM entries ORDER BY id").fetchall(),
                store.db.execute("SELECT level, block, buckets, ids FROM tiers ORDER BY level, block").fetchall(),
                store.run_sizes())

    two = LocalStore(tmp_path / "two.sqlite")
    two.write_page(A, [before, part], 3)
    two.write_page(A, [rest], 4)
    two.write_page(A, [rest], 4)  # the same page again: a repeat below the cursor
    one = LocalStore(tmp_path / "one.sqlite")
    one.write_pages([(A, [before, part, rest], 4, None)])  # the two pages as the writer joins them
    assert stored(one) == stored(two)
    assert stored(one)[0] == [0, 1, 2, 3, 4] and stored(one)[2] == [(3, 0), (4, 5)]


def test_cursor_never_goes_back(tmp_path):
    store = LocalStore(tmp_path / "s.sqlite")
    store.write_page(A, page(), 5)
    store.write_page(A, [], 2)
    assert store.cursor(A) == 5


def test_two_agents_runs_side_by_side(tmp_path):
    store = LocalStore(tmp_path / "s.sqlite")
    for url, (value, status) in ((A, (0.5, "running")), (B, (0.7, "finished"))):
        store.add_agent(url)
        store.put_runs(url, [{"id": "r1", "project": "grpo", "name": "lr", "kind": "train", "status": status,
                              "host": url[-4:], "last_step": 10, "created": 1.0, "config": {"lr": 1e-5},
                              "summary": {"reward/mean": value}}])
        store.write_page(url, [chunk(1, "r1", "reward/mean", [0, 1], [value, value])], 1)
    store.put_runs(A, [{"id": "r1", "project": "grpo", "name": "lr", "kind": "train", "status": "crashed",
                        "created": 1.0, "summary": {}}])  # an upsert, not a second row
    runs = {(r["agent"], r["id"]): r for r in store.runs()}
    assert set(runs) == {(A, "r1"), (B, "r1")}
    assert runs[(A, "r1")]["status"] == "crashed" and runs[(B, "r1")]["summary"] == {"reward/mean": 0.7}
    assert store.series(A, "r1", "reward/mean")[1].tolist() == [0.5, 0.5]
    assert store.series(B, "r1", "reward/mean")[1].tolist() == [0.7, 0.7]
    assert [r["id"] for r in store.runs(B)] == ["r1"]


def test_removed_agent_keeps_its_data_unless_asked(tmp_path):
    store = LocalStore(tmp_path / "s.sqlite")
    store.add_agent(A)
    store.add_agent(B)
    store.write_page(A, page(), 5)
    store.remove_agent(A)
    assert [a["url"] for a in store.agents()] == [B]
    assert len(store.series(A, "r1", "loss")[0]) == 3  # still browsable
    store.add_agent(A)
    assert store.cursor(A) == 5  # re-added: no second download
    store.remove_agent(A, keep_data=False)
    assert store.cursor(A) == 0 and len(store.series(A, "r1", "loss")[0]) == 0


def test_default_path_follows_the_environment(tmp_path, monkeypatch):
    monkeypatch.setenv(ENV_APP_DATA, str(tmp_path / "appdata"))
    assert default_path() == tmp_path / "appdata" / STORE_FILE
    assert LocalStore().path == tmp_path / "appdata" / STORE_FILE
    monkeypatch.delenv(ENV_APP_DATA)
    assert default_path().parts[-2:] == ("app", STORE_FILE)


def test_snapshot_reads_one_state_while_another_connection_writes(tmp_path):
    path = tmp_path / "s.sqlite"
    reader, writer = LocalStore(path), LocalStore(path)
    entries = page()
    writer.write_page(A, entries[:2], 2)
    with reader.snapshot():
        cursor = reader.cursor(A)
        writer.write_page(A, entries[2:], 5)  # a link's thread goes on writing
        assert len(reader.series(A, "r1", "reward/mean")[0]) == 3 and cursor == 2
    assert reader.cursor(A) == 5 and len(reader.series(A, "r1", "reward/mean")[0]) == 7


def test_first_sight_of_a_journal_keeps_the_cursor_a_new_journal_resets_it(tmp_path):
    store = LocalStore(tmp_path / "app.sqlite")
    store.write_page("tcp://a:1", page(), 5)  # a first page can arrive before the first ping
    assert store.adopt_journal("tcp://a:1", "j1") is False
    assert store.cursor("tcp://a:1") == 5
    assert store.adopt_journal("tcp://a:1", "j1") is False
    assert store.adopt_journal("tcp://a:1", "j2") is True  # wiped and restarted: follow from its start
    assert store.cursor("tcp://a:1") == 0
    assert len(store.series("tcp://a:1", "r1", "loss")[0]) == 0  # the old journal's data moved aside
    assert list(store.series("tcp://a:1#j1", "r1", "loss")[0]) == [0, 1, 2]


def test_connections_opening_a_new_store_together_all_succeed(tmp_path):
    """The app's links and its UI open a new store at once: switching a new file to WAL from
    several connections used to fail one of them with "database is locked" (about 1 in 30 here)."""
    import threading

    errors = []

    def open_close(path):
        try:
            LocalStore(path).close()
        except Exception as exc:  # noqa: BLE001 - any failure is the finding
            errors.append(repr(exc))

    for trial in range(40):
        path = tmp_path / f"s{trial}" / "store.sqlite"
        threads = [threading.Thread(target=open_close, args=(path,)) for _ in range(6)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    assert errors == []


def test_series_parts_hold_whole_entries_and_join_to_the_series(tmp_path):
    store = LocalStore(tmp_path / "store.sqlite")
    store.add_agent(A)
    sizes = [3, 1, 4, 1, 5, 9, 2, 6]
    entries, step = [], 0
    for i, n in enumerate(sizes, 1):
        steps = list(range(step, step + n))
        entries.append(chunk(i, "r1", "loss", steps, [s * 0.5 for s in steps]))
        step += n
    store.write_page(A, entries, len(entries))
    parts = list(store.series_parts(A, "r1", "loss", points=5))
    assert [len(p[0]) for p in parts] == [8, 6, 9, 8]  # whole entries, each part closed once it holds 5
    whole = store.series(A, "r1", "loss")
    for got, want in zip((np.concatenate([p[k] for p in parts]) for k in range(3)), whole):
        assert got.tobytes() == want.tobytes()
    assert list(store.series_parts(A, "r1", "nothing")) == []


def test_a_runs_events_and_metric_names_are_read_in_steps_that_do_not_grow_with_the_run(tmp_path):
    """Opening a chart reads the run's events and metric names: SQLite's own instruction count for
    them stays the same when the run holds ten times the entries (a 1 G-point run took 2 s when
    events were found by scanning every entry of the agent)."""
    store = LocalStore(tmp_path / "s.sqlite")
    store.write_page(A, [body(1, "r1", "e", {"event": "status", "status": "running"})], 1)

    def grow(first: int, n: int) -> None:
        store.write_page(A, [chunk(i, "r1", ["loss", "kl", "reward/mean"][i % 3], [i], [0.5]) for i in range(first, first + n)],
                         first + n - 1)

    def steps(read) -> int:
        count = [0]

        def tick() -> int:
            count[0] += 1
            return 0

        store.db.conn.set_progress_handler(tick, 1)  # every virtual machine instruction
        try:
            read()
        finally:
            store.db.conn.set_progress_handler(None, 1)
        return count[0]

    grow(2, 2_000)
    small = [steps(lambda: store.events(A, "r1")), steps(lambda: store.metrics(A, "r1"))]
    grow(2_002, 20_000)
    assert store.metrics(A, "r1") == ["kl", "loss", "reward/mean"] and len(store.events(A, "r1")) == 1
    large = [steps(lambda: store.events(A, "r1")), steps(lambda: store.metrics(A, "r1"))]
    assert all(after <= before + 20 for before, after in zip(small, large)), (small, large)  # an index a level deeper


def test_many_agents_pages_in_one_write_store_as_written_one_by_one(tmp_path):
    """The writer joins every agent's pages into one write (a few statements for all agents): the
    store ends as if each page were written alone, an agent's second page (a packed entry's rest)
    and a removed run's points included."""
    C = "tcp://127.0.0.1:7003"
    part, rest = chunk(4, "r1", "loss", [0, 1], [1.0, 2.0]), chunk(4, "r1", "loss", [2, 3], [3.0, 4.0])
    pages = [(A, [chunk(3, "r1", "loss", [], []), part], 3, None),
             (B, [chunk(1, "r1", "kl", [0, 1], [0.1, 0.2]), chunk(2, "gone", "kl", [0], [9.0])], 2,
              [{"id": "r1", "project": "p", "name": "b", "status": "running", "created": 1.0}]),
             (C, [], 7, None),
             (A, [rest, chunk(5, "r1", "loss", [4], [5.0])], 5, None)]

    def stored(store: LocalStore) -> tuple:
        store.fold_tiers()
        return ([store.series(u, r, m)[1].tolist() for u, r, m in ((A, "r1", "loss"), (B, "r1", "kl"), (B, "gone", "kl"))],
                [store.cursor(u) for u in (A, B, C)], [r["id"] for r in store.runs(B)],
                store.db.execute("SELECT agent, id, n FROM entries ORDER BY agent, id").fetchall(),
                store.db.execute("SELECT agent, run, metric, level, block, buckets FROM tiers "
                                 "ORDER BY agent, run, metric, level, block").fetchall())

    stores = [LocalStore(tmp_path / f"{name}.sqlite") for name in ("joined", "alone")]
    for store in stores:
        store.remove_runs([(B, "gone")], force=True)
    stores[0].write_pages(pages)
    for one in pages:
        stores[1].write_pages([one])
    assert stored(stores[0]) == stored(stores[1])
    assert stored(stores[0])[:3] == ([[1.0, 2.0, 3.0, 4.0, 5.0], [0.1, 0.2], []], [5, 2, 7], ["r1"])
    assert {row[1] for row in stored(stores[0])[4]} == {"r1"}  # the removed run gained no tiers either
