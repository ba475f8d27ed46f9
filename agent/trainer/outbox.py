"""The trainer's background I/O thread: batches records, ships them, resends until acknowledged.

The training thread only appends to a deque (thread-safe, no lock, no syscall).  This
thread owns the ZeroMQ socket, numbers records with consecutive seqs, keeps every
unacknowledged batch in a buffer bounded by bytes, and resends from the first unacked
seq whenever the agent stays silent or asks for it (go-back-N).  When the bound is hit
the oldest batches are dropped and counted; the agent learns of the gap from ``floor``.
"""

from __future__ import annotations

import collections
import logging
import os
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

import msgpack
import zmq
import zmq.utils.monitor

from pilothouse.security import HANDSHAKE_FAILED, Keyring, client_keys
from pilothouse.trainer.inbox import Inbox
from pilothouse.wire.messages import (
    MAX_INBOUND_BYTES,
    MAX_INBOUND_CONTAINERS,
    ProtocolError,
    message,
    pack,
    unpack,
)
from pilothouse.wire.records import REC_METRICS, REC_ROLLOUTS, encode_batch, join_batches, metric_points

log = logging.getLogger("pilothouse.outbox")

MAX_RECORDS_PER_BATCH = 4096
MAX_BATCH_BYTES = MAX_INBOUND_BYTES // 2  # the agent drops a bigger frame; a record never reaches it alone
MAX_BATCH_CONTAINERS = MAX_INBOUND_CONTAINERS // 2  # the agent refuses more maps and lists in one message
MAX_INFLIGHT_BYTES = 32 << 20  # sent but not yet acknowledged; the rest waits in the buffer
# The GIL is the training thread's too: after holding it this long, this thread pauses so the
# training thread runs on (else that thread waits a GIL switch interval, 5 ms, per resumed slice).
SLICE_S = 0.0003
PAUSE_S = 0.0001
SLICE_RECORDS = 1024  # a batch is encoded in slices of this many records, with a pause between when due
BACKLOG = 4 * MAX_RECORDS_PER_BATCH  # records queued: past it the pauses stop (keeping up bounds memory)


@dataclass
class Batch:
    seq: int  # first seq
    count: int
    points: int
    body: bytes  # the packed batch entries of the message map (see pilothouse.wire.records)
    sent_at: float | None = None

    @property
    def last(self) -> int:
        return self.seq + self.count - 1


@dataclass
class OutboxStats:
    records: int = 0
    points: int = 0
    acked_seq: int = 0
    dropped_records: int = 0
    dropped_points: int = 0
    buffered_records: int = 0
    buffered_bytes: int = 0
    errors: int = 0
    last_error: str = ""


