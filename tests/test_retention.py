"""Retention on the agent: `pilothouse rm`, `gc` and `runs --size`, on real agents, files and CLI.

Runs are written into the journal file with the agent's own Store before an agent opens it, so a
run can have ended 40 days ago honestly (its row says so) without waiting 40 days."""

from __future__ import annotations

import os
import re
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest
from support.agent_journal import SIZE_SQL, write_runs
from support.messages import batch_fields
from support.paths import ROOT
from support.processes import LOOP_UNTIL_STOPPED, AgentProcess, start_trainer
from support.sockets import free_port
from support.waiting import wait_until

from pilothouse.client import AgentError, Client
from pilothouse.node.journal import UNINDEX_ROW_BYTES, Store
from pilothouse.security import Keyring
from pilothouse.wire.entries import KIND_EVENT, entry_body

DAY = 86400.0
def cli(*args: str) -> subprocess.CompletedProcess:
    """``pilothouse ARGS`` with no terminal on stdin, as in a script or a cron job."""
    return subprocess.run([sys.executable, "-m", "pilothouse", *args], capture_output=True, text=True, timeout=60,
                          cwd=ROOT, stdin=subprocess.DEVNULL)


def journal_rows(data: Path, sql: str, args: tuple = ()) -> list[tuple]:
    con = sqlite3.connect(f"file:{data / 'journal.sqlite'}?mode=ro", uri=True, timeout=10)
    try:
        return con.execute(sql, args).fetchall()
    finally:
        con.close()


def entries_of(client: Client, run: str) -> list[tuple]:
    """Every entry of a run as stored, ids and blobs: compared bit for bit."""
    return [tuple(e) for page in client.history(run) for e in page.entries]


def gone(data: Path, run: str) -> bool:
    return not journal_rows(data, "SELECT 1 FROM journal WHERE run=? UNION ALL SELECT 1 FROM runs WHERE id=? "
                                  "UNION ALL SELECT 1 FROM streams WHERE run=? UNION ALL SELECT 1 FROM last_values "
                                  "WHERE run=?", (run,) * 4)


def run_ids(client: Client) -> set[str]:
    return {r["id"] for r in client.runs()}


@pytest.fixture
def agent_with(tmp_path):
    """``agent_with(runs)``: an agent on a journal holding ``runs`` (see write_runs)."""
    started = []

    def start(runs: dict[str, dict], *extra: str) -> AgentProcess:
        proc = AgentProcess(tmp_path / "agent", free_port(), list(extra))
        (tmp_path / "agent").mkdir(exist_ok=True)
        write_runs(proc.data / "journal.sqlite", runs)
        started.append(proc.start())
        return proc
    yield start
    for proc in started:
        proc.stop()


# --- the journal's counters ---------------------------------------------------------------------------

def test_each_runs_size_is_counted_as_it_is_committed_and_equals_its_rows(tmp_path):
    path = tmp_path / "j.sqlite"
    write_runs(path, {"a": {"steps": 300, "per_call": 7}, "b": {"steps": 40}})
    store = Store(path)
    counted = {r["id"]: (r["points"], r["bytes"]) for r in store.retention_rows()}
    assert counted == {run: (points, size) for run, points, size in store.db.execute(SIZE_SQL)}
    assert counted["a"][0] == 600 and counted["b"][0] == 80


def test_a_journal_from_before_the_counters_is_counted_once_when_opened(tmp_path):
    path = tmp_path / "j.sqlite"
    write_runs(path, {"a": {"steps": 120}, "b": {"steps": 30}})
    con = sqlite3.connect(path)
    for column in ("points", "bytes", "removing"):
        con.execute(f"ALTER TABLE runs DROP COLUMN {column}")
    con.execute("PRAGMA user_version=0")  # as a file from before the schema was numbered
    con.commit()
    con.close()
    store = Store(path)
    assert {r["id"]: (r["points"], r["bytes"]) for r in store.retention_rows()} == \
        {run: (points, size) for run, points, size in store.db.execute(SIZE_SQL)}


