"""The user's agents found with no flag: each real agent records itself in the (per-test, private)
runtime dir, ``pilothouse agents`` lists them, and a command without --agent reaches the one agent
holding the run it names, or refuses naming the agents that hold it."""

from __future__ import annotations

import json
import os
import signal

import psutil
from support.processes import LOOP_UNTIL_STOPPED, AgentProcess, start_trainer
from support.processes import run_cli as cli
from support.sockets import free_port

from pilothouse.local_agents import recorded
from pilothouse.paths import agents_dir


def test_commands_without_agent_find_the_users_agents(tmp_path):
    a = AgentProcess(tmp_path / "a", free_port()).start()
    b = AgentProcess(tmp_path / "b", free_port()).start()
    trainers = []
    try:
        assert {(x.url, x.pid) for x in recorded()} == {(a.url, a.proc.pid), (b.url, b.proc.pid)}
        assert all(os.stat(x.path).st_mode & 0o777 == 0o600 for x in recorded())
        assert os.stat(agents_dir()).st_mode & 0o777 == 0o700

        for url, name in ((a.url, "only-a"), (a.url, "both"), (b.url, "both")):
            trainers.append(start_trainer(tmp_path, LOOP_UNTIL_STOPPED, url, "proj", name, name=f"t{len(trainers)}"))
        only_a = trainers[0].stdout.readline().strip()
        for t in trainers[1:]:
            t.stdout.readline()  # the run exists on its agent

        listed = cli("agents")
        assert listed.returncode == 0, listed.stderr
        lines = listed.stdout.splitlines()
        assert lines[0].split() == ["URL", "PID", "RUNS", "DATA"]
        assert sorted(line.split()[:3] for line in lines[1:]) == sorted(
            [[a.url, str(a.proc.pid), "2"], [b.url, str(b.proc.pid), "1"]])

        paused = cli("pause", "only-a")
        assert paused.returncode == 0, paused.stderr
        assert f"run {only_a}" in paused.stdout
        with a.client() as client:
            assert next(r for r in client.runs() if r["id"] == only_a)["status"] == "paused"

        ambiguous = cli("pause", "both")
        assert ambiguous.returncode == 1
        assert a.url in ambiguous.stderr and b.url in ambiguous.stderr and "--agent" in ambiguous.stderr

        explicit = cli("pause", "only-a", "--agent", b.url)  # an explicit --agent is asked alone, as ever
        assert explicit.returncode == 1 and "no run with id or name 'only-a'" in explicit.stderr

        record_b = next(x.path for x in recorded() if x.url == b.url)
        b.kill(signal.SIGKILL)  # no clean stop: its record stays, stale
        assert record_b.exists()
        assert [x.url for x in recorded()] == [a.url]
        assert not record_b.exists()
        assert cli("resume", "both").returncode == 0  # the one live agent holding it
    finally:
        for t in trainers:
            t.kill()
            t.wait()
        a.stop()
        b.stop()
    assert recorded() == []  # a clean stop (SIGTERM) removes the agent's record


def test_a_record_whose_pid_is_another_programs_is_ignored_and_removed(tmp_path):
    folder = agents_dir()
    folder.mkdir(parents=True, mode=0o700)
    me = psutil.Process()
    live = folder / f"{me.pid}.json"  # this pid runs, but started later than the agent that wrote this
    live.write_text(json.dumps({"url": "tcp://127.0.0.1:1", "pid": me.pid, "data": str(tmp_path),
                                "started": me.create_time() - 1000}))
    live.chmod(0o600)
    assert recorded() == []
    assert not live.exists()
    out = cli("agents")
    assert out.returncode == 0 and "no agent of yours" in out.stdout
