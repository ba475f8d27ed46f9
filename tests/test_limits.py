"""The agent's bounds as a whole, against a real agent subprocess: what one owner process with many
connections can make it queue, what another user's connections can take (a real second user,
``nobody``), and that an owner's trainer past the connection cap loses nothing.
"""

from __future__ import annotations

import json
import resource
import threading
import time
from pathlib import Path
from urllib.parse import urlsplit

import msgpack
import zmq
from support.sockets import as_owner
from support.users import as_nobody
from support.waiting import wait_until

import pilothouse as ph
from pilothouse.node.limits import CONNECTION_BYTES, LOCAL_CONNECTIONS, STRANGER_CONNECTIONS, raise_fd_limit
from pilothouse.wire.messages import MAX_INBOUND_BYTES

MiB = 1 << 20
DECODING = 64 * MiB  # what the agent's loop holds while it decodes and refuses one of these frames


def status_mib(pid: int, field: str) -> float:
    """VmRSS / VmHWM of a process, in MiB."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1]) / 1024
    raise AssertionError(f"no {field} for {pid}")


def test_the_agent_raises_its_soft_descriptor_limit_to_the_hard_one():
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (min(512, hard), hard))
    try:
        assert raise_fd_limit() == hard
        assert resource.getrlimit(resource.RLIMIT_NOFILE) == (hard, hard)
    finally:
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))


def test_one_owner_process_with_many_connections_queues_a_bounded_amount(agent_proc):
    """16 connections of one process push 8 MiB frames that take the agent 75 ms each to refuse, as
    fast as they can: ZeroMQ used to queue 18 of them per connection (2.3 GB); now 4."""
    pid = agent_proc.proc.pid
    before = status_mib(pid, "VmRSS")
    frame = zmq.Frame(msgpack.packb({"t": "hb", "x": [{}] * (MAX_INBOUND_BYTES - 64)}))
    ctx, stop, full = zmq.Context(), threading.Event(), []

    def push() -> None:
        sock = as_owner(ctx.socket(zmq.DEALER))
        sock.setsockopt(zmq.SNDHWM, 2)
        sock.connect(agent_proc.url)
        waited = False
        while not stop.is_set():
            try:
                sock.send(frame, zmq.NOBLOCK, copy=False)
            except zmq.Again:
                waited = True  # the agent's queue for this connection is full: it stopped reading it
                time.sleep(0.002)
        full.append(waited)
        sock.close(linger=0)

    pushers = [threading.Thread(target=push) for _ in range(16)]
    for p in pushers:
        p.start()
    time.sleep(3)
    stop.set()
    for p in pushers:
        p.join()
    ctx.term()
    grew = status_mib(pid, "VmHWM") - before
    assert full == [True] * 16
    assert grew < (16 * CONNECTION_BYTES + DECODING) / MiB, f"the agent grew {grew:.0f} MiB"
    with agent_proc.client() as client:
        assert client.ping()["bad_frames"] > 16  # it read them: the bound held while it worked


def test_past_the_cap_an_owner_trainer_waits_and_loses_nothing(agent_proc):
    """All LOCAL_CONNECTIONS slots held by one process: a trainer's connection is shut at accept, it keeps
    its records, and once slots free up it gets in and every step is stored."""
    ctx = zmq.Context()
    held = []
    for i in range(LOCAL_CONNECTIONS):
        sock = as_owner(ctx.socket(zmq.DEALER))
        sock.setsockopt(zmq.LINGER, 0)
        sock.connect(agent_proc.url)
        sock.send(msgpack.packb({"t": "q", "id": i, "op": "ping", "args": {}}))
        held.append(sock)
    for sock in held:
        assert sock.poll(10_000), "an owner connection within the cap got no answer"
    run = ph.init(project="limits", name="capped", agent=agent_proc.url)
    for step in range(200):
        run.log({"loss": float(step)}, step=step)
    assert not run.flush(1.5)  # shut at accept, again and again: nothing acknowledged, nothing dropped
    assert run.stats["dropped_records"] == 0
    for sock in held[:4]:
        sock.close()
    assert run.flush(10)
    run.finish(timeout=10)
    for sock in held[4:]:
        sock.close()
    ctx.term()
    with agent_proc.client() as client:
        assert client.series(run.id, "loss")[0].tolist() == [float(s) for s in range(200)]


FLOOD = """
import json, socket, struct, sys, time
host, port, n, frame, hold = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]), float(sys.argv[5])
greeting = b"\\xff" + bytes(8) + b"\\x7f" + bytes([3, 0]) + b"CURVE".ljust(20, b"\\0") + bytes(32)
socks = []
for _ in range(n):
    s = socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET)
    s.setblocking(False)
    s.connect_ex((host, port))
    socks.append(s)
