"""The node agent: a loopback ROUTER socket (and, with keys, a CurveZMQ one), one SQLite journal, one loop.

Each turn drains what arrived (bounded), validates and stores it in one transaction,
commits, and only then acknowledges trainers and feeds readers: an ack always means
"on disk".  Readers get entries only against credit, so a slow reader costs the agent
a cursor, not memory.  Timers run the host/GPU sampler and the liveness check.
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import socket
import sqlite3
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import zmq

from pilothouse.node.alert_desk import AlertDesk
from pilothouse.node.command_desk import CommandDesk
from pilothouse.node.compactor import Compactor
from pilothouse.node.data_lock import DataLock
from pilothouse.node.disk_space import REMIND_EVERY, DiskSpace, is_disk_full
from pilothouse.node.feed import ReaderFeed
from pilothouse.node.import_desk import ImportDesk
from pilothouse.node.journal import Store
from pilothouse.node.limits import LOCAL_CONNECTIONS, REMOTE_CONNECTIONS, Doorman, raise_fd_limit, tune
from pilothouse.node.liveness import Liveness, Sessions
from pilothouse.node.query_desk import QueryDesk
from pilothouse.node.recover import corrupt_message, is_corrupt
from pilothouse.node.retention import Retention
from pilothouse.node.rules_file import load_rules
from pilothouse.node.run_owners import RunOwners
from pilothouse.node.sampler import SystemSampler
from pilothouse.node.trainer_desk import TrainerDesk
from pilothouse.security import CurveListener, Gate, Keyring, key_hex, local_keyring, private_dir
from pilothouse.version import __version__
from pilothouse.wire.checks import SYSTEM_RUN_PREFIX
from pilothouse.wire.messages import (
    MAX_INBOUND_BYTES,
    ProtocolError,
    decode,
    message,
    pack,
)
from pilothouse.wire.queries import check_query
from pilothouse.wire.records import REC_METRICS, encode_batch, metrics_packer
from pilothouse.wire.urls import check_url, is_loopback

log = logging.getLogger("pilothouse.agent")

TURN_MESSAGES = 2000  # bound one turn so acks and readers are never starved
TURN_SECONDS = 0.05
TURN_BYTES = MAX_INBOUND_BYTES  # what one turn decodes and holds at once: a fast trainer's backlog waits in ZeroMQ
INDEX_TEXT_BYTES = 128 * 1024  # rollout text indexed per slice between turns: about 6 ms (docs/promises.md)
LOCAL, REMOTE = b"L", b"R"  # peer tags: which socket a routing id belongs to
FEED_TYPES = frozenset({"sub", "credit", "unsub"})  # a reader following the journal
REMOTE_TYPES = FEED_TYPES | {"q"}  # readers and commands; trainers stay local
TRAINER_TYPES = frozenset({"rec", "hb", "hello", "finish", "cack"})  # messages that speak for a run
SIGNED_OPS = ("command", "import_end", "remove")  # recorded with who sent them


class Refused(ProtocolError):
    """A query the agent refuses: the error goes back to the asker under its request id."""

    def __init__(self, text: str, req_id: int):
        super().__init__(text)
        self.req_id = req_id


class Agent:
    """The loop; what it knows lives in components handed the journal: ``liveness`` (trainer
    processes), ``trainers`` (their messages), ``commands`` (the command desk), ``alerts`` (the alert
    desk), ``queries`` (what clients read), ``imports``, ``retention``, ``feed`` (readers following)."""

    def __init__(self, bind: str, data_dir: str | Path, *, sample_interval: float = 1.0,
                 stale_after: float = 5.0, sampler: SystemSampler | None = None,
                 reader_timeout: float = 30.0, listen: str | None = None, keys: Keyring | None = None,
                 alerts: str | Path | None = None):
        self.bind = check_url(bind, bind=True)
        file_rules = load_rules(alerts) if alerts is not None else []  # a bad file stops the start here
        if not is_loopback(bind):
            raise ValueError(f"refusing to listen on {bind} without CurveZMQ: keep --bind on loopback and add "
                             f"--listen {bind} with keys (`pilothouse keys init`, then `pilothouse keys allow "
                             f"CLIENT_PUBLIC_KEY`), or reach this node through an SSH tunnel to its loopback port "
                             f"(ssh -N -L 7766:127.0.0.1:7766 node).")
        self.data_dir = Path(data_dir)
        raise_fd_limit()
        self._ctx = zmq.Context()
        self.gate = Gate(self._ctx)  # ZAP on the agent's own context: the owner locally, listed keys remotely
        self.sock = self._ctx.socket(zmq.ROUTER)
        _tune(self.sock)
        self.doors = [Doorman(self.sock, LOCAL_CONNECTIONS, strangers=True, what=f"loopback {bind}")]  # see limits
        self.remote: CurveListener | None = None
        try:
            self.gate.local(self.sock, local_keyring())
            if listen is not None:
                self.remote = CurveListener(self._ctx, self.gate, listen, keys if keys is not None else Keyring())
                _tune(self.remote.sock)
                self.doors.append(Doorman(self.remote.sock, REMOTE_CONNECTIONS, strangers=False, what=listen))
                self.remote.sock.bind(self.remote.url)
            self.sock.bind(self.bind)  # before touching the data dir: a busy port leaves nothing behind
            for door in self.doors:
                door.bound()
            private_dir(self.data_dir)
            # one agent per journal, for its whole life (see node.data_lock)
            self.lock = DataLock(self.data_dir, "starting another on it (or give this one another --data)")
            journal = self.data_dir / "journal.sqlite"
            self.space = DiskSpace(self.data_dir, journal.with_name(journal.name + "-wal"))
            self.space.start()  # on a full disk: room to open the journal, read-only until space returns
            self.damaged: str | None = None  # set when a read or write meets a damaged journal page
            self.store = Store(journal)
        except BaseException:
            self._close_sockets()
            if hasattr(self, "lock"):
                self.lock.release()
            raise
        self.store.db.execute("PRAGMA wal_autocheckpoint=0")  # the checkpointer thread does it off the loop
        self.host = socket.gethostname()
        self.sampler = sampler if sampler is not None else SystemSampler()
        self.sample_interval = sample_interval
        self.bad_frames = 0
        self.internal_errors = 0
        self._replies: list[tuple[bytes, dict, bool]] = []  # sent once the turn's writes are committed
        self._stop = threading.Event()
        self.feed = ReaderFeed(self.store, self._send, reader_timeout, self._admits)
        self._system_run = self._register_system_run()
        self.liveness = Liveness(self.store, self.host, stale_after)
        self.sessions = Sessions(self.host, stale_after)
        self.commands = CommandDesk(self.store, self.liveness, self._reply)
        self.alerts = AlertDesk(self.store, self.liveness, self.commands, self._system_run, alerts, file_rules)
        owners = RunOwners(self.store.db, self.sessions, self.liveness, self.host)
        self.trainers = TrainerDesk(self.store, self.sessions, owners, self.liveness, self.commands, self.alerts,
                                    self.host, self._reply, self._bad_input)
        self.queries = QueryDesk(self.store, self.liveness, self.alerts.engine)  # what clients read
        self.imports = ImportDesk(self.store)  # a run from an archive: hidden until its last batch is in
        self.retention = Retention(self.store, self.liveness, self.sessions, self.commands, self.alerts,
                                   self._system_run, self.host)  # rm and gc: a run hidden at once, deleted in batches
        self.compactor = Compactor(self.store)  # small metric entries packed into large ones, between turns
        queries, alerts_, imports, retention = self.queries, self.alerts, self.imports, self.retention
        self._ops: dict[str, Callable[[dict], Any]] = {  # every op of pilothouse.wire.queries.QUERIES
            "ping": self._op_ping, "runs": queries.op_runs, "resolve": queries.op_resolve, "read": queries.op_read,
            "key_metric": queries.op_key_metric, "key_metric_set": queries.op_key_metric_set,
            "rollouts": queries.op_rollouts, "tiers": queries.op_tiers,
            "alerts": alerts_.op_alerts, "alert_add": alerts_.op_alert_add, "alert_rm": alerts_.op_alert_rm,
            "import_begin": imports.op_begin, "import_batch": imports.op_batch, "import_end": imports.op_end,
            "import_abort": imports.op_abort, "remove": retention.op_remove, "gc": retention.op_gc,
        }
        self._held_ops = {"command": self.commands.op_command, "command_status": self.commands.op_command_status}

    # --- lifecycle ---------------------------------------------------------------------

    def stop(self, *_: object) -> None:
        self._stop.set()

    def serve_forever(self) -> None:
        for sig in (signal.SIGTERM, signal.SIGINT):
            if threading.current_thread() is threading.main_thread():
                signal.signal(sig, self.stop)
        log.info("pilothouse agent %s listening on %s, data in %s", __version__, self.bind, self.data_dir)
        if self.remote is not None:
            log.info("CurveZMQ listener on %s, agent key %s, %d client(s) allowed", self.remote.url,
                     self.remote.public, len(self.remote.allow.ring.allowed()))
        poller = zmq.Poller()
        for sock in self._sockets() + [door.monitor for door in self.doors]:
            poller.register(sock, zmq.POLLIN)
        checkpointer = threading.Thread(target=self._checkpoint_loop, name="wal-checkpointer", daemon=True)
        checkpointer.start()
        next_sample = next_check = time.monotonic()
        try:
            while not self._stop.is_set():
                now = time.monotonic()
                behind = self.feed.behind()
                busy = behind or self.retention.pending() or not self.space.full_since and (
                    self.compactor.pending() or self.store.index_due or bool(self.store.tiers.building))
                timeout = 0 if busy else max(0.0, min(next_sample, next_check) - now)
                ready = dict(poller.poll(int(min(timeout, 0.2) * 1000)))
                for door in self.doors:
                    if door.monitor in ready:  # before the turn: one past its share is shut before it sends much
                        door.admit()
                if any(sock in ready for sock in self._sockets()):
                    self._turn()
                elif behind:
                    self.feed.feed(self.store.head, [])
                now = time.monotonic()
                if now >= next_sample:
                    self._timer(self._sample)
                    next_sample = now + self.sample_interval
                if now >= next_check:
                    self.space.check()  # the disk-full state begins and ends without a write waiting on it
                    self._timer(self._truncate_wal)
                    self._timer(self._check_liveness)
                    self._timer(self._alert_timer)
                    self._timer(self._close_idle_series)
                    next_check = now + 1.0
                if self.retention.pending():  # one bounded batch between turns: ingest never waits for long
                    self._timer(self._remove_some)
                if self.space.full_since:  # the work below writes more: it waits for space
                    continue
                if self.store.index_due:  # likewise one slice of rollout text into the search index
                    self._timer(self._index_some)
                elif self.compactor.pending():  # and, with nothing else to do, one packing step
                    self._timer(self._compact_some)
                if self.store.tiers.building:  # and one step of building tiers a run lacks (an old journal)
                    self._timer(self._build_tiers)
        finally:
            self._stop.set()
            self.alerts.hooks.stop()
            checkpointer.join(timeout=10)
            self._close_sockets()
            try:
                self.store.begin()
                self.store.set_status(self._system_run, "finished", time.time(), reason="agent stopped")
                self.store.commit()
                self.store.close()
            except sqlite3.Error as exc:  # a disk full to the last byte: the next start finds the rest
                log.warning("the journal could not note the agent's stop: %s", exc)
                self.store.db.close()
            self.lock.release()
            log.info("pilothouse agent stopped")

    def _sockets(self) -> list[zmq.Socket]:
        return [self.sock] if self.remote is None else [self.sock, self.remote.sock]

    def _close_sockets(self) -> None:
        for door in self.doors:
            door.close()
        self.sock.close(linger=0)
        if self.remote is not None:
            self.remote.close()
        self.gate.stop()
        self._ctx.term()

    def _checkpoint_loop(self, interval: float = 1.0) -> None:
        """Copy the WAL back into the database on a thread of its own connection: SQLite
        releases the GIL, so this runs on another core instead of stalling the loop's commits."""
        con = sqlite3.connect(self.store.path, timeout=5)
        logged = -REMIND_EVERY
        try:
            while not self._stop.wait(interval):
                if self.space.tight():  # space is short: the loop truncates the WAL (see _truncate_wal)
                    continue
                try:
                    con.execute("PRAGMA wal_checkpoint(PASSIVE)")
                except sqlite3.Error as exc:  # a full disk: said once a minute, not every second
                    if time.monotonic() - logged >= REMIND_EVERY:
                        logged = time.monotonic()
                        log.warning("WAL checkpoint failed: %s", exc)
        finally:  # the journal's close, the last connection's, checkpoints the rest and removes the WAL
            con.close()

    def _truncate_wal(self) -> None:
        """While space is short the WAL gives its space back each second, on the loop's connection
        between turns (a checkpoint that cannot grow the database left the agent "disk full" for good)."""
        if self.space.tight():
            self.space.truncate_wal(self.store.db.conn)

    @contextlib.contextmanager
    def _writing(self) -> Iterator[None]:
        """One transaction outside a turn (timers); what it wrote goes to readers, and its replies
        to peers, once committed.  On an error the caller (``_timer``) rolls back."""
        head_before = self.store.head
        self.store.begin()
        yield
        self._committed(head_before, self._commit())

    def _alert_timer(self) -> None:
        with self._writing():
            self.alerts.tick()
            self.commands.expire()

    def _remove_some(self) -> None:
        try:
            with self._writing():
                self.retention.step()
        except Exception:
            self.retention.hold()  # a failing batch (a full disk) is retried in a second, not in a busy loop
            raise

    def _compact_some(self) -> None:
        try:
            with self._writing():
                self.compactor.step()
        except Exception:
            self.compactor.failed()  # undone: counted again, and tried again in a second
            raise

    def _build_tiers(self) -> None:
        with self._writing():
            run = self.store.build_tiers_some()
        if run is not None:
            log.info("tiers of run %s built", run)

    def _close_idle_series(self) -> None:
        if self.store.rollout_series.idle(time.time()):  # the rollouts/* points of steps whose rollouts stopped
            with self._writing():
                self.alerts.on_entries(self.store.close_idle_series(time.time()))

    def _index_some(self) -> None:
        try:
            with self._writing():
                self.store.index_due = self.store.rollouts.index_some(INDEX_TEXT_BYTES)
        except Exception:
            self.store.index_due = False  # a failing slice (a full disk) is tried again at the next rollouts
            raise

    def _timer(self, job: Callable[[], None]) -> None:
        """A failing timer job is undone and retried next tick; it never stops the agent."""
        try:
            job()
        except Exception as exc:
            self._unstored(exc, job.__name__)

    # --- one turn -------------------------------------------------------------------------

    def _turn(self) -> None:
        """The turn's first message that may write begins its transaction (``Store.mark``): a turn of
        readers' credits alone, as many turns as the pages sent, costs no BEGIN and COMMIT."""
        head_before = self.store.head
        try:
            self._drain()
            if self.trainers.losses.waiting() and not self.store.db.conn.in_transaction:
                self.store.begin()  # counters heard in a turn undone (a full disk): written again
            entries = self._commit() if self.store.db.conn.in_transaction else []
        except Exception as exc:
            self._unstored(exc, "turn")
            return
        self._committed(head_before, entries)

    def _commit(self) -> list:
        """Trainers' loss counters heard since the last commit are written again first: one heard in a
        turn a full disk undid would else be lost with the trainer gone (see ``node.losses``)."""
        self.trainers.losses.write(self.store)
        return self.store.commit()

    def _committed(self, head_before: int, entries: list) -> None:
        """After a commit: acks and replies go out, then the new entries to readers."""
        self.trainers.losses.saved()
        for (ident, run, rank), seq in self.trainers.acks.items():
            self._send(ident, message("ack", run=run, rank=rank, seq=seq))
        self.trainers.acks.clear()
        self._send_replies()
        landed = self.imports.take_landed()
        self.compactor.added(entries)
        if landed:
            self.compactor.resurvey()
        self.feed.feed(head_before, [] if landed else entries)  # an imported run: paged

    def _unstored(self, exc: Exception, what: str) -> None:
        """A commit failed (a full disk, or worse): undo it all; what only read is still answered,
        every write is refused with the reason, and trainers are told their records were not kept."""
        self.store.rollback()
        if is_disk_full(exc) or is_corrupt(exc):
            why = self._storage_failed(exc, len(self.trainers.acks) + sum(wrote for _, _, wrote in self._replies))
        else:
            self._failed(what, exc)
            why = f"the agent could not store this ({type(exc).__name__}); nothing of it was kept"
        replies, self._replies = self._replies, []
        for ident, run, rank in self.trainers.acks:
            self._reply(ident, message("err", id=None, msg=f"{why}; run {run} rank {rank}: the trainer keeps "
                                                            "these records and sends them again"))
        self.trainers.acks.clear()
        for ident, msg, wrote in replies:
            if not wrote:
                self._replies.append((ident, msg, False))
            elif msg["t"] in ("r", "err", "welcome"):  # a write's answer; commands forwarded to trainers are dropped
                self._reply(ident, message("err", id=msg.get("id"), msg=why))
        self.commands.forget_unstored(why)
        self._send_replies()

    def _storage_failed(self, exc: Exception, writes: int = 1) -> str:
        """A full disk or a damaged journal: the text to answer with; logged once, not per message."""
        if is_disk_full(exc):
            return self.space.failed(writes)
        if self.damaged is None:
            self.damaged = corrupt_message(self.store.path)
            log.error("%s", self.damaged)
        return self.damaged

    def _reply(self, ident: bytes, msg: dict) -> None:
        self._replies.append((ident, msg, True))  # True: depends on this turn's writes (see _handle)

    def _send_replies(self) -> None:
        for ident, msg, _ in self._replies:
            self._send(ident, msg)
        self._replies.clear()

    def _drain(self) -> None:
        """Local peers first, then remote ones, each within the turn's bounds.  A peer is its
        routing id tagged L(oopback) or R(emote), so answers leave by the socket they came in on."""
        deadline = time.monotonic() + TURN_SECONDS
        taken = 0
        for _ in range(TURN_MESSAGES):
            try:
                frames = self.sock.recv_multipart(zmq.NOBLOCK)
            except zmq.Again:
                break
            self._handle(LOCAL + frames[0], frames[1:], None)
            taken += sum(map(len, frames))
            if time.monotonic() > deadline or taken > TURN_BYTES:
                return
        if self.remote is None:
            return
        for _ in range(TURN_MESSAGES):
            try:
                parts = self.remote.sock.recv_multipart(zmq.NOBLOCK, copy=False)
            except zmq.Again:
                return
            key = key_hex(parts[-1].get("User-Id"))  # set by the ZAP handler: the client's authenticated key
            self._handle(REMOTE + parts[0].bytes, [p.bytes for p in parts[1:]], key)
            taken += sum(map(len, parts))
            if time.monotonic() > deadline or taken > TURN_BYTES:
                return

    def _handle(self, ident: bytes, body: list[bytes], client_key: str | None) -> None:
        """One message, alone: refused or undone by itself, never rolling back the rest of the turn."""
        try:
            msg = self._check(body, client_key)
        except ProtocolError as exc:
            self._bad_input(ident, str(exc))
            return
        short = self.space.refuses(msg)  # new data on a disk short of space: refused before it is looked at
        if short is not None:
            self._reply(ident, message("err", id=msg.get("id"), msg=short))
            return
        writes = msg["t"] not in FEED_TYPES  # a reader's sub/credit/unsub touch no journal: no savepoint
        mark, replies = self.store.mark() if writes else None, len(self._replies)
        try:
            self._dispatch(ident, msg, client_key)
        except Exception as exc:
            if mark is not None:
                self.store.undo(mark)
            del self._replies[replies:]
            if is_disk_full(exc) or is_corrupt(exc):
                self._reply(ident, message("err", id=msg.get("id"), msg=self._storage_failed(exc)))
                return
            if not isinstance(exc, ProtocolError):
                self._failed(msg["t"], exc)
                exc = ProtocolError(f"the agent could not handle this {msg['t']!r} message ({type(exc).__name__}); "
                                    "nothing of it was kept")
            self._bad_input(ident, str(exc), exc.req_id if isinstance(exc, Refused) else None)
        else:
            if mark is None or not self.store.wrote_since(mark):
                self._replies[replies:] = [(i, m, False) for i, m, _ in self._replies[replies:]]
            if mark is not None:
                self.store.release(mark)

    def _check(self, body: list[bytes], client_key: str | None) -> dict:
        if len(body) != 1:
            raise ProtocolError(f"expected one frame per message, got {len(body)}")
        try:
            msg = decode(body[0])
        except ProtocolError:
            raise
        except Exception as exc:  # a frame the checks themselves choke on (RecursionError, MemoryError)
            raise ProtocolError(f"message could not be checked ({type(exc).__name__})") from None
        if client_key is not None and not self._admits(client_key):
            raise ProtocolError("this client's key is no longer allowed on this agent")
        if client_key is not None and msg["t"] not in REMOTE_TYPES:
            raise ProtocolError(f"{msg['t']!r} is not accepted from the network: trainers connect to the "
                                "agent's loopback address")
        return msg

    def _admits(self, client_key: str) -> bool:
        """Whether a network client's key is on the allow-list now: ZAP checks it once, when the
        connection opens; this, for every message and every page after (a revoked key is cut off)."""
        return self.remote is not None and self.remote.allow.name(client_key) is not None

    def _failed(self, what: str, exc: Exception) -> None:
        """An unexpected error (in a message, a turn, a timer): the first is logged with its traceback,
        later ones counted."""
        self.internal_errors += 1
        if self.internal_errors == 1:
            log.error("%r failed and was undone", what, exc_info=exc)
        elif self.internal_errors % 1000 == 0:
            log.error("%d failures undone so far; last: %r (%s)", self.internal_errors, what, type(exc).__name__)

    def _bad_input(self, ident: bytes, text: str, req_id: int | None = None) -> None:
        self.bad_frames += 1
        if self.bad_frames <= 20 or self.bad_frames % 1000 == 0:
            log.warning("rejected a message (%d so far): %s", self.bad_frames, text)
        self._reply(ident, message("err", id=req_id, msg=text))

    def _dispatch(self, ident: bytes, msg: dict, client_key: str | None = None) -> None:
        kind = msg["t"]
        now = time.time()
        removed = self.retention.refusal(msg) if kind in TRAINER_TYPES else None
        if removed is not None:
            self._reply(ident, message("err", id=None, msg=removed))
            return
        if kind in TRAINER_TYPES:
            self.trainers.handle(ident, msg, now)
        elif kind == "q":
            self._on_query(ident, msg, client_key)
        elif kind == "sub":
            self.feed.subscribe(ident, msg, client_key)
        elif kind == "credit":
            self.feed.credit(ident, msg["n"])
        elif kind == "unsub":
            self.feed.drop(ident)

    def _check_liveness(self) -> None:
        now = time.time()
        changed = self.liveness.verdicts(now)
        if changed:
            with self._writing():
                for run, verdict, silent in changed:
                    self.store.set_status(run, verdict, now, reason=f"no heartbeat for {silent:.1f} s")
                    if verdict == "crashed":
                        self.commands.close(run, "the trainer crashed before applying it", now)

    # --- system sampling ------------------------------------------------------------------

    def _register_system_run(self) -> str:
        run_id = SYSTEM_RUN_PREFIX + "".join(c if c.isalnum() or c in "-_." else "-" for c in self.host)[:60]
        self.store.begin()
        self.store.upsert_run({"run": run_id, "project": "system", "name": self.host, "host": self.host,
                               "pid": os.getpid(), "config": {}}, time.time(), kind="system")
        self.store.set_status(run_id, "running", time.time())
        self.store.commit()
        return run_id

    def _sample(self) -> None:
        values = self.sampler.sample()
        if not values:
            return
        run = self._system_run
        seq = self.store.max_seq.get((run, 0, ""), 0) + 1
        with self._writing():
            try:
                row = metrics_packer(len(values))(seq, time.time(), *values.values())
                if not self.space.full_since:  # new data: none while space is short (its alerts still run)
                    self.store.ingest((run, 0, ""), seq, seq, encode_batch([(REC_METRICS, tuple(values), row)]),
                                      time.time())
            except ProtocolError as exc:
                log.warning("system sample rejected: %s", exc)
            self.alerts.on_sample(values, time.time())

    def _send(self, ident: bytes, msg: dict) -> bool:
        sock = self.sock if ident[:1] == LOCAL or self.remote is None else self.remote.sock
        try:
            sock.send_multipart([ident[1:], pack(msg)], zmq.NOBLOCK)
            return True
        except zmq.ZMQError:  # peer gone (ROUTER_MANDATORY) or its queue is full: it will ask again
            return False

    # --- queries ----------------------------------------------------------------------------

    def _on_query(self, ident: bytes, msg: dict, client_key: str | None = None) -> None:
        name = msg["op"]
        try:
            args = check_query(name, msg.get("args") or {})  # an unknown op or argument, a bad value: refused here
            if name in SIGNED_OPS:
                args["who"] = self._sender(args["who"], client_key)
            if name in self._held_ops:  # commands: the desk may hold the answer until the trainer's ack
                data = self._held_ops[name](args, ident, msg["id"])
                if data is None:
                    return
            else:
                data = self._ops[name](args)
        except (LookupError, ValueError, TypeError, OverflowError) as exc:
            raise Refused(exc.args[0] if exc.args else str(exc), msg["id"]) from None
        self._reply(ident, message("r", id=msg["id"], data=data))

    def _sender(self, claimed: Any, client_key: str | None) -> dict[str, str]:
        """Who sent a command: over CURVE, the authenticated key and its allow-list name; the
        user/host/client a peer claims are kept beside it, never instead of it."""
        who = {k: str(v)[:100] for k, v in claimed.items()
               if k in ("user", "host", "client") and isinstance(v, str)} if isinstance(claimed, dict) else {}
        if client_key is None or self.remote is None:
            return {**who, "via": "loopback"}
        return {**who, "via": "curve", "key": client_key, "name": self.remote.allow.name(client_key) or "?"}

    def _op_ping(self, args: dict) -> dict:
        return {"version": __version__, "host": self.host, "head": self.store.head, "pid": os.getpid(),
                "journal": self.store.journal_id,
                "gpus": self.sampler.gpu_count, "bad_frames": self.bad_frames,
                "internal_errors": self.internal_errors, "disk_full": self.space.state, "damaged": self.damaged}


def _tune(sock: zmq.Socket) -> None:
    sock.setsockopt(zmq.MAXMSGSIZE, MAX_INBOUND_BYTES)
    sock.setsockopt(zmq.ROUTER_MANDATORY, 1)
    sock.setsockopt(zmq.LINGER, 0)
    sock.setsockopt(zmq.SNDHWM, 10_000)
    tune(sock)  # what one connection may queue, and how long a handshake may take (see limits)
    sock.setsockopt(zmq.IPV6, 1)

