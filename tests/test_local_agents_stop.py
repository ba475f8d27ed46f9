"""``pilothouse agents stop``: the user's own recorded agents, and only those, are stopped as Ctrl-C
stops one (SIGTERM: the journal notes the stop and is closed, the record goes), and a background
agent's notice from ``ph.init`` names the command that stops it."""

from __future__ import annotations

import contextlib
import os
import re
import signal
import sqlite3

from support.processes import AgentProcess, start_trainer
from support.processes import run_cli as cli
from support.sockets import free_port
from support.waiting import wait_until

from pilothouse.client import reachable
from pilothouse.local_agents import recorded


def _noted_stop(data, log: str = "agent-test.log") -> bool:
    """Whether the agent stopped cleanly: its journal noted the stop (its own run, "system", finished)
    and it got to its last log line, written once the journal is closed."""
    db = sqlite3.connect(data / "journal.sqlite")
    try:
        statuses = [row[0] for row in db.execute("SELECT status FROM runs WHERE kind='system'")]
    finally:
        db.close()
    return statuses == ["finished"] and "pilothouse agent stopped" in (data / log).read_text()


def test_stop_names_the_agents_then_stops_the_one_asked_and_only_it(tmp_path):
    a = AgentProcess(tmp_path / "a", free_port()).start()
    b = AgentProcess(tmp_path / "b", free_port()).start()
    c = AgentProcess(tmp_path / "c", free_port()).start()
    try:
        which = cli("agents", "stop")  # several: none is stopped, each is named
        assert which.returncode == 2 and which.stdout == ""
        for agent in (a, b, c):
            assert f"pid {agent.proc.pid} at {agent.url}" in which.stderr
        assert "--all" in which.stderr
        assert len(recorded()) == 3 and all(x.proc.poll() is None for x in (a, b, c))

        for bad, code, said in ((str(1 << 22), 1, f"not one of your agents: pid {1 << 22}"),
                                ("tcp://127.0.0.1:1", 1, "not one of your agents: tcp://127.0.0.1:1"),
                                ("http://nope", 2, "neither a pid nor an agent URL")):
            out = cli("agents", "stop", bad)
            assert out.returncode == code and said in out.stderr and out.stdout == "", out.stderr
            assert code == 2 or f"pid {a.proc.pid} at {a.url}" in out.stderr  # not one of yours: the ones there are
        both = cli("agents", "stop", str(a.proc.pid), "--all")
        assert both.returncode == 2 and "not both" in both.stderr
        assert len(recorded()) == 3 and all(x.proc.poll() is None for x in (a, b, c))

        by_pid = cli("agents", "stop", str(a.proc.pid))
        assert by_pid.returncode == 0, by_pid.stderr
        assert by_pid.stdout.strip() == f"stopped the agent at {a.url} (pid {a.proc.pid}, data in {a.data})"
        assert a.proc.wait(timeout=10) == 0  # it had ended (a zombie of this test) when the command returned
        assert _noted_stop(a.data)

        by_url = cli("agents", "stop", b.url)
        assert by_url.returncode == 0 and f"stopped the agent at {b.url}" in by_url.stdout, by_url.stderr
        assert b.proc.wait(timeout=10) == 0 and _noted_stop(b.data)
        assert [x.url for x in recorded()] == [c.url] and reachable(c.url)

        again = cli("agents", "stop", str(a.proc.pid))  # already stopped: no longer one of yours
        assert again.returncode == 1 and f"pid {c.proc.pid} at {c.url}" in again.stderr

        last = cli("agents", "stop")  # one agent left: no need to name it
        assert last.returncode == 0 and f"stopped the agent at {c.url}" in last.stdout, last.stderr
        assert c.proc.wait(timeout=10) == 0 and recorded() == []
        none = cli("agents", "stop")
        assert none.returncode == 0 and "nothing to stop" in none.stdout
    finally:
        for agent in (a, b, c):
            agent.stop()


def test_stop_all(tmp_path):
    agents = [AgentProcess(tmp_path / n, free_port()).start() for n in "ab"]
    try:
        out = cli("agents", "stop", "--all")
        assert out.returncode == 0, out.stderr
        assert sorted(out.stdout.splitlines()) == sorted(
            f"stopped the agent at {x.url} (pid {x.proc.pid}, data in {x.data})" for x in agents)
        assert all(x.proc.wait(timeout=10) == 0 and _noted_stop(x.data) for x in agents)
        assert recorded() == []
    finally:
        for agent in agents:
            agent.stop()


def test_the_background_agents_notice_names_the_command_that_stops_it(tmp_path):
    """The launcher ``ph.init`` uses, on a free port: the agent it starts outlives the script, and the
    command its notice gives stops it cleanly."""
    url, data = f"tcp://127.0.0.1:{free_port()}", tmp_path / "bg"
    body = "from pathlib import Path\nfrom pilothouse.trainer.launcher import ensure_local_agent\n" \
           "ensure_local_agent(URL, Path(ARGS[0]))\n"
    _, err = start_trainer(tmp_path, body, url, str(data)).communicate(timeout=60)
    said = re.fullmatch(r"pilothouse: started a background agent on (\S+) \(pid (\d+), data in (\S+)\); it keeps "
                        r"running after this script, stop it with `(pilothouse agents stop (\d+))`\n", err)
    assert said is not None, err
    assert said[1] == url and said[3] == str(data) and said[2] == said[5]
    pid = int(said[2])
    try:
        wait_until(lambda: [x.pid for x in recorded()] == [pid], timeout=20, what="the background agent's record")
        out = cli(*said[4].split()[1:])  # the command as the notice spells it
        assert out.returncode == 0 and out.stdout.strip() == f"stopped the agent at {url} (pid {pid}, data in {data})"
        assert recorded() == [] and not reachable(url, timeout=0.5)
        assert _noted_stop(data, "agent.log")
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)  # only if the test failed before its stop
