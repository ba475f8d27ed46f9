"""A full disk is a state, not a crash: reads go on, writes are refused as such, ingest resumes.

The test fills a real filesystem: a small tmpfs mounted for it (we run as root, as CI does).
"""

from __future__ import annotations

import errno
import subprocess
from pathlib import Path

import pytest
from conftest import AgentProcess, free_port, run_cli, wait_until

import pilothouse as ph
from pilothouse.client import AgentError, Client
from pilothouse.gui.network import AgentLink


def _health_text(health) -> str:
    from pilothouse.gui._qt.app import _health_text as text  # the status bar's line, Qt only on import

    return text(health)


def _fill(path: Path) -> None:
    """Take every free byte of ``path``'s filesystem."""
    with open(path, "wb", buffering=0) as out:
        for size in (1 << 20, 65536, 4096, 512):  # the last bits too
            while True:
                try:
                    if out.write(b"\0" * size) < size:
                        break
                except OSError as exc:
                    assert exc.errno == errno.ENOSPC, exc
                    break


@pytest.fixture
def small_disk(tmp_path):
    mount = tmp_path / "disk"
    mount.mkdir()
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=48m,mode=0700", "tmpfs", str(mount)],
                          capture_output=True, text=True)
    if done.returncode != 0:
        pytest.fail(f"cannot mount a tmpfs for the full-disk test ({done.stderr.strip()}): run the tests as root")
    yield mount
    subprocess.run(["umount", "-l", str(mount)], check=False)


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
        _fill(filler)
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
