"""Who gets in over the network, with real keys, a real agent subprocess and real CURVE sockets.

The agent listens on loopback (CURVE with the owner's local keys: trainers, CLI and app of the
owner) and, with --listen, on a CURVE listener bound to every interface (0.0.0.0), which clients
reach through 127.0.0.1.  Outsiders (an unlisted keypair, a client without keys, a client expecting
another agent key) must get no byte back and change nothing; an allowed client steers the run and
the audit log names its key.  Another local user: test_security_other_user.py; what the code
itself cannot do: test_security_code.py.
"""

from __future__ import annotations

import ipaddress
import os
import sqlite3
import stat
import subprocess
import sys
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
from support.waiting import wait_until

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


# --- garbage on the CURVE port -----------------------------------------------------------------------

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
