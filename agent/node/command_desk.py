"""Commands to trainers, as the agent handles them: checked, recorded, forwarded, answered.

A mixin of ``Agent`` (it uses the agent's store, liveness and reply queue): the command
path in one place.  Every command is stored with its sender before it goes anywhere; it
is (re)sent to rank 0's latest connection until the trainer answers; every answer, and
every refusal by the agent itself, is an ``ack`` event in the run's journal.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

from pilothouse.wire.checks import check_command_id, check_int, query_arg
from pilothouse.wire.messages import COMMANDS
from pilothouse.wire.tuning import validate_changes

if TYPE_CHECKING:
    from pilothouse.node.journal import Store
    from pilothouse.node.server import Liveness


class CommandDesk:
    """Needs from the agent: ``store``, ``live``, ``trainers``, ``_replies`` and ``_set_live_status``."""

    store: Store
    live: dict[str, Liveness]
    trainers: dict[str, bytes]
    _cmd_sent: dict[str, float]
    _replies: list[tuple[bytes, dict]]

    def _trainer_seen(self, ident: bytes, run: str, rank: int) -> None:
        """Rank 0's latest connection receives the run's commands; open ones are (re)sent."""
        if rank != 0:
            return
        self.trainers[run] = ident
        now = time.monotonic()
        for cmd in self.store.open_commands(run):
            if cmd["state"] == "pending" and now - self._cmd_sent.get(cmd["cid"], 0.0) > 1.0:
                self._forward(cmd)

    def _forward(self, cmd: dict) -> None:
        ident = self.trainers.get(cmd["run"])
        if ident is not None:
            self._cmd_sent[cmd["cid"]] = time.monotonic()
            self._replies.append((ident, {"t": "cmd", "cid": cmd["cid"], "cmd": cmd["cmd"], **cmd["args"]}))

    def _on_command_ack(self, ident: bytes, msg: dict, now: float) -> None:
        run, cid = msg["run"], msg["cid"]
        if not self.store.has_run(run):
            return
        answer = {k: msg[k] for k in ("cid", "cmd", "state", "step", "detail", "applied")}
        row = self.store.command(cid)
        if row is None or row["run"] != run or row["state"] not in ("pending", "scheduled"):
            return  # unknown, or a repeated answer: recorded once
        if row["state"] == "scheduled" and msg["state"] == "scheduled":
            return
        self.store.answer_command(cid, msg["state"], msg["step"], msg["detail"], msg["applied"], now)
        self.store.event(run, "ack", answer)
        if msg["state"] == "applied":
            if msg["cmd"] == "set":
                self.store.update_config(run, msg["applied"])
            elif msg["cmd"] in ("pause", "resume"):
                self._set_live_status(run, "paused" if msg["cmd"] == "pause" else "running", now,
                                      f"{msg['cmd']} command {cid}")
            elif msg["cmd"] == "checkpoint":
                self.store.event(run, "checkpoint", answer)

    def _close_commands(self, run: str, why: str, now: float) -> None:
        """A run that ended answers nothing more: its open commands are rejected, visibly."""
        for cmd in self.store.open_commands(run):
            self.store.answer_command(cmd["cid"], "rejected", None, why, {}, now)
            self.store.event(run, "ack", {"cid": cmd["cid"], "cmd": cmd["cmd"], "state": "rejected", "step": None,
                                          "detail": why, "applied": {}})

    def _op_command(self, args: dict) -> dict:
        """Validate, record and forward a command; a known id returns its state (retries are safe)."""
        cid = check_command_id(args.get("cid"))
        known = self.store.command(cid)
        if known is not None:
            return known
        cmd = args.get("cmd")
        if cmd not in COMMANDS:
            raise ValueError(f"unknown command {str(cmd)[:40]!r}; one of {', '.join(COMMANDS)}")
        run = self.store.resolve(query_arg(args, "run", str))
        at_step = args.get("at_step")
        if at_step is not None:
            check_int(at_step, "at_step")
        return self._issue(cid, run, cmd, args.get("values"), at_step, args["who"])  # who: see Agent._sender

    def _issue(self, cid: str, run: str, cmd: str, values: Any, at_step: int | None, who: dict) -> dict:
        """Record a command with its sender, then refuse it visibly or forward it to the trainer.
        Humans (through ``_op_command``) and alert rules take this same path."""
        fwd: dict[str, Any] = {"at_step": at_step} if at_step is not None else {}
        reason = self._refusal(run, cmd, values, fwd, at_step)
        now = time.time()
        self.store.add_command(cid, run, cmd, fwd, who, now)
        asked = {"values": values} if isinstance(values, dict) else {}
        self.store.event(run, "command", {"cid": cid, "cmd": cmd, **asked, **fwd, "who": who})
        if reason is not None:
            answer = {"cid": cid, "cmd": cmd, "state": "rejected", "step": None, "detail": reason, "applied": {}}
            self.store.answer_command(cid, "rejected", None, reason, {}, now)
            self.store.event(run, "ack", answer)
        else:
            self._forward(self.store.command(cid))
        return self.store.command(cid)

    def _refusal(self, run: str, cmd: str, values: Any, fwd: dict, at_step: Any) -> str | None:
        """Why the agent refuses a command before it reaches the trainer, or None."""
        row = self.store.run_row(run)
        live = self.live.get(run)
        status = live.status if live is not None else row["status"]
        if row["kind"] != "train" or status not in ("running", "paused", "stale"):
            return f"run {run} is {status}: only a running run can be steered"
        if at_step is not None and cmd != "set":
            return "--at-step applies to set only"
        if cmd == "set":
            _, schema = self.store.config_and_schema(run)
            try:
                fwd["values"] = validate_changes(schema, values)
            except ValueError as exc:
                return str(exc)
        return None

    def _op_command_status(self, args: dict) -> dict:
        row = self.store.command(check_command_id(args.get("cid")))
        if row is None:
            raise LookupError(f"no command with id {args.get('cid')!r}")
        return row