def test_a_removed_run_gives_back_no_entry_id_and_touches_no_other_run(tmp_path):
    """The removed run held the newest ids: a reopened journal must not hand them out again, or a
    reader whose cursor is past them would miss what comes next."""
    path = tmp_path / "j.sqlite"
    write_runs(path, {"keep": {"steps": 200, "per_call": 3}, "drop": {"steps": 200, "per_call": 3}})
    store = Store(path)
    keep = store.db.execute("SELECT * FROM journal WHERE run='keep' ORDER BY id").fetchall()
    head = store.head
    store.begin()
    store.hide("drop", time.time())
    store.commit()
    assert [r["id"] for r in store.runs()] == ["keep"] and store.read(0, run="drop")[0] == []
    assert {e.run for e in store.read(0)[0]} == {"keep"}
    batches = 0
    while store.removing:
        store.begin()
        store.remove_some(20, 1 << 20)
        store.commit()
        batches += 1
    assert batches > 5
    store.db.close()
    store = Store(path)
    assert store.head == head
    assert store.db.execute("SELECT * FROM journal WHERE run='keep' ORDER BY id").fetchall() == keep
    assert store.db.execute("SELECT COUNT(*) FROM journal WHERE run='drop'").fetchone()[0] == 0


def test_a_removed_runs_rollouts_leave_the_search_index_in_bounded_batches(tmp_path):
    path = tmp_path / "j.sqlite"
    store = Store(path)
    store.begin()
    for run in ("keep", "drop"):
        store.upsert_run({"run": run, "project": "p", "name": run, "host": "h", "pid": 1, "config": {}}, time.time())
        store.ingest((run, 0, ""), 1, 1, batch_fields([(1, step, 1.0, [{"prompt": f"{run} step {step}",
                                                                        "completion": "shared"} for _ in range(5)])
                                                    for step in range(40)]), 0.0)
    store.commit()
    while store.index_due:
        store.begin()
        store.index_due = store.rollouts.index_some(1024)
        store.commit()
    assert len(store.rollouts.search_text("drop", "shared", limit=500)[0]) == 200
    kept = store.rollouts.search_text("keep", "shared", limit=500)[0]
    store.begin()
    store.hide("drop", time.time())
    store.commit()
    with pytest.raises(LookupError):
        store.rollouts.search_text("drop", "shared")
    batches = 0
    while store.removing:
        store.begin()
        store.remove_some(2000, 4 * UNINDEX_ROW_BYTES * 5)  # about 4 batches of 5 rows each
        store.commit()
        batches += 1
    assert batches >= 10
    db = store.db
    assert db.execute("SELECT COUNT(*) FROM rollout_batches WHERE run='drop'").fetchone()[0] == 0
    assert db.execute("SELECT COUNT(*) FROM rollout_text WHERE rollout_text MATCH 'drop'").fetchone()[0] == 0
    db.execute("INSERT INTO rollout_text(rollout_text, rank) VALUES ('integrity-check', 0)")  # raises if not
    assert store.rollouts.search_text("keep", "shared", limit=500)[0] == kept


# --- pilothouse rm --------------------------------------------------------------------------------------

