"""What peers can make the agent hold, bounded as a whole: memory for inbound frames, and descriptors.

ZeroMQ bounds inbound memory per connection, never per socket: each connection queues up to
``RCVHWM`` messages, its engine holds one more when the queue is full, and its decoder fills the
next (ZeroMQ allocates a frame whole as soon as its header announces the size, and fills it as the
bytes arrive, before any handshake ends).  With frames of up to ``MAX_INBOUND_BYTES`` the only true
bound is therefore *connections x frames per connection x frame size*, so the agent keeps both
factors small: a short ``RCVHWM``, and a cap on connections that a :class:`Doorman` enforces by
shutting, at accept, each connection past its socket's share.  A drained queue would not do: ZeroMQ
fills its per-connection queues again as fast as the agent empties them, and whatever the agent drops
costs a trainer a resend instead.  A shut connection loses nothing: ZeroMQ on the other side connects
again every 100 ms, and a trainer keeps its records until acknowledged and sends them again then.

Descriptors: every connection is one, accepted before anyone knows whose it is, so another user's
idle connections could take the agent's whole table (1,100 of them locked the owner out at a 1,024
limit, each held for ZeroMQ's 30 s handshake timeout).  The agent raises its soft limit to the hard
one, gives a handshake :data:`HANDSHAKE_MS` to finish, and on its loopback socket asks the kernel
(sock_diag) which user opened each connection: another user's can never get in (only the owner's
local keys do), so past a few kept for their own clear refusal they are shut at once; the owner's
connections, and the agent's own files, keep the descriptors.
"""

from __future__ import annotations

import ipaddress
import logging
import os
import resource
import socket
import struct
import time
from urllib.parse import urlsplit

import zmq
import zmq.utils.monitor

from pilothouse.wire.messages import MAX_INBOUND_BYTES

log = logging.getLogger("pilothouse.agent")

# messages ZeroMQ queues per connection; 2 is the least that works: at 1 a CURVE ROUTER never
# delivers a message at all (measured, libzmq 4.3.5), and at 16 one connection queued 136 MiB
RCVHWM = 2
FRAMES_PER_CONNECTION = RCVHWM + 2  # the queue, the frame its engine holds when it is full, the one decoding
LOCAL_CONNECTIONS = 48  # the owner's trainers (one per rank), apps, CLIs, watchers on the loopback socket
REMOTE_CONNECTIONS = 16  # apps and CLIs through --listen, handshaking or in
STRANGER_CONNECTIONS = 8  # other users' on loopback, kept just long enough to fail their handshake with a reason
HANDSHAKE_MS = 5000  # a CURVE handshake is 2 round trips; an idle connection is closed after this
CONNECTION_BYTES = FRAMES_PER_CONNECTION * MAX_INBOUND_BYTES
# the most ZeroMQ can hold of inbound frames, whatever peers send: a stranger never gets past its handshake
INBOUND_BOUND = (LOCAL_CONNECTIONS + REMOTE_CONNECTIONS) * CONNECTION_BYTES + STRANGER_CONNECTIONS * MAX_INBOUND_BYTES
SAY_EVERY_S = 60.0  # shed connections are logged at most this often
TRUSTED_UIDS = frozenset({os.getuid(), 0})  # root can read the owner's keys and signal the agent anyway

_NETLINK_SOCK_DIAG, _SOCK_DIAG_BY_FAMILY, _NLMSG_ERROR, _NLM_F_REQUEST = 4, 20, 2, 1
_NLMSG = struct.Struct("=IHHII")  # nlmsghdr: length, type, flags, seq, pid
_REQUEST = struct.Struct("=BBBBI")  # inet_diag_req_v2: family, protocol, ext, pad, states; then its sockid:
_PORTS = struct.Struct(">HH")  # source and destination port, in network order,
_ADDRESSES = struct.Struct("=16s16sIII")  # source and destination address, interface, cookie
_UID = struct.Struct("=I")
_UID_AT = _NLMSG.size + 4 + 48 + 12  # inet_diag_msg: 4 bytes, the sockid, expires, rqueue, wqueue, then uid


