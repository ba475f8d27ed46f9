"""Commands to trainers, as the agent handles them: checked, recorded, forwarded, answered.

Every command is stored with its sender before it goes anywhere; it is (re)sent to rank 0's
latest connection until the trainer answers; every answer, and every refusal by the agent
itself, is an ``ack`` event in the run's journal.  A client may ask to wait for the answer: its
request is held and answered in the turn that commits the trainer's ack (or when its wait ends),
so the CLI learns the outcome as soon as the agent has it, without polling.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from pilothouse.node.journal import Store
from pilothouse.node.liveness import Liveness
from pilothouse.wire.checks import check_command_id, check_int, query_arg
from pilothouse.wire.messages import ACK_STATES, COMMANDS, ProtocolError, message
from pilothouse.wire.tuning import past_step, validate_changes
from pilothouse.wire.watched import WATCHED, how_to_steer

Reply = Callable[[bytes, dict], None]  # queue a message to a peer; sent once the turn commits

MAX_WAIT = 60.0  # seconds a request may be held; the client asks again for longer waits
MAX_WAITING = 10_000  # held requests across clients; past it, requests are answered at once
RESEND_AFTER = 1.0  # seconds before an unanswered command goes to the trainer again


@dataclass
class Waiter:
    ident: bytes
    req_id: int
    deadline: float  # time.monotonic()


class CommandDesk:
    def __init__(self, store: Store, liveness: Liveness, reply: Reply):
        self.store = store
        self.liveness = liveness
        self.reply = reply
        self.trainers: dict[str, bytes] = {}  # run -> rank 0's latest connection, where commands go
        self._sent: dict[str, float] = {}  # cid -> when it last went to the trainer
        self._waiting: dict[str, list[Waiter]] = {}  # cid -> clients held until it settles

    # --- trainers ----------------------------------------------------------------------------

    def route(self, ident: bytes, run: str, rank: int) -> None:
        """Rank 0's latest connection receives the run's commands."""
        if rank == 0:
            self.trainers[run] = ident

    def trainer_seen(self, ident: bytes, run: str, rank: int) -> None:
        """Rank 0 spoke (hello, heartbeat): route to it and (re)send what it has not answered."""
        if rank != 0:
            return
        self.trainers[run] = ident
        now = time.monotonic()
        for cmd in self.store.commands.unanswered(run):
            if cmd["state"] == "pending" and now - self._sent.get(cmd["cid"], 0.0) > RESEND_AFTER:
                self._forward(cmd)

    def _forward(self, cmd: dict) -> None:
        ident = self.trainers.get(cmd["run"])
        if ident is not None:
            self._sent[cmd["cid"]] = time.monotonic()
            self.reply(ident, message("cmd", cid=cmd["cid"], cmd=cmd["cmd"], **cmd["args"]))

    def on_ack(self, msg: dict, now: float) -> None:
        """The trainer's answer.  Commands go to rank 0 alone, so only rank 0 (its owning process:
        the caller checked the session) answers, for the command it was sent, and a ``set`` changes
        no setting but those it asked for."""
        run, cid = msg["run"], msg["cid"]
        if not self.store.has_run(run):
            return
        answer = {k: msg[k] for k in ("cid", "cmd", "state", "step", "detail", "applied")}
        row = self.store.commands.get(cid)
        if row is None or row["run"] != run or row["state"] not in ("pending", "scheduled"):
            return  # unknown, or a repeated answer: recorded once
        if msg["rank"] != 0 or msg["cmd"] != row["cmd"]:
            raise ProtocolError(f"command {cid} is a {row['cmd']!r} sent to rank 0 of run {run}: a {msg['cmd']!r} "
                                f"answer from rank {msg['rank']} is refused")
        asked = row["args"].get("values", {})
        if set(msg.get("config", {})) - set(asked):
            raise ProtocolError(f"command {cid} changes {sorted(asked) or 'no setting'}: its answer may not change "
                                f"other settings of the run's config")
        if row["state"] == "scheduled" and msg["state"] == "scheduled":
            return
        self.store.commands.answer(cid, msg["state"], msg["step"], msg["detail"], msg["applied"], now)
        self.store.note_step(run, msg["step"])  # "paused at step S" and the run's step agree at once
        if msg["state"] == "applied" and msg["cmd"] == "set":  # what it replaced: charts say "lr 3e-4 → 1e-4"
            config, _ = self.store.config_and_schema(run)
            answer["before"] = {k: config[k] for k in msg.get("config", {}) if k in config}
        self.store.event(run, "ack", answer)
        if msg["state"] == "applied":
            if msg["cmd"] == "set":
                self.store.update_config(run, msg.get("config", {}))
            elif msg["cmd"] in ("pause", "resume"):
                self.liveness.set_status(run, "paused" if msg["cmd"] == "pause" else "running", now,
                                         f"{msg['cmd']} command {cid}")
            elif msg["cmd"] == "checkpoint":
                self.store.event(run, "checkpoint", answer)
        self._settle(cid)
        self._sent.pop(cid, None)

    def close(self, run: str, why: str, now: float) -> None:
        """A run that ended answers nothing more: its open commands are rejected, visibly."""
        for cmd in self.store.commands.unanswered(run):
            self.store.commands.answer(cmd["cid"], "rejected", None, why, {}, now)
            self.store.event(run, "ack", {"cid": cmd["cid"], "cmd": cmd["cmd"], "state": "rejected", "step": None,
                                          "detail": why, "applied": {}})
            self._settle(cmd["cid"])
            self._sent.pop(cmd["cid"], None)

    # --- clients -----------------------------------------------------------------------------

    def op_command(self, args: dict, ident: bytes, req_id: int) -> dict | None:
        """Validate, record and forward a command; a known id returns its state (retries are safe).
        None: the answer is held until the command settles (``wait`` seconds at the most)."""
        cid = check_command_id(args.get("cid"))
        wait = _wait(args)
        row = self.store.commands.get(cid)
        if row is None:
            cmd = args.get("cmd")
            if cmd not in COMMANDS:
                raise ValueError(f"unknown command {str(cmd)[:40]!r}; one of {', '.join(COMMANDS)}")
            run = self.store.resolve(query_arg(args, "run", str))
            at_step = args.get("at_step")
            if at_step is not None:
                check_int(at_step, "at_step")
            row = self.issue(cid, run, cmd, args.get("values"), at_step, args["who"])  # who: see Agent._sender
        return self._hold(row, wait, ident, req_id)

    def op_command_status(self, args: dict, ident: bytes, req_id: int) -> dict | None:
        row = self.store.commands.get(check_command_id(args.get("cid")))
        if row is None:
            raise LookupError(f"no command with id {args.get('cid')!r}")
        return self._hold(row, _wait(args), ident, req_id)

    def issue(self, cid: str, run: str, cmd: str, values: Any, at_step: int | None, who: dict) -> dict:
        """Record a command with its sender, then refuse it visibly or forward it to the trainer.
        Humans (through ``op_command``) and alert rules take this same path."""
        fwd: dict[str, Any] = {"at_step": at_step} if at_step is not None else {}
        reason = self._refusal(run, cmd, values, fwd, at_step)
        now = time.time()
        self.store.commands.add(cid, run, cmd, fwd, who, now)
        asked = {"values": values} if isinstance(values, dict) else {}
        self.store.event(run, "command", {"cid": cid, "cmd": cmd, **asked, **fwd, "who": who})
        if reason is not None:
            answer = {"cid": cid, "cmd": cmd, "state": "rejected", "step": None, "detail": reason, "applied": {}}
            self.store.commands.answer(cid, "rejected", None, reason, {}, now)
            self.store.event(run, "ack", answer)
        else:
            self._forward(self.store.commands.get(cid))
        return self.store.commands.get(cid)

    def _refusal(self, run: str, cmd: str, values: Any, fwd: dict, at_step: Any) -> str | None:
        """Why the agent refuses a command before it reaches the trainer, or None."""
        row = self.store.run_row(run)
        status = self.liveness.status(run)
        if row["kind"] == WATCHED:
            return how_to_steer(run)
        if row["kind"] != "train":
            return f"run {run} is the node's system run (GPU and host usage): it has nothing to steer"
        if status not in ("running", "paused", "stale"):
            return f"run {run} is {status}: only a running run can be steered"
        if at_step is not None and cmd != "set":
            return "--at-step applies to set only"
        if at_step is not None and row["last_step"] is not None and at_step < row["last_step"]:
            return past_step(at_step, row["last_step"])
        if cmd == "set":
            _, schema = self.store.config_and_schema(run)
            try:
                fwd["values"] = validate_changes(schema, values)
            except ValueError as exc:
                return str(exc)
        return None

    # --- held requests -----------------------------------------------------------------------

    def _hold(self, row: dict, wait: float, ident: bytes, req_id: int) -> dict | None:
        if row["state"] in ACK_STATES or wait <= 0 or sum(map(len, self._waiting.values())) >= MAX_WAITING:
            return row
        self._waiting.setdefault(row["cid"], []).append(Waiter(ident, req_id, time.monotonic() + wait))
        return None

    def _settle(self, cid: str) -> None:
        """Answer every client held on ``cid``; the reply leaves with the turn that commits the change."""
        waiters = self._waiting.pop(cid, None)
        if waiters:
            row = self.store.commands.get(cid)
            for w in waiters:
                self.reply(w.ident, message("r", id=w.req_id, data=row))

    def forget_unstored(self, why: str) -> None:
        """After a turn was undone: clients held on a command that was never stored get ``why``."""
        for cid in [c for c in self._waiting if self.store.commands.get(c) is None]:
            for w in self._waiting.pop(cid):
                self.reply(w.ident, message("err", id=w.req_id, msg=why))
            self._sent.pop(cid, None)

    def expire(self) -> None:
        """Held requests whose wait ran out get the command as it stands (still pending)."""
        now = time.monotonic()
        for cid in [c for c, ws in self._waiting.items() if any(w.deadline <= now for w in ws)]:
            due = [w for w in self._waiting[cid] if w.deadline <= now]
            self._waiting[cid] = [w for w in self._waiting[cid] if w.deadline > now]
            if not self._waiting[cid]:
                del self._waiting[cid]
            row = self.store.commands.get(cid)
            for w in due:
                self.reply(w.ident, message("r", id=w.req_id, data=row))


def _wait(args: dict) -> float:
    wait = args.get("wait", 0)
    if isinstance(wait, bool) or not isinstance(wait, (int, float)) or not math.isfinite(wait) or wait < 0:
        raise ValueError("wait must be a number of seconds >= 0")
    return min(float(wait), MAX_WAIT)
