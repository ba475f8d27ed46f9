"""Raw sockets on loopback: a free port to bind, and the owner's local CURVE keys put on a raw ZeroMQ
socket, as a client of the agent (``as_owner``) or as the agent the owner's clients expect
(``owner_agent_socket``), for tests that speak the wire by hand."""

from __future__ import annotations

import socket

import zmq

from pilothouse.security import local_keyring, secure_client


def as_owner(sock: zmq.Socket) -> zmq.Socket:
    """A raw socket that speaks for the agents' owner: the owner's local CURVE keys, as every
    trainer, CLI and app of this user has them."""
    ring = local_keyring()
    secure_client(sock, ring.keypair("client"), ring.public("agent"))
    return sock


def owner_agent_socket(sock: zmq.Socket) -> zmq.Socket:
    """A raw server socket that the owner's clients take for their agent (it holds the local agent key)."""
    keys = local_keyring().keypair("agent")
    sock.curve_server = True
    sock.curve_secretkey, sock.curve_publickey = keys.secret, keys.public
    return sock


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]