if frame:  # each announces an 8 MiB handshake frame and sends all of it but its last byte: ZeroMQ holds it
    time.sleep(0.5)
    body = greeting + b"\\x06" + struct.pack(">Q", frame) + bytes(frame - 1)
    for s in socks:
        s.settimeout(1)
        try:
            s.sendall(body)
        except OSError:
            pass
time.sleep(hold)
shut = 0
for s in socks:
    s.setblocking(False)
    try:
        while s.recv(65536):
            pass
        shut += 1  # the agent closed it
    except BlockingIOError:
        pass  # still open
    except OSError:
        shut += 1
print(json.dumps({"shut": shut}))
"""


def flood(url: str, n: int, frame: int = 0, hold: float = 3) -> threading.Thread:
    """nobody opens ``n`` connections to the agent's port (idle, or each sending an 8 MiB handshake frame)
    and holds them ``hold`` seconds."""
    parts = urlsplit(url)
    out: dict = {}

    def run() -> None:
        done = as_nobody(FLOOD, parts.hostname, str(parts.port), str(n), str(frame), str(hold))
        assert done.returncode == 0, done.stderr
        out.update(json.loads(done.stdout))

    thread = threading.Thread(target=run)
    thread.out = out  # type: ignore[attr-defined]
    thread.start()
    return thread


def test_another_users_idle_connections_cannot_lock_the_owner_out(agent_proc):
    """1,100 idle connections from nobody at a 1,024-descriptor limit (hard too, so raising it cannot
    help): they are shut at accept, the agent keeps its descriptors, and the owner's client is answered."""
    pid = agent_proc.proc.pid
    resource.prlimit(pid, resource.RLIMIT_NOFILE, (1024, 1024))
    attack = flood(agent_proc.url, 1100)
    time.sleep(1)  # all 1,100 opened; nobody holds them until it counts which the agent shut
    held = len(list(Path(f"/proc/{pid}/fd").iterdir()))
    t0 = time.monotonic()
    with agent_proc.client(timeout=5) as client:
        assert client.runs() is not None
    answered = time.monotonic() - t0
    attack.join()
    assert answered < 2, answered
    assert held < 128, f"the agent holds {held} descriptors"
    assert attack.out["shut"] > 100  # accepted and shut (the rest wait in the kernel's queue for their turn)


def test_another_users_handshake_frames_do_not_balloon_the_agent(agent_proc):
    """64 connections of nobody each send an 8 MiB frame before any handshake: ZeroMQ would buffer
    them all (512 MiB); only the few strangers kept for a clear refusal are read."""
    pid = agent_proc.proc.pid
    before = status_mib(pid, "VmRSS")
    flood(agent_proc.url, 64, MAX_INBOUND_BYTES - 64, hold=1).join()
    grew = status_mib(pid, "VmHWM") - before
    assert grew < (2 * STRANGER_CONNECTIONS * MAX_INBOUND_BYTES) / MiB, f"the agent grew {grew:.0f} MiB"
    wait_until(lambda: agent_proc.ready(), what="the agent")
