"""A journal with a damaged page: a clear error naming the file, then `pilothouse agent --recover`
salvages every readable row of every table into a new journal and says what it could not keep.
Real files: the page is overwritten on disk.  One agent per data folder, and no recovery beside it."""

from __future__ import annotations

import sqlite3

from support.processes import AgentProcess, run_cli
from support.runs import run_events
from support.sockets import free_port

import pilothouse as ph
from pilothouse.client import AgentError, Client


def _damage_a_journal_page(path) -> int:
    """Overwrite one leaf page of the ``journal`` table, in the middle of it, with garbage."""
    con = sqlite3.connect(path)
    pages = [p for (p,) in con.execute("SELECT pageno FROM dbstat WHERE name='journal' AND pagetype='leaf' "
                                       "ORDER BY pageno")]
    size = con.execute("PRAGMA page_size").fetchone()[0]
    con.close()
    page = pages[len(pages) // 2]
    with open(path, "r+b") as f:
        f.seek((page - 1) * size)
        f.write(bytes(range(256)) * (size // 256))
    return page


def _damage_root_page(path, table: str) -> None:
    """Overwrite the root page of ``table`` (none of its rows can be read)."""
    con = sqlite3.connect(path)
    root = con.execute("SELECT rootpage FROM sqlite_master WHERE name=?", [table]).fetchone()[0]
    size = con.execute("PRAGMA page_size").fetchone()[0]
    con.close()
    with open(path, "r+b") as f:
        f.seek((root - 1) * size)
        f.write(b"\xff" * size)


def test_one_agent_per_data_folder_and_no_recover_beside_it(tmp_path):
    """The probe: an agent serving the folder on another port than the default; a second agent and
    `--recover` (which pinged only the default port) are both refused, naming the holder's pid."""
    data = tmp_path / "agent"
    proc = AgentProcess(data, free_port()).start()
    try:
        second = run_cli("agent", "--data", str(data), "--bind", f"tcp://127.0.0.1:{free_port()}", timeout=30)
        assert second.returncode != 0 and f"in use by an agent (pid {proc.proc.pid})" in second.stderr, second
        busy = run_cli("agent", "--recover", "--data", str(data))
        assert busy.returncode != 0 and f"(pid {proc.proc.pid}): stop it before --recover" in busy.stderr, busy
        assert not list(data.glob("journal.sqlite.*"))  # the live journal was left where it is
        assert proc.ready()
    finally:
        proc.stop()
    started = run_cli("agent", "--recover", "--data", str(data))  # the lock went with its holder
    assert started.returncode == 0, started.stderr


def test_a_damaged_page_is_named_and_recover_keeps_the_rest(tmp_path, monkeypatch):
    monkeypatch.setenv("PILOTHOUSE_PACK_ROWS", "1000000")  # many small rows over many pages, left unpacked
    data = tmp_path / "agent"
    proc = AgentProcess(data, free_port()).start()
    run = ph.init(project="disk", name="damaged", agent=proc.url)
    with Client(proc.url, timeout=10) as client:  # rows of tables the fresh journal lacks, or holds empty
        client.add_alert({"name": "nan-loss", "kind": "nonfinite", "metric": "loss"})
        client.request("key_metric_set", project="disk", metric="loss")
    for step in range(3000):
        run.log({"loss": float(step)}, step=step)
        if step % 10 == 9:
            assert run.flush(10)  # many small batches: many journal rows over many pages
    assert run.finish(timeout=20)
    proc.stop()
    _damage_a_journal_page(data / "journal.sqlite")

    proc.start()
    try:
        with Client(proc.url, timeout=10) as client:
            try:
                client.series(run.id, "loss")
            except AgentError as exc:
                said = str(exc)
            else:
                raise AssertionError("a read across the damaged page succeeded")
            assert f"the journal {data / 'journal.sqlite'} is damaged" in said
            assert f"pilothouse agent --recover --data {data}" in said
            assert client.ping()["damaged"] == said  # the agent keeps serving, and says so
    finally:
        proc.stop()
    _damage_root_page(data / "journal.sqlite", "import_runs")

    done = run_cli("agent", "--recover", "--data", str(data))
    assert done.returncode == 0, done.stderr
    assert "unreadable" in done.stdout and "runs: 2 rows kept" in done.stdout, done.stdout
    assert "alert_rules: 1 rows kept" in done.stdout and "key_metrics: 1 rows kept" in done.stdout
    assert "import_runs: NOT COPIED" in done.stdout, done.stdout
    assert len(list(data.glob("journal.sqlite.damaged-*[0-9]"))) == 1

    proc.start()
    try:
        with Client(proc.url, timeout=10) as client:
            steps, vals, _ = client.series(run.id, "loss")
            assert 2500 <= len(steps) < 3000  # one page of chunks lost, every other point kept
            assert (steps.astype(float) == vals).all() and len(set(steps.tolist())) == len(steps)
            row = next(r for r in client.runs() if r["id"] == run.id)
            assert row["status"] == "finished" and row["summary"]["loss"] == 2999.0
            assert row["lost_records"] == 3000 - len(steps) and row["points"] == len(steps)  # the loss shown
            assert [e["points"] for e in run_events(client, run.id, "loss")] == [3000 - len(steps)]
            assert f"run {run.id}: {len(steps)} of 3000 points kept, {3000 - len(steps)} lost" in done.stdout
            assert [r["name"] for r in client.alerts()["rules"] if r["source"] == "user"] == ["nan-loss"]
            assert client.request("key_metric", project="disk")["metric"] == "loss"
            assert client.ping()["damaged"] is None
    finally:
        proc.stop()
