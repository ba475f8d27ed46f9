"""Peers the agent or the CLI must not trust (issue 30, item 7): a reader whose key was revoked
while its connection stays open, and a program that is not ZeroMQ squatting the agent's port."""

from __future__ import annotations

import socket
import time

import pytest
import zmq
from support.processes import AgentProcess, run_cli
from support.sockets import free_port

from pilothouse.client import AgentUnavailable, Client
from pilothouse.security import Keyring, secure_client
from pilothouse.wire.messages import message, pack, unpack


def pages(sock: zmq.Socket, seconds: float) -> int:
    """Pages holding entries that reach a reader within ``seconds``, each paid for with a credit."""
    got, deadline = 0, time.monotonic() + seconds
    while (left := deadline - time.monotonic()) > 0:
        if sock.poll(int(left * 1000) + 1):
            msg = unpack(sock.recv())
            if msg.get("t") == "data" and msg["entries"]:
                got += 1
                sock.send(pack(message("credit", n=1)))
    return got


def test_a_revoked_reader_gets_no_page_on_its_open_connection(tmp_path):
    ring = Keyring(tmp_path / "keys")
    ring.init()
    ring.allow(ring.public("client"), "alice@laptop")
    port = free_port()
    proc = AgentProcess(tmp_path / "agent", free_port(), ["--listen", f"tcp://127.0.0.1:{port}", "--keys",
                                                          str(ring.dir), "--sample-interval", "0.05"]).start()
    sock = zmq.Context.instance().socket(zmq.DEALER)
    sock.linger = 0
    secure_client(sock, ring.keypair("client"), ring.public("agent"))
    sock.connect(f"tcp://127.0.0.1:{port}")
    try:
        sock.send(pack(message("sub", after=0, credit=8, run=None, kinds=[], sub=1)))
        assert pages(sock, 1.0) > 0  # the agent's host samples, 20 a second
        ring.revoke("alice@laptop")
        pages(sock, 0.3)  # those already on their way
        assert pages(sock, 1.5) == 0
    finally:
        sock.close()
        proc.stop()


def test_a_program_squatting_the_port_is_named_not_taken_for_a_missing_agent():
    with socket.socket() as squatter:  # takes connections, never speaks ZeroMQ
        squatter.bind(("127.0.0.1", 0))
        squatter.listen()
        url = f"tcp://127.0.0.1:{squatter.getsockname()[1]}"
        out = run_cli("runs", "--agent", url, "--timeout", "1")
    assert out.returncode == 1
    assert f"something else, not a pilothouse agent, listens at {url}" in out.stderr, out.stderr
    assert "--bind tcp://127.0.0.1:PORT" in out.stderr and "start one" not in out.stderr
    with pytest.raises(AgentUnavailable, match="start one with `pilothouse agent`"):  # the port free: no agent
        Client(url, timeout=0.3).runs()
