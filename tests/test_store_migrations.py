"""Schema versions (``pilothouse.store.migrations``): a journal and an app store written before the
numbers (``user_version`` 0, built here by hand in SQL as that code wrote them, data and all) open
and are brought to the newest version with their data; a new file is made at the newest version; a
file of a newer version than the code knows is refused with a clear error, unchanged."""

from __future__ import annotations

import sqlite3
import struct

import numpy as np
import pytest

from pilothouse.gui.local_store import LocalStore
from pilothouse.gui.store_schema import STEPS as STORE_STEPS
from pilothouse.node.journal import Store
from pilothouse.node.journal_schema import STEPS as JOURNAL_STEPS
from pilothouse.store.migrations import SchemaTooNew
from pilothouse.wire.messages import pack
from pilothouse.wire.rollouts import pack_batch

# The journal's tables as version 0 wrote them (the rollout index's and the tiers' are left out:
# they are made again, as for a journal from before them).
JOURNAL_V0 = [
    ('CREATE TABLE "runs" ("id" TEXT PRIMARY KEY, "project" TEXT, "name" TEXT, "kind" TEXT, "host" TEXT, '
    '"pid" INTEGER, "pid_started" REAL, "config" BLOB, "created" REAL, "status" TEXT, "last_seen" REAL, '
    '"ended" REAL, "last_step" INTEGER, "dropped_records" INTEGER, "dropped_points" INTEGER, '
    '"lost_records" INTEGER, "schema" BLOB, "points" INTEGER, "bytes" INTEGER, "removing" REAL, '
    '"attempts" INTEGER NOT NULL DEFAULT 1, "nodes" BLOB)'),
    'CREATE TABLE "last_values" ("run" TEXT, "metric" TEXT, "value" BLOB, PRIMARY KEY ("run", "metric"))',
    'CREATE TABLE "meta" ("key" TEXT PRIMARY KEY, "value" TEXT)',
    'CREATE TABLE "run_owners" ("run" TEXT PRIMARY KEY, "proof" TEXT)',
    'CREATE TABLE "key_metrics" ("project" TEXT PRIMARY KEY, "metric" TEXT, "updated" REAL)',
    ('CREATE TABLE "commands" ("cid" TEXT PRIMARY KEY, "run" TEXT, "cmd" TEXT, "args" BLOB, "who" BLOB, '
    '"sent" REAL, "state" TEXT, "step" INTEGER, "detail" TEXT, "applied" BLOB, "updated" REAL)'),
    'CREATE INDEX "idx_commands_run_state" ON "commands" ("run", "state")',
    ('CREATE TABLE "streams" ("run" TEXT, "rank" INTEGER, "session" TEXT NOT NULL, "max_seq" INTEGER, '
    'PRIMARY KEY ("run", "rank", "session"))'),
    ('CREATE TABLE "journal" ("id" INTEGER PRIMARY KEY, "run" TEXT, "kind" TEXT, "metric" TEXT, "rank" INTEGER, '
    '"n" INTEGER, "steps" BLOB, "vals" BLOB, "times" BLOB, "body" BLOB, "first_id" INTEGER)'),
    'CREATE INDEX "idx_journal_run_kind_metric_id" ON "journal" ("run", "kind", "metric", "id")',
    "CREATE INDEX journal_packed ON journal (first_id) WHERE first_id IS NOT NULL",
]
STORE_V0 = [
    ('CREATE TABLE "agents" ("url" TEXT PRIMARY KEY, "name" TEXT, "added" REAL, "cursor" INTEGER NOT NULL '
    'DEFAULT 0, "remembered" INTEGER DEFAULT 1, "journal" TEXT)'),
    ('CREATE TABLE "runs" ("agent" TEXT, "id" TEXT, "project" TEXT, "name" TEXT, "kind" TEXT, "status" TEXT, '
    '"host" TEXT, "last_step" INTEGER, "created" REAL, "updated" REAL, "data" BLOB, PRIMARY KEY ("agent", "id"))'),
    ('CREATE TABLE "entries" ("agent" TEXT, "id" INTEGER, "run" TEXT, "kind" TEXT, "metric" TEXT, "rank" INTEGER, '
    '"n" INTEGER, "steps" BLOB, "vals" BLOB, "times" BLOB, "body" BLOB, PRIMARY KEY ("agent", "id"))'),
    'CREATE INDEX "idx_entries_agent_run_kind_metric_id" ON "entries" ("agent", "run", "kind", "metric", "id")',
    'CREATE TABLE "settings" ("key" TEXT PRIMARY KEY, "value" BLOB)',
    ('CREATE TABLE "removed_runs" ("agent" TEXT, "run" TEXT, "at" REAL, "pending" INTEGER, '
    'PRIMARY KEY ("agent", "run"))'),
    'CREATE TABLE "jobs" ("id" TEXT PRIMARY KEY, "title" TEXT, "added" REAL, "declined" INTEGER NOT NULL DEFAULT 0)',
    'CREATE TABLE "job_agents" ("job" TEXT, "url" TEXT, "host" TEXT, "agent" TEXT, PRIMARY KEY ("job", "url"))',
]
STEPS = np.arange(300, dtype=np.int64)
VALS = np.sqrt(STEPS.astype(np.float64))
TIMES = 1.7e9 + STEPS * 0.5
A = "tcp://127.0.0.1:7001"


def v0_file(path, tables: list[str], rows: list[tuple[str, list]]) -> None:
    con = sqlite3.connect(path)
    for sql in tables:
        con.execute(sql)
    for sql, values in rows:
        con.execute(sql, values)
    con.commit()
    con.close()


