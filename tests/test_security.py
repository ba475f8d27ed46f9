"""Who gets in, with real keys, a real agent subprocess, real CURVE sockets and a real second user.

The agent listens on loopback (CURVE with the owner's local keys: trainers, CLI and app of the
owner) and, with --listen, on a CURVE listener bound to every interface (0.0.0.0), which clients
reach through 127.0.0.1.  Another local user (``nobody``) gets nothing from either.  Outsiders (an unlisted keypair, a
client without keys, a client expecting another agent key) must get no byte back and change
nothing; an allowed client steers the run and the audit log names its key.
"""

from __future__ import annotations

import ast
import ipaddress
import json
import os
import signal
import sqlite3
import stat
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import psutil
import pytest
import zmq
from support.messages import TOKEN
from support.paths import ROOT
from support.processes import LOOP_UNTIL_STOPPED, ON_THE_DEFAULT_PORT, AgentProcess, finish, run_cli, start_trainer
from support.runs import run_events
from support.sockets import free_port
from support.sources import imported_roots
from support.users import NOBODY, as_nobody
from support.waiting import wait_until

import pilothouse as ph
from pilothouse.client import AgentError, AgentUnavailable, Client, reachable
from pilothouse.gui.local_store import LocalStore
from pilothouse.gui.network import AgentLink
from pilothouse.security import (
    CurveListener,
    Gate,
    Keyring,
    SecurityError,
    secure_client,
    secure_server,
)
from pilothouse.trainer.launcher import ensure_local_agent
from pilothouse.wire.messages import pack, unpack
from pilothouse.wire.urls import DEFAULT_PORT, DEFAULT_URL


def cli(*args: str, keys: Path) -> subprocess.CompletedProcess:
    return run_cli(*args, env={"PILOTHOUSE_KEYS": str(keys)})


def ring_with_keys(path: Path) -> Keyring:
    ring = Keyring(path)
    ring.init()
    return ring


# --- the key files ------------------------------------------------------------------------------

def test_keys_init_makes_private_secrets_and_keeps_them(tmp_path):
    keys = tmp_path / "keys"
    first = cli("keys", "init", keys=keys)
    assert first.returncode == 0, first.stderr
    assert stat.S_IMODE(keys.stat().st_mode) == 0o700
    for role in ("agent", "client"):
        assert stat.S_IMODE((keys / f"{role}.key_secret").stat().st_mode) == 0o600
        assert stat.S_IMODE((keys / f"{role}.key").stat().st_mode) == 0o644
    ring = Keyring(keys)
    agent_key = ring.public("agent")
    assert agent_key in first.stdout and ring.public("client") in first.stdout
    assert ring.public("agent") != ring.public("client")
    assert cli("keys", "init", keys=keys).returncode == 0
    assert ring.public("agent") == agent_key  # kept
    assert cli("keys", "init", "--force", keys=keys).returncode == 0
    assert ring.public("agent") != agent_key


def test_a_secret_readable_by_others_is_refused(tmp_path):
    ring = ring_with_keys(tmp_path / "keys")
    ring.allow(ring.public("client"), "me")
    os.chmod(ring.dir / "agent.key_secret", 0o640)
    with pytest.raises(SecurityError, match="chmod 600"):
        ring.keypair("agent")
    out = cli("agent", "--bind", f"tcp://127.0.0.1:{free_port()}", "--listen", f"tcp://127.0.0.1:{free_port()}",
              "--data", str(tmp_path / "d"), keys=ring.dir)
    assert out.returncode == 2 and "chmod 600" in out.stderr and "agent.key_secret" in out.stderr
    assert not (tmp_path / "d").exists()  # refused before touching anything
    os.chmod(ring.dir / "client.key_secret", 0o604)
    ring.trust("tcp://10.1.2.3:7767", ring.public("agent"))
    with pytest.raises(SecurityError, match="client.key_secret"):
        Client("tcp://10.1.2.3:7767", keys=ring)


def test_an_allow_list_others_can_edit_is_refused(tmp_path):
    ring = ring_with_keys(tmp_path / "keys")
    ring.allow(ring.public("client"), "me")
    os.chmod(ring.dir / "allowed_clients", 0o622)
    with pytest.raises(SecurityError, match="writable by other users"):
        ring.allowed()