def raise_fd_limit() -> int:
    """The soft descriptor limit raised to the hard one (a default 1,024 soft limit is the usual
    ceiling an idle-connection flood hits); returns the limit now in effect."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft != hard:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
        except (ValueError, OSError) as exc:  # a hard limit of "unlimited" the kernel caps lower
            log.warning("descriptor limit stays %d (raising it to %d failed: %s)", soft, hard, exc)
            return soft
        log.info("descriptor limit raised from %d to %d", soft, hard)
        soft = hard
    needed = LOCAL_CONNECTIONS + REMOTE_CONNECTIONS + STRANGER_CONNECTIONS + 64
    if soft < needed:
        log.warning("descriptor limit %d is below the %d the agent's connections and files may need", soft, needed)
    return soft


def tune(sock: zmq.Socket) -> None:
    """Per-connection bounds of an agent socket; set before bind, since a listener copies them then."""
    sock.setsockopt(zmq.RCVHWM, RCVHWM)
    sock.setsockopt(zmq.HANDSHAKE_IVL, HANDSHAKE_MS)


class Doorman:
    """Counts one ROUTER socket's connections from its monitor and shuts, right after accept, any past
    its share: ``cap`` connections, and on loopback (``strangers``) at most ``STRANGER_CONNECTIONS``
    from other users.  Runs on the agent's loop (:meth:`admit` when :attr:`monitor` is readable).

    A connection is shut through a duplicate of ZeroMQ's descriptor (``shutdown``, which ZeroMQ then
    sees as the peer leaving): the number may already name a newer connection, so the judgement is
    always of the socket the duplicate holds, never of a remembered one."""

    def __init__(self, sock: zmq.Socket, cap: int, *, strangers: bool, what: str):
        self.cap, self.what = cap, what
        self.sock = sock
        self.monitor = sock.get_monitor_socket(zmq.EVENT_ACCEPTED | zmq.EVENT_DISCONNECTED)
        self.open: dict[int, bool] = {}  # descriptor -> whether another user's
        self.shed = {"stranger": 0, "cap": 0}
        self._said = (0.0, 0)
        self._local: tuple[ipaddress.IPv4Address | ipaddress.IPv6Address | None, int] = (None, 0)
        self._diag: socket.socket | None = None
        if strangers and hasattr(socket, "AF_NETLINK"):
            try:
                self._diag = socket.socket(socket.AF_NETLINK, socket.SOCK_DGRAM, _NETLINK_SOCK_DIAG)
                self._diag.settimeout(1.0)  # the kernel answers at once; the loop never waits long on it
            except OSError as exc:
                log.warning("cannot tell other users' connections apart (%s): they count towards the cap", exc)

    def bound(self) -> None:
        """The socket is bound: its address tells its connections from the agent's other descriptors."""
        url = urlsplit(self.sock.getsockopt_string(zmq.LAST_ENDPOINT))
        address = _address(url.hostname or "")
        self._local = (None if address.is_unspecified else address, url.port or 0)  # None: any (0.0.0.0)

    def admit(self) -> None:
        """Everything the monitor has said, in order."""
        while True:
            try:
                event = zmq.utils.monitor.parse_monitor_message(self.monitor.recv_multipart(zmq.NOBLOCK))
            except zmq.Again:
                break
            fd = int(event["value"])
            if event["event"] == zmq.EVENT_DISCONNECTED:
                self.open.pop(fd, None)
            elif event["event"] == zmq.EVENT_ACCEPTED:
                self._accepted(fd)
        self._say()

    def _accepted(self, fd: int) -> None:
        try:
            dup = os.dup(fd)
        except OSError:
            return  # closed already: nothing to count
        try:
            conn = socket.socket(fileno=dup)
        except OSError:
            os.close(dup)
            return  # the number went to a file of the agent's
        with conn:
            try:
                local, peer = conn.getsockname()[:2], conn.getpeername()[:2]
            except OSError:
                return  # not a connected socket (any more)
            address, port = self._local
            if local[1] != port or address not in (None, _address(local[0])):
                return  # a connection of the agent's other socket that took this number
            uid = self._uid(peer, local) if self._diag else None
            stranger = uid is not None and uid not in TRUSTED_UIDS  # unknown: counted as the owner's
            if stranger and sum(self.open.values()) >= STRANGER_CONNECTIONS:
                self.shed["stranger"] += 1
            elif not stranger and len(self.open) - sum(self.open.values()) >= self.cap:
                self.shed["cap"] += 1
            else:
                self.open[fd] = stranger
                return
            conn.shutdown(socket.SHUT_RDWR)

    def _uid(self, peer: tuple[str, int], local: tuple[str, int]) -> int | None:
        """Who opened the other end of a loopback connection: the kernel's record of the peer's socket."""
        assert self._diag is not None
        src, dst = _address(peer[0]), _address(local[0])
        family = socket.AF_INET if src.version == 4 else socket.AF_INET6
        body = (_REQUEST.pack(family, socket.IPPROTO_TCP, 0, 0, 0xFFFFFFFF) + _PORTS.pack(peer[1], local[1])
                + _ADDRESSES.pack(src.packed, dst.packed, 0, 0xFFFFFFFF, 0xFFFFFFFF))  # no cookie: by addresses
        try:
            self._diag.send(_NLMSG.pack(_NLMSG.size + len(body), _SOCK_DIAG_BY_FAMILY, _NLM_F_REQUEST, 0, 0) + body)
            reply = self._diag.recv(4096)
        except OSError as exc:
            log.warning("cannot tell other users' connections apart any more (%s): they count towards the cap", exc)
            self._diag.close()
            self._diag = None
            return None
        if len(reply) < _UID_AT + 4 or _NLMSG.unpack_from(reply)[1] == _NLMSG_ERROR:
            return None  # the peer is gone already
        return _UID.unpack_from(reply, _UID_AT)[0]

    def _say(self) -> None:
        """Shed connections, logged once a minute with their count: a flood is seen, never a log per connection."""
        total = sum(self.shed.values())
        when, said = self._said
        if total > said and time.monotonic() - when > SAY_EVERY_S:
            log.warning("%s: shut %d more connection(s) at accept; so far %d of other users (past the %d kept at "
                        "once) and %d past the cap of %d", self.what, total - said, self.shed["stranger"],
                        STRANGER_CONNECTIONS, self.shed["cap"], self.cap)
            self._said = (time.monotonic(), total)

    def close(self) -> None:
        self.sock.disable_monitor()
        self.monitor.close(linger=0)
        if self._diag is not None:
            self._diag.close()


def _address(text: str) -> ipaddress.IPv4Address | ipaddress.IPv6Address:
    """An address as the kernel matches it: a dual-stack socket's ::ffff:a.b.c.d is a.b.c.d."""
    address = ipaddress.ip_address(text)
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        return address.ipv4_mapped
    return address
