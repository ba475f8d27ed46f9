"""A journal with a damaged page: a clear error naming the file, then `pilothouse agent --recover`
salvages every readable row into a new journal.  Real files: the page is overwritten on disk."""

from __future__ import annotations

import sqlite3

from conftest import AgentProcess, free_port, run_cli

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


def test_a_damaged_page_is_named_and_recover_keeps_the_rest(tmp_path, monkeypatch):
    monkeypatch.setenv("PILOTHOUSE_PACK_ROWS", "1000000")  # many small rows over many pages, left unpacked
    data = tmp_path / "agent"
    proc = AgentProcess(data, free_port()).start()
    run = ph.init(project="disk", name="damaged", agent=proc.url)
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
        busy = run_cli("agent", "--recover", "--data", str(data), "--bind", proc.url)
        assert busy.returncode != 0 and "stop it before --recover" in busy.stderr
    finally:
        proc.stop()

    done = run_cli("agent", "--recover", "--data", str(data), "--bind", proc.url)
    assert done.returncode == 0, done.stderr
    assert "unreadable" in done.stdout and "runs: 2 rows kept" in done.stdout, done.stdout
    assert len(list(data.glob("journal.sqlite.damaged-*[0-9]"))) == 1

    proc.start()
    try:
        with Client(proc.url, timeout=10) as client:
            steps, vals, _ = client.series(run.id, "loss")
            assert 2500 <= len(steps) < 3000  # one page of chunks lost, every other point kept
            assert (steps.astype(float) == vals).all() and len(set(steps.tolist())) == len(steps)
            row = next(r for r in client.runs() if r["id"] == run.id)
            assert row["status"] == "finished" and row["summary"]["loss"] == 2999.0
            assert client.ping()["damaged"] is None
    finally:
        proc.stop()