def version(path) -> int:
    con = sqlite3.connect(path)
    try:
        return con.execute("PRAGMA user_version").fetchone()[0]
    finally:
        con.close()


def contents(path) -> list:
    con = sqlite3.connect(path)
    try:
        tables = [n for (n,) in con.execute("SELECT name FROM sqlite_master WHERE type='table' "
                                              "AND sql NOT LIKE 'CREATE VIRTUAL%' ORDER BY name")]
        return [con.execute("SELECT sql FROM sqlite_master ORDER BY name").fetchall(),
                con.execute("PRAGMA user_version").fetchone()] + [con.execute(f'SELECT * FROM "{t}"').fetchall()
                                                                  for t in tables]
    finally:
        con.close()


def test_a_journal_of_version_0_opens_migrated_with_its_data(tmp_path):
    path = tmp_path / "journal.sqlite"
    v0_file(path, JOURNAL_V0, [
        (("INSERT INTO runs (id, project, name, kind, status, created, points, bytes, attempts, config, schema) "
         "VALUES ('r1', 'p', 'n', 'train', 'finished', 1.0, 300, 7300, 2, ?, ?)"), [pack({"lr": 0.1}), pack({})]),
        ("INSERT INTO last_values VALUES ('r1', 'loss', ?)", [struct.pack("<d", VALS[-1])]),
        ("INSERT INTO streams VALUES ('r1', 0, 's1', 300)", []),
        (("INSERT INTO journal (id, run, kind, metric, rank, n, steps, vals, times) VALUES (1, 'r1', 'm', 'loss', 0, "
         "300, ?, ?, ?)"), [STEPS.tobytes(), VALS.tobytes(), TIMES.tobytes()]),
        ("INSERT INTO journal (id, run, kind, metric, rank, n, body) VALUES (2, 'r1', 'r', NULL, 0, 1, ?)",
         [pack_batch(5, 1.0, [{"prompt": "a question", "completion": "an answer", "reward": 1.0}])]),
    ])
    store = Store(path)
    assert version(path) == len(JOURNAL_STEPS)
    assert [(r["id"], r["attempts"], r["config"], r["summary"]) for r in store.runs()] == \
        [("r1", 2, {"lr": 0.1}, {"loss": VALS[-1]})]
    steps, vals, _ = store.series("r1", "loss")
    assert steps.tolist() == STEPS.tolist() and vals.tobytes() == VALS.tobytes()
    assert store.max_seq == {("r1", 0, "s1"): 300}
    assert set(store.tiers.building) == {"r1"}  # the tiers of a journal from before them: built between turns
    while store.tiers.building:
        store.begin()
        store.build_tiers_some()
        store.commit()
    assert int(store.tier_buckets("r1", "loss", 0, 0, 299)["count"].sum()) == 300
    store.begin()
    store.rollouts.index_some(1 << 20)  # the batch stored before the search index: queued, then found
    store.commit()
    assert [hit[3]["completion"] for hit in store.rollouts.search_text("r1", "question")[0]] == ["an answer"]
    store.close()
    assert Store(path).runs()[0]["id"] == "r1"  # opened again: nothing to do


def test_a_store_of_version_0_opens_migrated_with_its_data(tmp_path):
    path = tmp_path / "s.sqlite"
    v0_file(path, STORE_V0, [
        ("INSERT INTO agents VALUES (?, 'node', 1.0, 1, 1, 'j1')", [A]),
        ("INSERT INTO runs VALUES (?, 'r1', 'p', 'n', 'train', 'finished', 'h', 299, 1.0, 1.0, ?)",
         [A, pack({"id": "r1", "project": "p", "name": "n", "status": "finished"})]),
        ("INSERT INTO entries VALUES (?, 1, 'r1', 'm', 'loss', 0, 300, ?, ?, ?, NULL)",
         [A, STEPS.tobytes(), VALS.tobytes(), TIMES.tobytes()]),
    ])
    store = LocalStore(path)
    assert version(path) == len(STORE_STEPS)
    assert [r["id"] for r in store.runs()] == ["r1"] and store.cursor(A) == 1
    steps, vals, _ = store.series(A, "r1", "loss")
    assert steps.tolist() == STEPS.tolist() and vals.tobytes() == VALS.tobytes()
    assert store.points(A, "r1") == 300  # the tiers built once, when opened
    assert store.nearest(A, "r1", "loss", 100.2) == (100, 10.0)
    assert store.run_sizes()[(A, "r1")] > 300 * 24  # counted once, then kept by the triggers
    store.close()


def test_a_new_file_is_made_at_the_newest_version(tmp_path):
    Store(tmp_path / "journal.sqlite").close()
    LocalStore(tmp_path / "s.sqlite").close()
    assert version(tmp_path / "journal.sqlite") == len(JOURNAL_STEPS)
    assert version(tmp_path / "s.sqlite") == len(STORE_STEPS)


@pytest.mark.parametrize("kind", ["journal", "store"])
def test_a_file_of_a_newer_version_is_refused_and_left_unchanged(tmp_path, kind):
    path = tmp_path / f"{kind}.sqlite"
    opener, steps = (Store, JOURNAL_STEPS) if kind == "journal" else (LocalStore, STORE_STEPS)
    opener(path).close()
    con = sqlite3.connect(path)
    con.execute(f"PRAGMA user_version={len(steps) + 1}")
    con.execute("DROP TABLE runs")  # the newer version's schema: what this code would make again
    con.commit()
    con.close()
    before = contents(path)
    with pytest.raises(SchemaTooNew, match=f"version {len(steps) + 1}.*newer pilothouse.*not changed"):
        opener(path)
    assert contents(path) == before