def test_an_exposed_keyring_stops_network_clients_but_not_local_ones(tmp_path, agent_proc):
    ring = ring_with_keys(tmp_path / "keys")
    ring.trust("tcp://10.1.2.3:7767", ring.public("agent"))
    os.chmod(ring.dir / "known_agents", 0o666)
    with pytest.raises(SecurityError, match="writable by other users"):
        Client("tcp://10.1.2.3:7767", keys=ring)
    with Client(agent_proc.url, timeout=5, keys=ring) as client:  # trainers and local tools keep working
        assert client.ping()["journal"]


@pytest.mark.parametrize("args, message", [
    (["allow", "short"], "64 hex digits"),
    (["allow", "x" * 64], "64 hex digits"),
    (["allow", "x" * 39 + "\u00e9"], "64 hex digits"),
    (["allow", "0" * 64, "--name", "bad name"], "key name"),
    (["allow", "0" * 64, "--name", "a" * 65], "key name"),
    (["trust", "http://node:7767", "0" * 64], "scheme"),
    (["trust", "tcp://node:7767", "0" * 63], "64 hex digits"),
    (["revoke", "nobody"], "no allowed client"),
])
def test_bad_key_commands_get_a_clear_error_and_change_nothing(tmp_path, args, message):
    ring = ring_with_keys(tmp_path / "keys")
    ring.allow(ring.public("client"), "me")
    before = {p.name: p.read_bytes() for p in ring.dir.iterdir()}
    out = cli("keys", *args, keys=ring.dir)
    assert out.returncode == 2 and message in out.stderr, out
    assert {p.name: p.read_bytes() for p in ring.dir.iterdir()} == before


def test_allow_and_revoke_edit_the_list(tmp_path):
    ring = ring_with_keys(tmp_path / "keys")
    other = Keyring(tmp_path / "other")
    other.init()
    assert cli("keys", "allow", ring.public("client"), "--name", "alice@laptop", keys=ring.dir).returncode == 0
    assert cli("keys", "allow", other.public("client"), keys=ring.dir).returncode == 0
    names = ring.allowed()
    assert names[ring.public("client")] == "alice@laptop" and names[other.public("client")].startswith("client-")
    assert cli("keys", "revoke", "alice@laptop", keys=ring.dir).returncode == 0
    assert list(ring.allowed()) == [other.public("client")]
    shown = cli("keys", "show", keys=ring.dir).stdout
    assert other.public("client") in shown and "alice@laptop" not in shown


# --- refusing to listen ---------------------------------------------------------------------------

def test_a_network_bind_without_keys_refuses_to_start_and_says_what_to_do(tmp_path):
    out = cli("agent", "--bind", f"tcp://0.0.0.0:{free_port()}", "--data", str(tmp_path / "d"), keys=tmp_path / "k")
    assert out.returncode == 2 and "--listen" in out.stderr and "ssh -N -L" in out.stderr
    out = cli("agent", "--listen", f"tcp://0.0.0.0:{free_port()}", "--bind", f"tcp://127.0.0.1:{free_port()}",
              "--data", str(tmp_path / "d"), keys=tmp_path / "k")
    assert out.returncode == 2 and "pilothouse keys init" in out.stderr
    ring_with_keys(tmp_path / "k")
    out = cli("agent", "--listen", f"tcp://0.0.0.0:{free_port()}", "--bind", f"tcp://127.0.0.1:{free_port()}",
              "--data", str(tmp_path / "d"), keys=tmp_path / "k")
    assert out.returncode == 2 and "pilothouse keys allow" in out.stderr
    assert not (tmp_path / "d").exists()


def listening(pid: int) -> list[tuple[str, int]]:
    return [(c.laddr.ip, c.laddr.port) for c in psutil.Process(pid).net_connections(kind="inet")
            if c.status == psutil.CONN_LISTEN]


def unmapped(ip: str) -> ipaddress.IPv4Address | ipaddress.IPv6Address:
    addr = ipaddress.ip_address(ip)
    return getattr(addr, "ipv4_mapped", None) or addr


