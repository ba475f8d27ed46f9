"""A full disk is a state, not a crash: reads go on, writes are refused as such, ingest resumes.

The test fills a real filesystem: a small tmpfs mounted for it (we run as root, as CI does).
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from support.disk import fill_disk
from support.processes import AgentProcess, run_cli
from support.sockets import free_port
from support.waiting import wait_until

import pilothouse as ph
from pilothouse.client import AgentError, Client
from pilothouse.gui.network import AgentLink

pytest_plugins = ["support.disk"]  # small_disk


def _health_text(health) -> str:
    from pilothouse.gui.health_text import health_text as text  # the status bar's line

    return text(health)


@pytest.mark.timeout(180)
def test_a_full_disk_refuses_writes_keeps_reads_and_loses_nothing_once_space_returns(small_disk):
    proc = AgentProcess(small_disk / "agent", free_port(), ["--stale-after", "30"]).start()
    run = ph.init(project="disk", name="filling", agent=proc.url, heartbeat=0.2)
    names = [f"metric_{i:02d}" for i in range(20)]
    try:
        for step in range(200):
            run.log({n: float(step) for n in names}, step=step)
        assert run.flush(20)
        filler = small_disk / "filler"
        fill_disk(filler)
        log_size = proc.log.stat().st_size
        for step in range(200, 2200):
            run.log({n: float(step) for n in names}, step=step)
        wait_until(lambda: "disk full:" in run.stats["last_error"], timeout=30, what="the trainer told of the disk")
        assert "MB free at" in run.stats["last_error"] and run.stats["errors"] > 0

        with Client(proc.url, timeout=10) as client:
            state = client.ping()["disk_full"]
            assert state.startswith("disk full: ") and str(small_disk / "agent") in state
            assert len(client.series(run.id, "metric_00")[0]) >= 200  # reads go on
            assert any(r["id"] == run.id for r in client.runs())
        listing = run_cli("runs", "--agent", proc.url)
        assert listing.returncode == 0 and "filling" in listing.stdout and "disk full:" in listing.stderr
        paused = run_cli("pause", run.id, "--agent", proc.url, "--timeout", "10")
        assert paused.returncode != 0 and "disk full:" in paused.stderr, paused
        assert "stays queued" not in paused.stderr
        with Client(proc.url, timeout=10) as client, pytest.raises(AgentError, match="disk full:"):
            client.add_alert({"name": "r", "kind": "nonfinite", "metric": "metric_00"})
        link = AgentLink(proc.url, small_disk.parent / "app.sqlite", runs_every=0.2)  # the app's reader
        link.start()
        try:
            wait_until(lambda: link.health().warning.startswith("disk full: "), what="the app's status")
            assert "⚠ disk full: " in _health_text(link.health())
        finally:
            link.stop()

        filler.unlink()
        assert run.flush(60), run.stats
        with Client(proc.url, timeout=10) as client:
            for name in (names[0], names[-1]):
                steps = client.series(run.id, name)[0]
                assert steps.tolist() == list(range(2200)), name  # every point, exactly once
            wait_until(lambda: client.ping()["disk_full"] is None, what="the state cleared")
        text = proc.log.read_text()
        assert "Traceback" not in text
        assert proc.log.stat().st_size - log_size < 10_000, text[-3000:]
        assert "space returned" in text and text.count("disk full:") <= 3
    finally:
        run.finish(timeout=10)
        proc.stop()


def _run_row(proc: AgentProcess, run_id: str) -> dict:
    with Client(proc.url, timeout=10) as client:
        return next(r for r in client.runs() if r["id"] == run_id)


def _log(run, start: int, count: int, names: list[str]) -> int:
    for step in range(start, start + count):
        run.log({n: float(step) for n in names}, step=step)
    return start + count


def _agent_and_run(small_disk: Path, name: str) -> tuple[Path, AgentProcess, ph.Run, list[str]]:
    """An agent on the small disk and a trainer with a 1 MB buffer logging five metrics to it."""
    data = small_disk / "agent"
    proc = AgentProcess(data, free_port(), ["--stale-after", "30"]).start()
    run = ph.init(project="disk", name=name, agent=proc.url, heartbeat=0.2, buffer_mb=1)
    return data, proc, run, [f"m{i}" for i in range(5)]


@pytest.mark.timeout(120)
def test_a_trainer_through_full_partly_freed_and_free_keeps_every_acked_point_and_counts_its_drops(small_disk):
    """While the disk is short the run's LOST already says what the trainer's small buffer dropped
    (the bookkeeping fits in the headroom), the WAL is truncated, and once space returns every
    point the trainer still held is stored: stored + LOST = logged."""
    data, proc, run, names = _agent_and_run(small_disk, "cycle")
    try:
        step = _log(run, 0, 20000, names)
        assert run.flush(20)
        wal = data / "journal.sqlite-wal"
        grown = wal.stat().st_size
        assert grown > 1 << 20  # a WAL that only a truncating checkpoint gives back
        part, filler = small_disk / "part", small_disk / "filler"
        part.write_bytes(bytes(24 << 20))
        fill_disk(filler)
        step = _log(run, step, 30000, names)
        wait_until(lambda: run.stats["dropped_records"] > 0 and "disk full:" in run.stats["last_error"],
                   what="the trainer dropping records on a full disk")
        part.unlink()  # partly freed: less than the headroom new data needs
        step = _log(run, step, 30000, names)
        seen = {"dropped": -1, "since": 0.0}

        def settled() -> bool:  # the trainer's thread done with what was logged (it drops as it takes records)
            dropped = run.stats["dropped_records"]
            if dropped != seen["dropped"]:
                seen.update(dropped=dropped, since=time.monotonic())
                return False
            return time.monotonic() - seen["since"] >= 1.0 and _run_row(proc, run.id)["lost_records"] == dropped

        wait_until(settled, timeout=30, what="LOST written while the disk is short, the trainer done dropping")
        dropped = run.stats["dropped_records"]
        with Client(proc.url, timeout=10) as client:
            assert client.ping()["disk_full"].startswith("disk full: ")
        wait_until(lambda: wal.stat().st_size < grown // 2, what="the WAL truncated while space is short")
        listing = run_cli("runs", "--agent", proc.url)
        assert f"{dropped} rec" in listing.stdout, listing.stdout

        filler.unlink()
        assert run.flush(60), run.stats
        assert run.stats["dropped_records"] == dropped
        with Client(proc.url, timeout=10) as client:
            kept = client.series(run.id, "m0")[0].tolist()
            wait_until(lambda: client.ping()["disk_full"] is None, what="the state cleared")
        assert kept == sorted(set(kept)) and kept[-1] == step - 1
        assert len(kept) + dropped == step  # every record the trainer did not drop was stored, once
        assert _run_row(proc, run.id)["lost_records"] == dropped
    finally:
        run.finish(timeout=10)
        proc.stop()
    assert "Traceback" not in proc.log.read_text()


@pytest.mark.timeout(120)
def test_an_agent_started_on_a_full_disk_answers_reads_and_stores_again_once_space_returns(small_disk):
    data = small_disk / "agent"
    proc = AgentProcess(data, free_port(), ["--stale-after", "30"]).start()
    before = ph.init(project="disk", name="before", agent=proc.url)
    _log(before, 0, 100, ["loss"])
    assert before.finish(timeout=20)
    proc.stop()
    filler = small_disk / "filler"
    fill_disk(filler)

    proc.start()  # the reserve it kept is given back: the journal opens, read-only
    run = ph.init(project="disk", name="after", agent=proc.url, heartbeat=0.2)
    try:
        listing = run_cli("runs", "--agent", proc.url)
        assert listing.returncode == 0 and "before" in listing.stdout and "disk full:" in listing.stderr
        with Client(proc.url, timeout=10) as client:
            assert len(client.series(before.id, "loss")[0]) == 100
        _log(run, 0, 50, ["loss"])
        wait_until(lambda: "disk full:" in run.stats["last_error"], what="the records refused")
        filler.unlink()
        assert run.flush(30), run.stats
        with Client(proc.url, timeout=10) as client:
            assert client.series(run.id, "loss")[0].tolist() == list(range(50))
            wait_until(lambda: client.ping()["disk_full"] is None, what="the state cleared")
    finally:
        run.finish(timeout=10)
        proc.stop()
    assert (data / "space.reserve").stat().st_size > 0  # made again once space returned
    assert "Traceback" not in proc.log.read_text()


@pytest.mark.timeout(120)
def test_a_trainer_that_ends_on_a_disk_full_to_the_last_byte_leaves_its_loss_counted(small_disk):
    """No byte left even for bookkeeping (the reserve the agent gave back is taken too): the trainer's
    loss counters and last floor wait in the agent's memory and are written once space returns."""
    data, proc, run, names = _agent_and_run(small_disk, "gone")
    try:
        step = _log(run, 0, 100, names)
        assert run.flush(20)
        fill_disk(small_disk / "filler")
        step = _log(run, step, 30000, names)
        wait_until(lambda: not (data / "space.reserve").exists(), what="the reserve given back")
        fill_disk(small_disk / "filler-2")
        assert not run.finish(timeout=2)  # the trainer gives up and goes, its unacked records with it
        dropped = run.stats["dropped_records"]
        assert dropped > 0
        (small_disk / "filler").unlink()
        (small_disk / "filler-2").unlink()
        with Client(proc.url, timeout=10) as client:
            kept = len(client.series(run.id, "m0")[0])
        wait_until(lambda: _run_row(proc, run.id)["lost_records"] == step - kept, timeout=20,
                   what="the loss written once space returned")
        row = _run_row(proc, run.id)
        assert row["dropped_records"] == dropped and step - kept > dropped  # dropped, and unacked at the end
    finally:
        proc.stop()
    assert "Traceback" not in proc.log.read_text()