class Outbox:
    def __init__(self, url: str, hello: dict, *, max_buffer_bytes: int = 256 << 20,
                 flush_interval: float = 0.02, heartbeat_interval: float = 1.0,
                 resend_after: float = 1.0, context: zmq.Context | None = None, keys: Keyring | None = None,
                 inbox: Inbox | None = None):
        """``inbox``: where commands from the agent go (a trainer's; a watcher takes none, they are ignored)."""
        self.url = url
        self._curve = client_keys(url, keys)  # the owner's local keys, or a key pinned for the URL
        self.hello = hello
        self.run, self.rank, self.session = hello["run"], hello["rank"], hello["session"]
        self.queue: collections.deque = collections.deque()
        self.stats = OutboxStats()
        self.max_buffer_bytes = max_buffer_bytes
        self.flush_interval = flush_interval
        self.heartbeat_interval = heartbeat_interval
        self.resend_after = resend_after
        self.last_step = -1
        self.error: str | None = None  # why the run ended, if the training code raised: it ends "crashed"
        self._ctx = context or zmq.Context.instance()
        self._batches: collections.deque[Batch] = collections.deque()
        self._next_seq = 1
        self._inflight_bytes = 0
        self._slice_start = 0.0  # when this thread last took the GIL back (see _pace)
        self._packer = msgpack.Packer(use_bin_type=True, autoreset=False)  # the I/O thread's, for batches
        self._last_reply = 0.0
        self._finish_seq: int | None = None
        self._finish_sent_at = 0.0
        self._gave_up = False  # close() timed out: the last heartbeat says nothing is held any more
        self._resend_timeout = resend_after
        self._need_hello = True  # before the first batch, and whenever the agent may have forgotten us
        self.inbox = inbox
        self._acks: collections.deque[dict] = collections.deque()  # from the training thread
        self._wake_r, self._wake_w = os.pipe()  # lets ack() interrupt the I/O thread's poll
        os.set_blocking(self._wake_w, False)
        self._finished = threading.Event()
        self.welcomed = threading.Event()  # the agent answered a hello: ``stats.acked_seq`` is what it holds
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="pilothouse-outbox", daemon=True)
        self._thread.start()

    # --- called from the training thread ---------------------------------------------------

    def close(self, timeout: float) -> bool:
        """Ship everything, tell the agent the run ended, wait up to ``timeout`` for its ack."""
        self._finish_seq = -1  # the I/O thread fixes the real last seq once the queue is drained
        delivered = self._finished.wait(timeout)
        self._gave_up = not delivered
        self.stop()
        return delivered

    def stop(self) -> None:
        """End the I/O thread without telling the agent the run ended (a watcher leaving a run it follows)."""
        self._stop.set()
        self._thread.join(timeout=5)
        if not self._thread.is_alive():
            os.close(self._wake_r)
            os.close(self._wake_w)
            self._wake_w = -1

    def continue_after(self, seq: int) -> None:
        """Number the next record ``seq + 1``: a process continuing a stream the agent holds up to ``seq``
        (a restarted watcher; a trainer's stream starts at 1).  Before anything is queued."""
        self._next_seq = seq + 1

    def rehello(self, hello: dict) -> None:
        """The run's config or schema changed: the agent gets a new hello before the next batch."""
        self.hello = hello
        self._need_hello = True
        self._wake()

    def ack(self, answer: dict) -> None:
        """Training thread: a command's outcome, sent by the I/O thread at once (it is woken)."""
        self._acks.append(answer)
        self._wake()

    def _wake(self) -> None:
        """Interrupt the I/O thread's poll: something must go out now."""
        if self._wake_w >= 0:
            try:
                os.write(self._wake_w, b"!")
            except BlockingIOError:  # the pipe is full of wake-ups already
                pass

    def flush(self, timeout: float, target: int) -> bool:
        """Wait until records 1..``target`` are acknowledged (tests, checkpoints).

        The caller counts what it appended: ``stats.records + len(queue)`` misses the
        records this thread has popped but not yet counted.
        """
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.stats.acked_seq >= target:
                return True
            time.sleep(0.005)
        return False

    # --- the I/O thread -------------------------------------------------------------------

    def _loop(self) -> None:
        sock = self._ctx.socket(zmq.DEALER)
        sock.setsockopt(zmq.LINGER, 0)
        sock.setsockopt(zmq.IPV6, 1)
        sock.setsockopt(zmq.IMMEDIATE, 1)  # no silent queueing towards an absent agent
        sock.setsockopt(zmq.SNDHWM, 64)
        self._curve.secure(sock)
        monitor = sock.get_monitor_socket(HANDSHAKE_FAILED)
        sock.connect(self.url)
        self._sock = sock
        poller = zmq.Poller()
        poller.register(sock, zmq.POLLIN)
        poller.register(self._wake_r, zmq.POLLIN)
        poller.register(monitor, zmq.POLLIN)
        next_hb = 0.0
        try:
            while not self._stop.is_set():
                ready = dict(poller.poll(int(self.flush_interval * 1000)))
                self._slice_start = time.monotonic()  # the GIL is ours again from here
                if self._wake_r in ready:
                    os.read(self._wake_r, 4096)
                if sock in ready:
                    self._read_replies()
                if monitor in ready:
                    self._handshake_failed(monitor)
                self._drain_queue()
                now = time.monotonic()
                self._send_due(now)
                if now >= next_hb:
                    self._heartbeat()
                    next_hb = now + self.heartbeat_interval
        except Exception:  # never take the training process down with us
            log.exception("pilothouse I/O thread stopped")
        finally:
            if self._gave_up:
                self._last_word(sock)
            sock.disable_monitor()
            monitor.close(linger=0)
            sock.close(linger=0)

    def _handshake_failed(self, monitor: zmq.Socket) -> None:
        """The agent refused us, or what listens there is not our agent: said in the stats, records kept."""
        while monitor.poll(0):
            event = zmq.utils.monitor.parse_monitor_message(monitor.recv_multipart())["event"]
            self._error(self._curve.refused(self.url) if event == zmq.EVENT_HANDSHAKE_FAILED_AUTH
                        else self._curve.failed(self.url))

    def _drain_queue(self) -> None:
        queue = self.queue
        pop = queue.popleft
        while queue:
            n = min(len(queue), MAX_RECORDS_PER_BATCH)
            recs = [pop() for _ in range(n)]
            try:
                body, points, containers = _pack_body(recs, self._packer, self._pace)
                while n > 1 and (len(body) > MAX_BATCH_BYTES or containers > MAX_BATCH_CONTAINERS):
                    # rare: wide records or many rollout rows; put the tail back
                    n //= 2
                    queue.extendleft(reversed(recs[n:]))
                    recs = recs[:n]
                    body, points, containers = _pack_body(recs, self._packer, self._pace)
            except (TypeError, ValueError, OverflowError) as exc:  # log() checks types; this is a last resort
                self._error(f"{n} records could not be packed and were dropped: {exc}")
                self.stats.dropped_records += n
                self.stats.dropped_points += sum(len(r[2]) // 8 - 2 for r in recs if r[0] == REC_METRICS)
                continue
            batch = Batch(self._next_seq, n, points, body)
            self._next_seq += n
            self._batches.append(batch)
            st = self.stats
            st.records += n
            st.points += points
            st.buffered_records += n
            st.buffered_bytes += len(batch.body)
            self._pace()
        while self.stats.buffered_bytes > self.max_buffer_bytes and self._batches:
            self._drop(self._batches.popleft())
        if self._finish_seq == -1 and not self.queue:
            self._finish_seq = self._next_seq - 1

    def _pace(self) -> None:
        """Between slices of work: pause (the GIL goes to the training thread) once a slice ran long,
        unless the training thread logs faster than this thread keeps up with when pausing."""
        if time.monotonic() - self._slice_start > SLICE_S and len(self.queue) < BACKLOG:
            time.sleep(PAUSE_S)
            self._slice_start = time.monotonic()

    def _drop(self, batch: Batch) -> None:
        st = self.stats
        st.dropped_records += batch.count
        st.dropped_points += batch.points
        st.buffered_records -= batch.count
        st.buffered_bytes -= len(batch.body)
        if batch.sent_at is not None:
            self._inflight_bytes -= len(batch.body)

    def _send_due(self, now: float) -> None:
        batches = self._batches
        if (batches and batches[0].sent_at is not None
                and now - max(batches[0].sent_at, self._last_reply) > self._resend_timeout):
            for b in batches:  # the agent went quiet: go back to the first unacked batch
                b.sent_at = None
            self._inflight_bytes = 0
            self._resend_timeout = min(self._resend_timeout * 2, 8.0)  # a busy agent is not a dead one
            self._need_hello = True
        if self._need_hello:
            hello = self.hello
            if not self._send_msg(message("hello", **hello)):
                return
            self._need_hello = self.hello is not hello  # changed meanwhile by rehello: send the new one too
        self._send_acks()  # after the hello: the agent must know the run
        for b in batches:
            if b.sent_at is None:
                if self._inflight_bytes and self._inflight_bytes + len(b.body) > MAX_INFLIGHT_BYTES:
                    break  # a window, so a busy agent's queue stays short and acks stay prompt
                if not self._send_batch(b):
                    break
                b.sent_at = now
                self._inflight_bytes += len(b.body)
                self._pace()
        if (self._finish_seq is not None and self._finish_seq >= 0 and not batches
                and now - self._finish_sent_at > self.resend_after / 4):
            self._finish_sent_at = now
            ending = {"status": "crashed", "error": self.error} if self.error else {"status": "finished"}
            self._send_msg({**self._state("finish"), "seq": self._finish_seq, **ending})

    def _send_acks(self) -> None:
        while self._acks:
            answer = self._acks.popleft()
            if self.inbox is not None:
                self.inbox.answered(answer)
            self._send_ack(answer)

    def _send_ack(self, answer: dict) -> None:
        self._send_msg(message("cack", run=self.run, rank=self.rank, session=self.session, **answer))

    def _on_command(self, msg: dict) -> None:
        """Exactly once (see ``Inbox``): a command already answered is answered again."""
        again = self.inbox.receive(msg) if self.inbox is not None else None
        if again is not None:
            self._send_ack(again)

    def _floor(self) -> int:
        """The lowest seq still held: everything below was acknowledged or dropped."""
        return self._batches[0].seq if self._batches else self._next_seq

    def _send_batch(self, b: Batch) -> bool:
        floor = self._floor()
        head = msgpack.Packer(use_bin_type=True)
        frame = b"".join((head.pack_map_header(10), head.pack("t"), head.pack("rec"), head.pack("run"),
                          head.pack(self.run), head.pack("rank"), head.pack(self.rank), head.pack("session"),
                          head.pack(self.session), head.pack("seq"), head.pack(b.seq), head.pack("floor"),
                          head.pack(floor), b.body))
        return self._send_frame(frame)

    def _send_msg(self, msg: dict) -> bool:
        return self._send_frame(pack(msg))

    def _send_frame(self, frame: bytes) -> bool:
        try:
            self._sock.send(frame, zmq.NOBLOCK)
            return True
        except zmq.Again:
            return False

    def _heartbeat(self) -> None:
        self._send_msg(self._state("hb"))

    def _last_word(self, sock: zmq.Socket) -> None:
        """The run ends with records the agent never acknowledged (a full disk, a dead agent): they go
        with this process.  A last heartbeat's floor says nothing below the next seq is held, so the
        agent counts exactly what it lacks in the run's LOST (what it stored but could not ack is not
        counted); LINGER lets it leave after the socket closes."""
        try:
            sock.setsockopt(zmq.LINGER, 1000)
            self._send_msg({**self._state("hb"), "floor": self._next_seq})
        except zmq.ZMQError:
            pass

    def _state(self, kind: str) -> dict:
        """Heartbeat and finish both carry the loss counters and the floor."""
        st = self.stats
        return message(kind, run=self.run, rank=self.rank, session=self.session, step=self.last_step,
                       floor=self._floor(),
                       paused=self.inbox is not None and self.inbox.paused,
                       dropped_records=st.dropped_records, dropped_points=st.dropped_points)

    def _read_replies(self) -> None:
        while True:
            try:
                frame = self._sock.recv(zmq.NOBLOCK)
            except zmq.Again:
                return
            self._last_reply = time.monotonic()
            try:
                msg = unpack(frame)
                self._on_reply(msg if isinstance(msg, dict) else {})
            except ProtocolError as exc:
                self._error(str(exc))

    def _on_reply(self, msg: dict) -> None:
        kind = msg.get("t")
        if kind == "ack":
            self._acked(int(msg["seq"]))
        elif kind == "nack":
            self._acked(int(msg["expect"]) - 1)
            if msg.get("reason") == "hello":
                self._need_hello = True
            for b in self._batches:
                b.sent_at = None
            self._inflight_bytes = 0
        elif kind == "welcome":
            self._acked(int(msg.get("seq", 0)))
            self.welcomed.set()
        elif kind == "finished":
            self._finished.set()
        elif kind == "cmd":
            self._on_command(msg)
        elif kind == "err":
            self._error(str(msg.get("msg")))

    def _acked(self, seq: int) -> None:
        st = self.stats
        if seq > st.acked_seq:
            st.acked_seq = seq
            self._resend_timeout = self.resend_after
        while self._batches and self._batches[0].last <= seq:
            b = self._batches.popleft()
            st.buffered_records -= b.count
            st.buffered_bytes -= len(b.body)
            if b.sent_at is not None:
                self._inflight_bytes -= len(b.body)

    def _error(self, text: str) -> None:
        if self.stats.last_error != text:
            log.warning("pilothouse agent: %s", text)
        self.stats.last_error = text
        self.stats.errors += 1  # last: a reader that sees the count also sees the text


def _pack_body(recs: list[tuple], packer: msgpack.Packer, pace: Callable[[], None]) -> tuple[bytes, int, int]:
    """The batch's entries of the message map, its metric points, and the maps and lists the agent
    will decode (a group and its key set, a record of others, a rollout's rows).

    Encoded in slices with ``pace()`` between them, so the GIL is never held long.  ``packer``
    (``autoreset=False``) is reused: a fresh one per batch costs a new buffer's page faults."""
    parts = []
    for start in range(0, len(recs), SLICE_RECORDS):
        if start:
            pace()
        parts.append(encode_batch(recs[start:start + SLICE_RECORDS]))
    fields = join_batches(parts)
    packer.reset()
    for key, value in fields.items():
        packer.pack(key)
        packer.pack(value)
    body = packer.bytes()
    others = fields["others"]
    points = metric_points(fields["metrics"])
    containers = 3 + len(fields["keys"]) + len(fields["metrics"]) + sum(
        2 + len(o[4]) if o[1] == REC_ROLLOUTS else 1 for o in others)
    return body, points, containers
