"""Another user on the same node (a real second user: ``nobody``, through setpriv) gets nothing:
the agent on 127.0.0.1 refuses its clients, raw frames and trainer (its local keys are not the
owner's), the journal and the logs are the owner's alone, and a port it squats learns nothing from
the owner's trainer and CLI.
"""

from __future__ import annotations

import json
import os
import signal
import stat
import subprocess
import sys
import tempfile
from pathlib import Path

import psutil
import pytest
from support.processes import LOOP_UNTIL_STOPPED, finish, start_trainer
from support.runs import run_events
from support.sockets import free_port
from support.users import NOBODY, as_nobody
from support.waiting import wait_until

import pilothouse as ph
from pilothouse.client import AgentUnavailable, Client, reachable
from pilothouse.security import Keyring
from pilothouse.trainer.launcher import ensure_local_agent

STRANGER = """
import json, struct, sys, threading, time
import msgpack, zmq
from pilothouse.client import AgentUnavailable, Client
import pilothouse as ph

url, run_id, owner_agent_key = sys.argv[1:4]
out = {}

def ask_as_a_client():
    try:
        Client(url, timeout=2).runs()
        out["client"] = "answered"
    except AgentUnavailable as exc:
        out["client"] = str(exc)

def probe(sock):
    # everything a peer could send: a forged batch for the owner's run, its heartbeat and an
    # answer to its commands, a hello, queries and a subscription
    sock.setsockopt(zmq.LINGER, 0)
    sock.connect(url)
    for msg in ({"t": "rec", "run": run_id, "rank": 0, "seq": 1, "floor": 1, "n": 1, "keys": [["loss"]],
                 "metrics": [[0, struct.pack("<I", 0), struct.pack("<qdd", 0, 1.0, 666.0)]], "others": []},
                {"t": "hb", "run": run_id, "rank": 0, "step": 5, "paused": True},
                {"t": "cack", "run": run_id, "rank": 0, "cid": "x1", "cmd": "set", "state": "applied", "step": 1,
                 "detail": "applied", "applied": {"lr": 9.0}},
                {"t": "hello", "run": "strangerrun", "rank": 0, "token": "ab" * 16, "project": "p", "name": "n",
                 "host": "h", "pid": 1, "config": {}},
                {"t": "q", "id": 1, "op": "runs", "args": {}},
                {"t": "q", "id": 2, "op": "alert_add", "args": {"rule": {"name": "x", "kind": "nonfinite"}}},
                {"t": "sub", "after": 0, "credit": 8, "kinds": []}):
        try:
            sock.send(msgpack.packb(msg), zmq.NOBLOCK)
        except zmq.Again:
            pass
    got, deadline = 0, time.monotonic() + 2
    while time.monotonic() < deadline:
        if sock.poll(50):
            got += len(sock.recv())
    sock.close()
    return got

ctx = zmq.Context.instance()
from pilothouse.security import local_keyring, secure_client
sock = ctx.socket(zmq.DEALER)
secure_client(sock, local_keyring().keypair("client"), owner_agent_key)  # its own key, the owner's agent key
plain = ctx.socket(zmq.DEALER)
# each way in waits seconds for an answer that must not come: they wait at once, each on its own socket
tries = [threading.Thread(target=ask_as_a_client),
         threading.Thread(target=lambda: out.update(plain_bytes=probe(plain))),
         threading.Thread(target=lambda: out.update(curve_bytes=probe(sock)))]
for t in tries:
    t.start()
run = ph.init(project="stranger", name="intruder", agent=url, heartbeat=0.2)
run.log({"loss": 1.0}, step=0)
out["flushed"] = run.flush(3)
out["trainer_error"] = run.stats["last_error"]
for t in tries:
    t.join()
print(json.dumps(out))
"""


def test_another_local_user_can_neither_read_write_nor_steer(tmp_path, agent_proc):
    """nobody reaches 127.0.0.1 like everyone on the node: the CLI/app client, raw plain frames, raw
    CURVE frames with its own key and a trainer of its own all get nothing in, nothing out."""
    trainer = start_trainer(tmp_path, LOOP_UNTIL_STOPPED, agent_proc.url, "sec", "guarded")
    run_id = trainer.stdout.readline().strip()
    local = agent_proc.client()
    try:
        wait_until(lambda: any(r["id"] == run_id and r["last_step"] for r in local.runs()), what="the trainer")
        local.command(run_id, "pause")
        before = local.series(run_id, "loss")
        out = as_nobody(STRANGER, agent_proc.url, run_id, Keyring(os.environ["PILOTHOUSE_LOCAL_KEYS"]).public("agent"))
        assert out.returncode == 0, out.stderr
        seen = json.loads(out.stdout)
        assert "is not your agent" in seen["client"]  # its local keys are not the owner's: it says so
        assert seen["plain_bytes"] == 0 and seen["curve_bytes"] == 0
        assert seen["flushed"] is False and "not your agent" in seen["trainer_error"]
        after = local.series(run_id, "loss")
        assert [a.tolist() for a in after] == [b.tolist() for b in before]  # nothing forged in
        runs = {r["id"]: r for r in local.runs()}
        assert "strangerrun" not in runs and all(r["project"] != "stranger" for r in runs.values())
        assert runs[run_id]["status"] == "paused" and local.alerts()["rules"] == []
        assert all(e["cid"] != "x1" for e in run_events(local, run_id, "ack"))
    finally:
        if trainer.poll() is None:
            local.command(run_id, "stop", wait=10)
            finish(trainer)
        local.close()