def loopback(ip: str) -> bool:
    return unmapped(ip).is_loopback


@ON_THE_DEFAULT_PORT
def test_default_agent_start_listens_on_loopback_only(tmp_path):
    if reachable(DEFAULT_URL):
        pytest.skip(f"another agent already holds the default port {DEFAULT_URL}")
    proc = subprocess.Popen([sys.executable, "-m", "pilothouse", "agent", "--data", str(tmp_path / "d")], cwd=ROOT,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        wait_until(lambda: reachable(DEFAULT_URL), what="the agent on its default address")
        socks = listening(proc.pid)
        assert [port for _, port in socks] == [DEFAULT_PORT], socks
        assert all(loopback(ip) for ip, _ in socks), socks
    finally:
        proc.terminate()
        proc.wait(timeout=10)


def test_the_curve_listener_is_the_only_network_socket(guarded):
    ring, proc, remote, run_id, local = guarded
    socks = listening(proc.proc.pid)
    network = [(str(unmapped(ip)), port) for ip, port in socks if not loopback(ip)]
    assert network == [("0.0.0.0", int(remote.rsplit(":", 1)[1]))], socks


# --- the guarded agent ----------------------------------------------------------------------------

@pytest.fixture
def guarded(tmp_path):
    """An agent with a CURVE listener on all interfaces, one allowed client, and a running trainer."""
    ring = ring_with_keys(tmp_path / "keys")
    ring.allow(ring.public("client"), "alice@laptop")
    port = free_port()
    remote = f"tcp://127.0.0.1:{port}"
    ring.trust(remote, ring.public("agent"))
    proc = AgentProcess(tmp_path / "agent", free_port(),
                        ["--listen", f"tcp://0.0.0.0:{port}", "--keys", str(ring.dir)]).start()
    trainer = start_trainer(tmp_path, LOOP_UNTIL_STOPPED, proc.url, "sec", "guarded")
    run_id = trainer.stdout.readline().strip()
    local = proc.client()
    wait_until(lambda: any(r["id"] == run_id and r["last_step"] for r in local.runs()), what="the trainer")
    yield ring, proc, remote, run_id, local
    if trainer.poll() is None:
        local.command(run_id, "stop", wait=10)
        finish(trainer)
    local.close()
    proc.stop()


def commands_stored(proc: AgentProcess) -> int:
    con = sqlite3.connect(proc.data / "journal.sqlite", timeout=10)
    try:
        return con.execute("SELECT count(*) FROM commands").fetchone()[0]
    finally:
        con.close()


def bytes_received(ctx: zmq.Context, url: str, setup, seconds: float = 2.0) -> int:
    """Send every kind of request a reader or commander would, then count what comes back."""
    sock = ctx.socket(zmq.DEALER)
    sock.linger = 0
    setup(sock)
    sock.connect(url)
    for msg in ({"t": "q", "id": 1, "op": "runs", "args": {}},
                {"t": "q", "id": 2, "op": "read", "args": {"after": 0}},
                {"t": "sub", "after": 0, "credit": 8, "kinds": []},
                {"t": "q", "id": 3, "op": "command", "args": {"cid": "outsider000001", "run": "guarded",
                                                               "cmd": "pause", "values": None}}):
        try:
            sock.send(pack(msg), zmq.NOBLOCK)
        except zmq.Again:
            pass
    got = 0
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if sock.poll(50):
            got += len(sock.recv())
    sock.close()
    return got


def test_outsiders_read_nothing_and_apply_nothing(tmp_path, guarded):
    ring, proc, remote, run_id, local = guarded
    stranger = ring_with_keys(tmp_path / "stranger")  # a valid keypair the agent never allowed
    stranger.trust(remote, ring.public("agent"))
    impostor = Keyring(tmp_path / "impostor")  # the allowed client, but expecting another agent's key
    impostor.dir.mkdir()
    for f in ("client.key", "client.key_secret"):
        (impostor.dir / f).write_bytes((ring.dir / f).read_bytes())
        os.chmod(impostor.dir / f, 0o600)
    impostor.trust(remote, stranger.public("agent"))
    ctx = zmq.Context.instance()
    step_before = next(r for r in local.runs() if r["id"] == run_id)["last_step"]

    assert bytes_received(ctx, remote, lambda s: None) == 0  # no keys at all
    assert bytes_received(ctx, remote, lambda s: secure_client(s, stranger.keypair("client"), ring.public("agent"))) == 0
    assert bytes_received(ctx, remote, lambda s: secure_client(s, ring.keypair("client"), stranger.public("agent"))) == 0
    with Client(remote, timeout=2, keys=stranger) as client, pytest.raises(AgentUnavailable, match="refused"):
        client.runs()
    with Client(remote, timeout=2, keys=stranger) as client, pytest.raises(AgentUnavailable, match="refused"):
        client.command(run_id, "pause", wait=3)  # told at once, not "stays queued" after the wait
    began = time.monotonic()
    out = cli("pause", run_id, "--agent", remote, "--timeout", "20", keys=stranger.dir)
    assert out.returncode == 1 and "refused this client's key" in out.stderr and "queued" not in out.stderr
    assert time.monotonic() - began < 10  # the refusal is final: said at once, not after the 20 s wait
    with Client(remote, timeout=2, keys=impostor) as client, pytest.raises(AgentUnavailable, match="handshake"):
        client.runs()

    assert commands_stored(proc) == 0
    events = run_events(local, run_id)
    assert not [e for e in events if e.get("event") in ("command", "ack")], events
    run = next(r for r in local.runs() if r["id"] == run_id)
    assert run["status"] == "running" and run["last_step"] > step_before  # never paused


def test_an_allowed_client_steers_and_the_audit_log_names_its_key(guarded):
    ring, proc, remote, run_id, local = guarded
    with Client(remote, timeout=5, keys=ring) as client:
        assert any(r["id"] == run_id for r in client.runs())
        steps, values, _ = client.series(run_id, "loss")
        assert len(steps) > 0 and values[0] == 1.0
        answer = client.command(run_id, "pause", wait=10, who={"user": "mallory", "host": "x", "client": "cli",
                                                               "name": "forged", "key": "forged"})
        assert answer["state"] == "applied"
        assert client.command(run_id, "resume", wait=10)["state"] == "applied"
    local_answer = local.command(run_id, "pause", wait=10)
    assert local_answer["state"] == "applied" and local.command(run_id, "resume", wait=10)["state"] == "applied"
    events = run_events(local, run_id)
    who = [e["who"] for e in events if e.get("event") == "command"]
    assert who[0] == {"user": "mallory", "host": "x", "client": "cli", "via": "curve",
                      "key": ring.public("client"), "name": "alice@laptop"}  # claims kept, identity not forgeable
    assert who[2]["via"] == "loopback" and "key" not in who[2]


def test_trainer_messages_are_refused_from_the_network(guarded):
    ring, proc, remote, run_id, local = guarded
    ctx = zmq.Context.instance()
    sock = ctx.socket(zmq.DEALER)
    sock.linger = 0
    secure_client(sock, ring.keypair("client"), ring.public("agent"))
    sock.connect(remote)
    hello = {"t": "hello", "run": "fromafar01", "rank": 0, "token": TOKEN, "world": 1, "project": "p", "name": "n",
             "host": "h", "pid": 1, "config": {}}
    sock.send(pack(hello))
    sock.send(pack({"t": "cack", "run": run_id, "rank": 0, "cid": "x" * 20, "cmd": "pause", "state": "applied", "step": 1,
                    "detail": "", "applied": {}}))
    replies = []
    wait_until(lambda: sock.poll(100) and replies.append(unpack(sock.recv())["msg"]) or len(replies) >= 2,
               what="two refusals")
    assert all("loopback" in r for r in replies), replies
    assert all(r["id"] != "fromafar01" for r in local.runs())
    sock.close()


def test_a_revoked_client_is_refused_on_its_open_connection(guarded):
    ring, proc, remote, run_id, local = guarded
    with Client(remote, timeout=3, keys=ring) as client:
        assert client.ping()["journal"]
        ring.revoke("alice@laptop")
        with pytest.raises(AgentError, match="no longer allowed"):
            client.runs()
    assert commands_stored(proc) == 0


# --- ZAP is enforced --------------------------------------------------------------------------------

def _deliveries(server: zmq.Socket, ctx: zmq.Context, keys, server_key: str, port: int) -> int:
    client = ctx.socket(zmq.DEALER)
    client.linger = 0
    secure_client(client, keys, server_key)
    client.connect(f"tcp://127.0.0.1:{port}")
    client.send(b"telemetry?")
    got = 0
    if server.poll(1500):
        got = len(server.recv_multipart()) - 1  # consume it, so the next check starts empty
    client.close()
    return got


def test_without_a_live_zap_handler_even_an_allowed_client_is_refused(tmp_path):
    ring = ring_with_keys(tmp_path / "keys")
    ring.allow(ring.public("client"), "me")
    agent_keys, client_keys = ring.keypair("agent"), ring.keypair("client")
    ctx = zmq.Context()
    try:
        # the reason for ZAP_ENFORCE_DOMAIN: the same CURVE server without it admits anyone
        lax = ctx.socket(zmq.ROUTER)
        lax.linger = 0
        lax.curve_server, lax.curve_secretkey, lax.curve_publickey = True, agent_keys.secret, agent_keys.public
        lax.zap_domain = b"pilothouse"
        port = lax.bind_to_random_port("tcp://127.0.0.1")
        stranger = Keyring(tmp_path / "s")
        stranger.init()
        assert _deliveries(lax, ctx, stranger.keypair("client"), ring.public("agent"), port) == 1
        lax.close()

        strict = ctx.socket(zmq.ROUTER)  # no authenticator on this context
        strict.linger = 0
        secure_server(strict, agent_keys)
        port = strict.bind_to_random_port("tcp://127.0.0.1")
        assert _deliveries(strict, ctx, client_keys, ring.public("agent"), port) == 0
        strict.close()

        gate = Gate(ctx)
        listener = CurveListener(ctx, gate, "tcp://127.0.0.1:1", ring)  # authenticator running, then dead
        port = listener.sock.bind_to_random_port("tcp://127.0.0.1")
        assert _deliveries(listener.sock, ctx, client_keys, ring.public("agent"), port) == 1
        assert _deliveries(listener.sock, ctx, stranger.keypair("client"), ring.public("agent"), port) == 0
        gate.stop()
        assert _deliveries(listener.sock, ctx, client_keys, ring.public("agent"), port) == 0
        listener.sock.close()
    finally:
        ctx.term()


# --- the app over CURVE ------------------------------------------------------------------------------

def test_the_apps_link_follows_over_curve_and_reports_a_refused_key(tmp_path, guarded, monkeypatch):
    ring, proc, remote, run_id, local = guarded
    monkeypatch.setenv("PILOTHOUSE_KEYS", str(ring.dir))
    store_path = tmp_path / "app.sqlite"
    link = AgentLink(remote, store_path, dead_after=1.0)
    link.start()
    store = LocalStore(store_path)
    try:
        wait_until(lambda: len(store.series(remote, run_id, "loss")[0]) > 5, what="points over CURVE")
        assert link.health().state == "connected" and link.health().error == ""
    finally:
        link.stop()
    stranger = ring_with_keys(tmp_path / "stranger")
    stranger.trust(remote, ring.public("agent"))
    monkeypatch.setenv("PILOTHOUSE_KEYS", str(stranger.dir))
    outsider = AgentLink(remote, tmp_path / "outsider.sqlite", dead_after=1.0)
    outsider.start()
    try:
        wait_until(lambda: "refused this client's key" in outsider.health().error, timeout=15,
                   what="the refusal in the link's health")
        assert outsider.health().state != "connected"
    finally:
        outsider.stop()
    assert LocalStore(tmp_path / "outsider.sqlite").runs() == []


# --- the wire cannot reach code or files ---------------------------------------------------------------

UNSAFE_MODULES = {"pickle", "cPickle", "marshal", "shelve", "dill", "cloudpickle", "yaml", "jsonpickle"}
WIRE_MODULES = ["node/server.py", "node/command_desk.py", "node/query_desk.py", "node/trainer_desk.py",
                "node/feed.py", "node/journal.py",
                "security.py", *(f"wire/{p.name}" for p in sorted((ROOT / "agent" / "wire").glob("*.py")))]


def calls(path: Path) -> list[ast.Call]:
    return [n for n in ast.walk(ast.parse(path.read_text(), str(path))) if isinstance(n, ast.Call)]


def call_name(node: ast.Call) -> str:
    f = node.func
    return f.id if isinstance(f, ast.Name) else f.attr if isinstance(f, ast.Attribute) else ""


def test_no_unsafe_deserialisation_or_dynamic_dispatch():
    sources = sorted((ROOT / "agent").rglob("*.py")) + sorted((ROOT / "gui").rglob("*.py"))
    unsafe = {str(p.relative_to(ROOT)): sorted(imported_roots(p) & UNSAFE_MODULES) for p in sources}
    assert not {k: v for k, v in unsafe.items() if v}
    dynamic = [(str(p.relative_to(ROOT)), n.lineno) for p in sources for n in calls(p)
               if isinstance(n.func, ast.Name) and n.func.id in ("eval", "exec", "compile", "__import__")
               or call_name(n) == "getattr" and len(n.args) > 1 and not isinstance(n.args[1], ast.Constant)
               or call_name(n) == "import_module" and p.name != "__init__.py"]
    assert not dynamic, dynamic


def test_wire_handling_code_builds_no_file_paths():
    """The only file the agent's message path touches is the journal it was started with."""
    touching = {"open", "unlink", "remove", "rmtree", "mkdir", "rename", "replace", "write_text", "write_bytes"}
    found = [(name, n.lineno, call_name(n)) for name in WIRE_MODULES for n in calls(ROOT / "agent" / name)
             if call_name(n) in touching]
    # security.py writes the keyring's own files (CLI only); the journal creates its directory
    allowed = {("security.py", "mkdir"), ("security.py", "open"), ("security.py", "unlink"),
               ("security.py", "replace"), ("node/journal.py", "mkdir")}
    assert [f for f in found if (f[0], f[2]) not in allowed] == []


def test_garbage_on_the_curve_port_changes_nothing(tmp_path, guarded):
    """Raw bytes instead of a handshake, and garbage frames after a good one: the agent answers
    pings throughout, stores nothing new, and its memory stays put."""
    import random
    import socket as pysocket

    ring, proc, remote, run_id, local = guarded
    port = int(remote.rsplit(":", 1)[1])
    rng = random.Random(6)
    rss_before = psutil.Process(proc.proc.pid).memory_info().rss
    for i in range(300):
        with pysocket.create_connection(("127.0.0.1", port), timeout=2) as s:
            greeting = b"\xff" + bytes(8) + b"\x7f\x03\x00CURVE" + bytes(15) if i % 3 == 0 else b""
            try:
                s.sendall(greeting + rng.randbytes(rng.randrange(1, 4096)))
                s.recv(64)
            except OSError:
                pass  # the agent hung up on us: that is the point
    ctx = zmq.Context.instance()
    sock = ctx.socket(zmq.DEALER)
    sock.linger = 0
    secure_client(sock, ring.keypair("client"), ring.public("agent"))
    sock.connect(remote)
    errors = 0
    for _ in range(300):
        sock.send_multipart([rng.randbytes(rng.randrange(0, 300)) for _ in range(rng.choice((1, 1, 2)))])
    deadline = time.monotonic() + 10
    while errors < 300 and time.monotonic() < deadline:
        if sock.poll(200):
            errors += unpack(sock.recv())["t"] == "err"
    sock.close()
    assert errors == 300  # each garbage message refused, one error each
    with Client(remote, timeout=5, keys=ring) as client:
        assert client.ping()["bad_frames"] >= 300
    assert commands_stored(proc) == 0
    assert [r["id"] for r in local.runs() if r["kind"] == "train"] == [run_id]
    growth = psutil.Process(proc.proc.pid).memory_info().rss - rss_before
    print(f"agent RSS growth after 600 garbage connections/frames: {growth / 1e6:.1f} MB")
    assert growth < 30e6


# --- another user on the same node (a real second user: `nobody`, through setpriv) ---------------------


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