def test_rm_removes_a_finished_run_and_nothing_of_another(agent_with):
    proc = agent_with({"old": {"steps": 300}, "other": {"steps": 500, "per_call": 9}, "twin": {}})
    with proc.client() as client:
        other = entries_of(client, "other")
        listed = cli("runs", "--size", "--agent", proc.url)
        assert listed.returncode == 0 and re.search(r"old .* \d+(\.\d+)? KB", listed.stdout), listed.stdout
        assert re.search(r"in 3 runs$", listed.stdout.strip())

        # bad arguments say what is wrong and change nothing; without a terminal, what would go is shown
        for args, code, said in ((("rm", "nosuch"), 1, "no run with id or name 'nosuch'"),
                                 (("rm", "old"), 2, "pass --yes"),
                                 (("gc", "--older-than", "30x"), 2, "not an age: '30x'"),
                                 (("gc", "--max-size", "50"), 2, "not a size: '50'"),
                                 (("gc", "--max-size", "5XB"), 2, "not a size"),
                                 (("gc",), 2, "--older-than AGE")):
            out = cli(*args, "--agent", proc.url)
            assert out.returncode == code and said in out.stderr, (args, out.stderr)
            assert args != ("rm", "old") or "ret/old (old)  finished  600 points" in out.stdout
        assert run_ids(client) >= {"old", "other", "twin"}

        out = cli("rm", "old", "--yes", "--agent", proc.url)
        assert out.returncode == 0 and "removed 1 run (600 points" in out.stdout, out.stderr
        assert "old" not in run_ids(client)  # at once
        wait_until(lambda: gone(proc.data, "old"), what="the run's rows deleted")
        assert entries_of(client, "other") == other  # every point of the other run, ids and bits
        assert {"other", "twin"} <= run_ids(client)
        with pytest.raises(AgentError, match="no run with id or name 'old'"):
            client.resolve("old")
        system = next(r["id"] for r in client.runs() if r["kind"] == "system")
        removed = [b for b in map(entry_body, (e for p in client.history(system, [KIND_EVENT]) for e in p.entries))
                   if b.get("event") == "removed"]
        assert removed[0]["run"] == "old" and removed[0]["points"] == 600 and removed[0]["who"]["via"] == "loopback"
    assert "removed by" in proc.log.read_text()
    events = cli("events", system, "--agent", proc.url).stdout
    assert re.search(r"run ret/old \(old\) removed by \S+@\S+ \(cli\): 600 points, \d", events), events


def test_a_live_run_is_refused_without_force_and_its_trainer_is_refused_after(tmp_path, agent_with):
    proc = agent_with({"done": {}}, "--stale-after", "30")
    trainer = start_trainer(tmp_path, LOOP_UNTIL_STOPPED, proc.url, "ret", "live")
    try:
        run = trainer.stdout.readline().strip()
        with proc.client() as client:
            wait_until(lambda: any(r["id"] == run and r["last_step"] for r in client.runs()), what="the trainer")
            out = cli("rm", "live", "done", "--yes", "--agent", proc.url)
            assert out.returncode == 1 and f"run {run} (ret/live) is running" in out.stderr
            assert "--force" in out.stderr and {run, "done"} <= run_ids(client)  # all or nothing
            out = cli("rm", "live", "--yes", "--force", "--agent", proc.url)
            assert out.returncode == 0, out.stderr
            wait_until(lambda: gone(proc.data, run), what="the live run's rows deleted")
            time.sleep(1.5)  # the trainer goes on logging and resends: it is refused, not resurrected
            assert trainer.poll() is None and run not in run_ids(client) and gone(proc.data, run)
    finally:
        trainer.kill()
        trainer.wait()


def test_an_allowed_key_removes_and_is_named_and_a_revoked_one_cannot(tmp_path):
    ring = Keyring(tmp_path / "keys")
    ring.init()
    ring.allow(ring.public("client"), "alice@laptop")
    port = free_port()
    remote = f"tcp://127.0.0.1:{port}"
    ring.trust(remote, ring.public("agent"))
    proc = AgentProcess(tmp_path / "agent", free_port(), ["--listen", remote, "--keys", str(ring.dir)])
    (tmp_path / "agent").mkdir()
    write_runs(proc.data / "journal.sqlite", {"a": {}, "b": {}})
    proc.start()
    try:
        with Client(remote, timeout=5, keys=ring) as client:
            assert [r["id"] for r in client.remove(["a"])] == ["a"]
            ring.revoke("alice@laptop")
            with pytest.raises(AgentError, match="no longer allowed"):
                client.remove(["b"])
        with proc.client() as local:
            assert "b" in run_ids(local) and "a" not in run_ids(local)
        assert re.search(r"run a \(ret/a\) removed by alice@laptop \[key \w+\.\.\.\] as ", proc.log.read_text())
    finally:
        proc.stop()


# --- pilothouse gc ----------------------------------------------------------------------------------------