def test_the_journal_and_the_log_are_the_owners_alone(tmp_path, agent_proc):
    with agent_proc.client() as client:
        client.ping()
    data = agent_proc.data
    assert stat.S_IMODE(data.stat().st_mode) == 0o700
    files = sorted(p.name for p in data.iterdir() if p.name.startswith("journal.sqlite"))
    assert files == ["journal.sqlite", "journal.sqlite-shm", "journal.sqlite-wal"]
    assert {stat.S_IMODE((data / f).stat().st_mode) for f in files} == {0o600}
    os.chmod(data.parent, 0o755)  # even where the folder above is open, the data folder is not
    out = as_nobody("""
        import sys
        for path in sys.argv[1:]:
            try:
                open(path, "rb").read(1)
                print("read", path)
            except PermissionError:
                print("denied")
        """, str(data / "journal.sqlite"), str(data / "journal.sqlite-wal"))
    assert out.stdout.split() == ["denied", "denied"], out.stdout + out.stderr


def test_an_agent_a_trainer_starts_keeps_its_log_private(tmp_path):
    url = f"tcp://127.0.0.1:{free_port()}"
    data = tmp_path / "auto"
    ensure_local_agent(url, data)
    wait_until(lambda: reachable(url, timeout=0.5), timeout=20, what="the started agent")
    with Client(url) as client:
        pid = client.ping()["pid"]
    try:
        assert stat.S_IMODE(data.stat().st_mode) == 0o700
        assert stat.S_IMODE((data / "agent.log").stat().st_mode) == 0o600
        assert stat.S_IMODE((data / "journal.sqlite").stat().st_mode) == 0o600
    finally:
        os.kill(pid, signal.SIGTERM)
        wait_until(lambda: not psutil.pid_exists(pid) or psutil.Process(pid).status() == psutil.STATUS_ZOMBIE,
                   what="the started agent to stop")


SQUATTER = """
import sys, time, zmq
sock = zmq.Context.instance().socket(zmq.ROUTER)
sock.bind(sys.argv[1])
print("listening", flush=True)
got, deadline = 0, time.monotonic() + float(sys.argv[2])
while time.monotonic() < deadline:
    if sock.poll(50):
        got += sum(len(f) for f in sock.recv_multipart())
print(got, flush=True)
"""


def test_a_squatter_on_the_port_learns_nothing(tmp_path):
    """Another user binds the agent's port first: the owner's trainer and CLI do not finish the
    handshake with it (it lacks the owner's agent key), send it nothing, and say why."""
    url = f"tcp://127.0.0.1:{free_port()}"
    home = Path(tempfile.mkdtemp(prefix="pilothouse-squat-"))
    os.chown(home, NOBODY.pw_uid, NOBODY.pw_gid)
    (home / "squat.py").write_text(SQUATTER)
    squatter = subprocess.Popen(["setpriv", f"--reuid={NOBODY.pw_uid}", f"--regid={NOBODY.pw_gid}",
                                 "--clear-groups", sys.executable, str(home / "squat.py"), url, "6"],
                                stdout=subprocess.PIPE, text=True, env={"HOME": str(home), "PATH": "/usr/bin:/bin"})
    try:
        assert squatter.stdout.readline().strip() == "listening"
        run = ph.init(project="owner", name="secret-run", agent=url, heartbeat=0.2, config={"api_key": "hunter2"})
        run.log({"loss": 1.0}, step=0)
        assert not run.flush(2)
        assert "not your agent" in run.stats["last_error"]
        with pytest.raises(AgentUnavailable, match="not your agent"):
            Client(url, timeout=1).runs()
        run.finish(timeout=0.5)
        assert squatter.stdout.readline().strip() == "0"  # not one byte of a message reached it
    finally:
        squatter.kill()
        squatter.wait()
