"""Trainers' messages, as the agent handles them: hello, records, heartbeats, finish, command acks.

A component of the agent, handed its journal and the parts that follow trainers (sessions, run
owners, liveness, the command and alert desks).  A run speaks only through the process that owns
it (``node.liveness.Sessions``) and, while its job lives, only through that job
(``node.run_owners``); anyone else is refused, told why, and recorded on the run.  Records are
acknowledged only once the turn that stored them commits: ``acks`` waits for the agent's commit.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from pilothouse.node.alert_desk import AlertDesk
from pilothouse.node.command_desk import CommandDesk, Reply
from pilothouse.node.journal import Store
from pilothouse.node.liveness import HELLO, Liveness, Session, Sessions, ended_as
from pilothouse.node.losses import UnsavedLosses
from pilothouse.node.run_owners import RunOwners
from pilothouse.wire.checks import ENV_TOKEN
from pilothouse.wire.messages import message
from pilothouse.wire.watched import WATCHED

Refuse = Callable[[bytes, str], None]  # a bad message's error to its peer, counted and logged by the agent
REFUSALS_EVERY = 10.0  # seconds between two "refused" events of one run and rank (the others are counted)


class TrainerDesk:
    def __init__(self, store: Store, sessions: Sessions, owners: RunOwners, liveness: Liveness,
                 commands: CommandDesk, alerts: AlertDesk, host: str, reply: Reply, refuse: Refuse):
        self.store = store
        self.sessions = sessions
        self.owners = owners
        self.liveness = liveness
        self.commands = commands
        self.alerts = alerts
        self.host = host
        self.reply = reply
        self.refuse = refuse
        self.acks: dict[tuple[bytes, str, int], int] = {}  # (peer, run, rank) -> seq, sent once committed
        self.losses = UnsavedLosses()  # trainers' loss counters, until a commit holds them
        self._refusals: dict[tuple[str, int], tuple[float, int]] = {}  # (run, rank) -> (last recorded, since)

    def handle(self, ident: bytes, msg: dict, now: float) -> None:
        kind = msg["t"]
        if kind == "rec":
            self._on_records(ident, msg, now)
        elif kind == "hb":
            self._on_heartbeat(ident, msg, now)
        elif kind == "hello":
            self._on_hello(ident, msg, now)
        elif kind == "finish":
            self._on_finish(ident, msg, now)
        elif kind == "cack" and self._owner_speaks(ident, msg):
            self.commands.on_ack(msg, now)

    # --- who speaks for a run ------------------------------------------------------------------

    def _owner_speaks(self, ident: bytes, msg: dict, hello: bool = False) -> bool:
        """Records, heartbeats and acks of a run come only from the process that owns it; anyone
        else is refused, told why, and recorded on the run (once per REFUSALS_EVERY, with a count)."""
        verdict = self.sessions.speak(*_stream(msg), msg if hello else None)
        if verdict is None:
            return True
        self._not_owner(ident, msg, verdict)
        return False

    def _not_owner(self, ident: bytes, msg: dict, owner: Session | str) -> None:
        run, rank, session = _stream(msg)
        if owner == HELLO:
            self.reply(ident, message("nack", run=run, rank=rank, reason="hello",
                                      expect=self.store.max_seq.get((run, rank, session), 0) + 1))
            return
        refusal = self._refusals.get((run, rank))
        now = time.monotonic()
        if refusal is None or now - refusal[0] > REFUSALS_EVERY:
            if self.store.has_run(run):
                self.store.event(run, "refused", {"rank": rank, "message": msg["t"], "pid": msg.get("pid"),
                                                  "refused": 1 + (refusal[1] if refusal else 0),
                                                  "detail": f"run {run} rank {rank} belongs to pid {owner.pid}"})
            self._refusals[(run, rank)] = (now, 0)
        else:
            self._refusals[(run, rank)] = (refusal[0], refusal[1] + 1)
        self.refuse(ident, f"run {run} rank {rank} is open in another process (pid {owner.pid or '?'}): a run "
                           f"belongs to the process that opened it while it lives; use another run id, or "
                           f"resume this one once that process is gone")

    def _job_refusal(self, msg: dict) -> str | None:
        """Why a hello may not speak for a run another job holds live (see ``node.run_owners``), or
        None; a refusal is also recorded on the run, as a process refused for a rank is."""
        run, rank = msg["run"], msg["rank"]
        if not self.store.has_run(run) or self.owners.admits(run, msg["token"]):
            return None
        holder = self.owners.live_holder(run, msg["session"])
        if holder is None:
            return None
        self.store.event(run, "refused", {"rank": rank, "message": "hello", "pid": msg.get("pid"), "refused": 1,
                                          "detail": f"pid {msg.get('pid')} is not of the job that holds run {run}"})
        return (f"run {run} is live ({holder}) and this process is not of its job (it lacks the run's token): "
                f"a rank joins a live run with rank 0's run.token (torch.distributed shares it; elsewhere pass "
                f"token=run.token or ${ENV_TOKEN}), and a new process continues a run once its job has ended")

    # --- messages -------------------------------------------------------------------------------

    def _on_hello(self, ident: bytes, msg: dict, now: float) -> None:
        owner = self.sessions.owners.get((msg["run"], msg["rank"]))
        if not self._owner_speaks(ident, msg, hello=True):
            return
        refusal = self.store.resume_refusal(msg) or self._job_refusal(msg)
        if refusal is not None:  # refused alone: the run, its owner and its streams stay as they were
            self.sessions.put_back(msg["run"], msg["rank"], owner)
            self.refuse(ident, refusal)
            return
        self.owners.claim(msg["run"], msg["token"])  # new, or continued now that its job has ended
        kind = WATCHED if "watched" in msg else "train"
        if kind == WATCHED and self.store.has_run(msg["run"]) and msg["rank"] == 0 \
                and self.liveness.status(msg["run"]) in ("finished", "crashed", "stale"):
            self.store.set_status(msg["run"], "running", now, reason=f"watched by pid {msg['pid']}")
        resume = self.store.upsert_run(msg, now, kind)
        if resume is not None:
            self.store.event(msg["run"], "resumed", {
                "attempt": resume.attempt, "host": msg["host"], "pid": msg["pid"], "started": msg.get("created", now),
                "after": ended_as(resume, self.host), "after_step": resume.last_step})
            if resume.status in ("finished", "crashed", "stale"):
                self.store.set_status(msg["run"], "running", now, reason=f"resumed by pid {msg['pid']}")
        if resume is not None or self.liveness.get(msg["run"]) is None or kind == WATCHED:
            self.liveness.started(msg["run"], msg["host"], msg["pid"], msg.get("pid_started"), kind == WATCHED)
        if msg.get("alerts") is not None and msg["rank"] == 0:
            self.alerts.rules_from_hello(msg["run"], msg["alerts"])
        seq = self.store.max_seq.get(_stream(msg), 0)  # of this process's own stream: a resume starts at 0
        self.reply(ident, message("welcome", run=msg["run"], rank=msg["rank"], seq=seq))
        self.commands.trainer_seen(ident, msg["run"], msg["rank"])

    def _on_records(self, ident: bytes, msg: dict, now: float) -> None:
        run, rank = msg["run"], msg["rank"]
        if not self.store.has_run(run):
            self.reply(ident, message("nack", run=run, rank=rank, reason="hello",
                                      expect=self.store.max_seq.get(_stream(msg), 0) + 1))
            return
        verdict = self.sessions.speak(*_stream(msg))
        if verdict is not None:
            self.store.check_batch(msg)  # a bad batch is refused as such, from anyone
            self._not_owner(ident, msg, verdict)
            return
        result = self.store.ingest(_stream(msg), msg["seq"], msg["floor"], msg, now)
        if result.entries:
            self.alerts.on_entries(result.entries)
        self.liveness.heard(run, now)
        self.commands.route(ident, run, rank)
        if result.expect is not None:
            self.reply(ident, message("nack", run=run, rank=rank, reason="gap", expect=result.expect))
        else:
            if result.refused:
                self.reply(ident, message("err", id=None, msg=result.refused))
            self.acks[(ident, run, rank)] = result.seq  # last: an ack is sent only for what was kept

    def _on_heartbeat(self, ident: bytes, msg: dict, now: float) -> None:
        run = msg["run"]
        if not self.store.has_run(run):
            self.reply(ident, message("nack", run=run, rank=msg["rank"], reason="hello", expect=1))
            return
        if not self._owner_speaks(ident, msg):
            return
        self._note_state(msg, now)
        self.liveness.heard(run, now)
        self.commands.trainer_seen(ident, run, msg["rank"])
        self.liveness.paused(run, msg.get("paused", False), now)

    def _note_state(self, msg: dict, now: float) -> int:
        """Loss counters and floor from a heartbeat or finish; returns the committed seq."""
        records, points, floor = (_count(msg.get(k)) for k in ("dropped_records", "dropped_points", "floor"))
        self.losses.heard(_stream(msg), now, records, points, floor)
        self.store.touch(msg["run"], now, records, points)
        if msg.get("step", -1) >= 0:
            self.store.note_step(msg["run"], msg["step"])
        return self.store.account_floor(_stream(msg), floor)

    def _on_finish(self, ident: bytes, msg: dict, now: float) -> None:
        run, rank = msg["run"], msg["rank"]
        if self.store.has_run(run) and not self._owner_speaks(ident, msg):
            return
        have = self._note_state(msg, now) if self.store.has_run(run) else 0
        if not self.store.has_run(run) or have < msg["seq"]:
            self.reply(ident, message("nack", run=run, rank=rank, expect=have + 1,
                                      reason="hello" if not self.store.has_run(run) else "gap"))
            return
        ending = "crashed" if msg.get("status") == "crashed" else "finished"
        self.sessions.release(*_stream(msg))
        if self._ends_run(run, rank) and self.liveness.finished(run, ending):
            if ending == "crashed":  # the training code raised: its process said why
                self.store.set_status(run, "crashed", now, reason=msg.get("error", ""))
                self.commands.close(run, "the trainer crashed before applying it", now)
            else:
                self.store.set_status(run, "finished", now)
                self.commands.close(run, "the run finished before applying it", now)
        self.reply(ident, message("finished", run=run, rank=rank))

    def _ends_run(self, run: str, rank: int) -> bool:
        """A run ends with its rank 0; on another node's agent of a multi-node job, which never hears
        rank 0, with the last of the ranks it holds."""
        if rank == 0:
            return True
        return not self.sessions.open_ranks(run) and not any(k[:2] == (run, 0) for k in self.store.max_seq)


def _stream(msg: dict) -> tuple[str, int, str]:
    """The (run, rank, session) a trainer message belongs to; a peer without a session is session ''."""
    return msg["run"], msg["rank"], msg.get("session", "")


def _count(value: Any) -> int:
    return value if type(value) is int and value >= 0 else 0