def test_gc_removes_what_ended_long_ago_then_the_oldest_until_the_data_fits(agent_with):
    me = psutil.Process()
    proc = agent_with({
        "ancient": {"ended": 40 * DAY}, "stale": {"status": "stale", "ended": 35 * DAY},
        "older": {"ended": 10 * DAY, "steps": 2000}, "recent": {"ended": 60},
        "alive": {"status": "running", "ended": 50 * DAY, "pid": os.getpid(), "pid_started": me.create_time()},
    }, "--stale-after", "30")
    with proc.client() as client:
        before = journal_rows(proc.data, "SELECT COUNT(*) FROM journal")
        out = cli("gc", "--older-than", "30d", "--dry-run", "--agent", proc.url)
        assert out.returncode == 0 and "would remove 2 runs" in out.stdout, out.stdout + out.stderr
        assert "ret/ancient" in out.stdout and "ret/stale" in out.stdout and "alive" not in out.stdout
        assert journal_rows(proc.data, "SELECT COUNT(*) FROM journal") >= before  # nothing removed
        assert cli("gc", "--older-than", "30d", "--agent", proc.url).returncode == 2  # no --yes, no terminal

        assert cli("gc", "--older-than", "4w", "--yes", "--agent", proc.url).returncode == 0
        assert run_ids(client) >= {"older", "recent", "alive"} and not run_ids(client) & {"ancient", "stale"}

        sizes = {r["id"]: r["bytes"] for r in client.runs()}
        fits = sum(sizes.values()) - sizes["older"] + 10_000  # the oldest ended run must go, and it is enough
        assert sizes["older"] > 50_000  # (the node's own run grows meanwhile: far less than the slack)
        out = cli("gc", "--max-size", f"{fits}B", "--yes", "--agent", proc.url)
        assert out.returncode == 0 and "removed 1 run (4,000 points" in out.stdout, out.stdout + out.stderr
        assert "older" not in run_ids(client)

        out = cli("gc", "--max-size", "1KiB", "--yes", "--agent", proc.url)  # everything that ended, never a live run
        assert out.returncode == 0 and "the rest is in runs that have not ended" in out.stderr
        assert {r["id"] for r in client.runs() if r["kind"] == "train"} == {"alive"}


# --- a crash in the middle of a removal ---------------------------------------------------------------------

def test_an_agent_killed_mid_removal_resumes_it_and_other_runs_stay_whole(agent_with, monkeypatch):
    monkeypatch.setenv("PILOTHOUSE_REMOVE_ROWS", "5")  # the removal spans hundreds of loop turns
    monkeypatch.setenv("PILOTHOUSE_PACK_ROWS", "1000000")  # of small entries, not packed meanwhile
    proc = agent_with({"first": {"steps": 300, "per_call": 4}, "big": {"steps": 9000, "per_call": 3},
                       "last": {"steps": 300, "per_call": 4}})
    total = journal_rows(proc.data, "SELECT COUNT(*) FROM journal WHERE run='big'")[0][0]
    with proc.client() as client:
        kept = {run: entries_of(client, run) for run in ("first", "last")}
        assert client.remove(["big"])[0]["points"] == 18000

        def halfway() -> bool:
            return journal_rows(proc.data, "SELECT COUNT(*) FROM journal WHERE run='big'")[0][0] < total * 0.9
        wait_until(halfway, interval=0.005, what="the removal under way")
    proc.kill()
    left = journal_rows(proc.data, "SELECT COUNT(*) FROM journal WHERE run='big'")[0][0]
    assert 0 < left < total

    proc.start()
    with proc.client() as client:
        assert "big" not in run_ids(client)  # still hidden, from the first answer on
        assert all(e.run != "big" for page in client.history() for e in page.entries)  # readers never see it
        wait_until(lambda: gone(proc.data, "big"), what="the removal finished after the restart")
        assert {run: entries_of(client, run) for run in ("first", "last")} == kept
    assert "resuming the removal of 1 run(s): big" in proc.log.read_text()
