"""One run across restarts, at the agent: a trainer SIGKILLed and started again with the same run id
continues the run as attempt 2, the resume an event that says where, after what and from which step;
a resume under another project or name is refused and changes nothing."""

from __future__ import annotations

import signal
import socket

import pytest
import sqlite_utils
from support.processes import finish, run_cli, start_trainer
from support.runs import run_events
from support.waiting import wait_until

import pilothouse as ph
from pilothouse.client import Client
from pilothouse.node.journal import Store

# ARGS: run id, first step, steps (0: until killed), project, name
TRAINER = """
run = ph.init(project=ARGS[3], name=ARGS[4], id=ARGS[0], agent=URL, heartbeat=0.2)
first, count = int(ARGS[1]), int(ARGS[2])
step = first
while count == 0 or step < first + count:
    run.log({"loss": 1.0 / (step + 1)}, step=step)
    step += 1
    time.sleep(0.005 if count == 0 else 0)
print(run.finish(timeout=30), run.stats["last_error"], flush=True)
"""


def crash_at(tmp_path, url: str, run_id: str, steps: int) -> None:
    """A trainer that logs until it is SIGKILLed, once the agent holds ``steps`` of its steps."""
    proc = start_trainer(tmp_path, TRAINER, url, run_id, "0", "0", "resume", "long", name="first")
    with Client(url) as client:
        wait_until(lambda: any(r["id"] == run_id for r in client.runs())
                   and len(client.series(run_id, "loss")[0]) >= steps, timeout=30, what="the first attempt's steps")
    proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=10)


def test_a_killed_trainer_restarted_with_its_id_is_attempt_two(tmp_path, agent_proc):
    crash_at(tmp_path, agent_proc.url, "again1", 40)
    with Client(agent_proc.url) as client:
        before = max(client.series("again1", "loss")[0].tolist())
        second = start_trainer(tmp_path, TRAINER, agent_proc.url, "again1", "20", "50", "resume", "long",
                               name="second")  # from a checkpoint at step 20, older than the crash
        assert finish(second).split()[0] == "True"
        row = next(r for r in client.runs() if r["id"] == "again1")
        assert row["attempts"] == 2 and row["status"] == "finished" and row["last_step"] == 69
        resumed, = run_events(client, "again1", "resumed")
        assert resumed["attempt"] == 2 and resumed["host"] == socket.gethostname()
        assert resumed["after"] == "crashed" and resumed["after_step"] >= before
        steps = client.series("again1", "loss")[0].tolist()
        assert steps.count(20) == 2 and steps[-50:] == list(range(20, 70))  # every point of both kept
    listing = run_cli("runs", "--agent", agent_proc.url).stdout.splitlines()
    header, line = listing[0].split(), next(x for x in listing if x.startswith("again1")).split()
    assert line[header.index("ATTEMPT")] == "2"
    events = run_cli("events", "again1", "--agent", agent_proc.url).stdout
    assert f"↻ resumed on {socket.gethostname()} (attempt 2, after crashed at step {resumed['after_step']})" in events
    tail = run_cli("tail", "again1", "--agent", agent_proc.url).stdout
    assert "finished on" in tail and "attempt 2" in tail.splitlines()[0]


@pytest.mark.parametrize("project, name", [("other", "long"), ("resume", "renamed")])
def test_a_resume_under_another_project_or_name_is_refused_and_changes_nothing(tmp_path, agent_proc, project,
                                                                               name):
    first = start_trainer(tmp_path, TRAINER, agent_proc.url, "mine1", "0", "10", "resume", "long", name="first")
    assert finish(first).split()[0] == "True"
    with Client(agent_proc.url) as client:
        row = {k: v for k, v in next(r for r in client.runs() if r["id"] == "mine1").items() if k != "silent"}
        events = run_events(client, "mine1")
        clash = start_trainer(tmp_path, TRAINER.replace("timeout=30", "timeout=3"), agent_proc.url, "mine1",
                              "100", "10", project, name, name="clash")
        flushed, _, error = finish(clash).strip().partition(" ")
        assert flushed == "False"
        assert f"run id 'mine1' is run resume/long on this agent; it cannot be resumed as {project}/{name}" in error
        assert {k: v for k, v in next(r for r in client.runs() if r["id"] == "mine1").items() if k != "silent"} == row
        assert run_events(client, "mine1") == events
        assert client.series("mine1", "loss")[0].tolist() == list(range(10))


def test_a_resume_without_a_name_continues_under_the_runs_name(tmp_path, agent_proc):
    body = TRAINER.replace("name=ARGS[4], ", "")
    for k, first in enumerate((0, 10)):
        proc = start_trainer(tmp_path, TRAINER if k == 0 else body, agent_proc.url, "noname1", str(first), "10",
                             "resume", "long", name=f"t{k}")
        assert finish(proc).split()[0] == "True"
    with Client(agent_proc.url) as client:
        row = next(r for r in client.runs() if r["id"] == "noname1")
    assert (row["name"], row["attempts"]) == ("long", 2)


@pytest.mark.parametrize("bad", ["has space", "../up", "x" * 200, "sys-node"])
def test_a_malformed_run_id_is_refused_before_anything_is_sent(bad, monkeypatch):
    monkeypatch.setenv("PILOTHOUSE_RUN_ID", bad)
    with pytest.raises(ValueError, match="run id"):
        ph.init(project="resume", id=bad or None, agent="tcp://127.0.0.1:1")


def test_a_journal_from_before_attempts_counts_each_run_as_one(tmp_path):
    path = tmp_path / "journal.sqlite"
    store = Store(path)
    store.begin()
    store.upsert_run({"run": "old1", "project": "p", "name": "n", "host": "h", "pid": 1, "config": {}}, 1.0)
    store.commit()
    store.db.conn.close()
    sqlite_utils.Database(path)["runs"].transform(drop={"attempts"})
    sqlite_utils.Database(path).execute("PRAGMA user_version=0")  # as a file from before the schema was numbered
    reopened = Store(path)
    assert [(r["id"], r["attempts"]) for r in reopened.runs()] == [("old1", 1)]


def test_a_run_written_without_attempts_an_import_counts_one_and_resumes_as_two(tmp_path):
    store = Store(tmp_path / "journal.sqlite")
    store.db.execute("INSERT INTO runs (id, project, name, kind, status, pid, pid_started) "
                     "VALUES ('imp1', 'p', 'n', 'train', 'finished', 1, 1.0)")  # as the import desk writes a run
    store.begin()
    resume = store.upsert_run({"run": "imp1", "project": "p", "name": "n", "host": "h", "pid": 2, "config": {}}, 2.0)
    store.commit()
    assert (resume.attempt, resume.status) == (2, "finished")
    assert [(r["id"], r["attempts"]) for r in store.runs()] == [("imp1", 2)]
