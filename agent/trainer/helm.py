"""Commands from the agent, applied on the training thread at step boundaries.

The outbox thread drops commands into the run's ``Inbox``; ``Run.sync`` takes them there at a
step boundary and applies them here, and the helm states in the inbox whether the run is paused
(the heartbeat reports it).  In a multi-rank job every rank applies the same list at the same
step (rank 0 takes, a broadcast shares), so the state below stays identical on all ranks; only
rank 0 acknowledges.
"""

from __future__ import annotations

import os
import types
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, NamedTuple

from pilothouse.text import fmt_value
from pilothouse.trainer.inbox import Inbox
from pilothouse.wire.tuning import past_step, validate_changes

Ack = Callable[[dict[str, Any]], None]


@dataclass(frozen=True)
class Control:
    """What the training loop must do after ``run.sync``."""

    checkpoint: bool = False
    stop: bool = False
    changes: Mapping[str, Any] = field(default_factory=lambda: types.MappingProxyType({}))


NOTHING = Control()


class Effect(NamedTuple):
    """What a change callback reports for one key: the value the training code now uses and,
    where it differs from the request, why (``Effect(4.5e-4, "with the schedule, at this step")``)."""

    value: Any
    why: str = ""


class Refused(ValueError):
    """Raised by a change callback: the training code cannot take this value now (the reason is shown)."""


ChangeCallback = Callable[[dict[str, Any]], Mapping[str, Any] | None]
Saver = Callable[[int], "str | os.PathLike | None"]


class Helm:
    def __init__(self, config: dict[str, Any], schema: dict[str, dict], inbox: Inbox, ack: Ack | None,
                 note_checkpoint: Callable[[str, int], None]):
        self.config = config
        self.schema = schema
        self.inbox = inbox
        self.stopping: int | None = None  # the step a stop was applied at: no pause holds the run after it
        self.scheduled: list[tuple[int, dict]] = []
        self.checkpoints: list[tuple[str, int]] = []  # requests (cid, step) not yet answered
        self.callbacks: list[tuple[ChangeCallback, frozenset[str] | None]] = []  # (callback, its keys or all)
        self.saver: Saver | None = None  # saves a checkpoint now, at a step boundary (even while paused)
        self._ack = ack
        self._note_checkpoint = note_checkpoint  # an unasked checkpoint travels as a durable record

    @property
    def paused(self) -> bool:
        return self.inbox.paused

    @paused.setter
    def paused(self, value: bool) -> None:
        """Kept in the inbox, where the outbox thread's heartbeat reads it."""
        self.inbox.paused = value

    def idle(self) -> bool:
        return not (self.inbox.pending() or self.scheduled or self.paused or self.checkpoints)

    def expire_checkpoints(self, step: int) -> None:
        """At the next sync, a request the training code did not answer gets a clear rejection."""
        for cid, asked_at in self.checkpoints:
            self.ack(cid, "checkpoint", "rejected", step, f"checkpoint asked at step {asked_at} was not saved by "
                     "the training code (call pilothouse.torch.save_checkpoint or run.checkpoint_saved)")
        self.checkpoints.clear()

    def apply(self, commands: list[dict], step: int) -> Control:
        """Apply commands in order.  A checkpoint is saved here by the registered saver (paused or
        not); without one the loop is told to save, and while paused it is saved on resume."""
        stop = checkpoint = False
        changes: dict[str, Any] = {}
        for cmd in commands:
            kind, cid = cmd["cmd"], cmd["cid"]
            # the state changes before the ack goes out: a heartbeat sent between the two (from the
            # outbox thread) must not report the old state after the ack and undo it at the agent
            if kind == "pause" and self.stopping is not None:
                self.ack(cid, kind, "rejected", step, f"the run is stopping (since step {self.stopping}): "
                         "a pause would hold it")
            elif kind == "pause":
                was, self.paused = self.paused, True
                self.ack(cid, kind, "applied", step, f"paused at step {step}" if not was else "already paused")
            elif kind == "resume":
                was, self.paused = self.paused, False
                self.ack(cid, kind, "applied", step, f"resumed at step {step}" if was else "was not paused")
            elif kind == "stop":
                stop = True
                if self.stopping is None:
                    self.stopping = step
                self.paused = False  # a paused run must get out of sync() to stop
                self.ack(cid, kind, "applied", step, f"stopping at step {step}")
            elif kind == "checkpoint":
                self.checkpoints.append((cid, step))
                checkpoint = self._checkpoint(cid, step) or checkpoint
            elif kind != "set":
                self.ack(cid, str(kind), "rejected", step, f"unknown command {str(kind)[:40]!r}")
            else:
                at = cmd.get("at_step")
                if at is not None and at < step:
                    self.ack(cid, kind, "rejected", step, past_step(at, step))
                elif at is not None and at > step:
                    self.scheduled.append((at, cmd))
                    self.ack(cid, kind, "scheduled", step, f"scheduled for step {at}")
                else:
                    changes.update(self._set(cmd, step))
        for at, cmd in [s for s in self.scheduled if s[0] <= step]:
            self.scheduled.remove((at, cmd))
            changes.update(self._set(cmd, step))
        if not (stop or checkpoint or changes):
            return NOTHING
        return Control(checkpoint, stop, types.MappingProxyType(changes))

    def hold(self, first: Control, take: Callable[[], list[dict]], step: int) -> Control:
        """Block while paused, applying what arrives; returns everything asked meanwhile."""
        ctl = first
        while self.paused:
            more = self.apply(take(), step)
            if more is not NOTHING:
                ctl = Control(ctl.checkpoint or more.checkpoint, ctl.stop or more.stop,
                              types.MappingProxyType({**ctl.changes, **more.changes}))
        return ctl

    def _checkpoint(self, cid: str, step: int) -> bool:
        """Save now if a saver can; True while the request still waits for the training loop."""
        if self.saver is not None:
            path = self.saver(step)
            if path is not None:
                self.saved(os.fspath(path), step)
                return False
        if self.paused:
            self.ack(cid, "checkpoint", "scheduled", step, f"paused at step {step}: saved when the run resumes "
                     "(register a save function with run.on_checkpoint to save while paused)")
        return True

    def _set(self, cmd: dict, step: int) -> dict[str, Any]:
        """All or nothing: a callback that refuses undoes the callbacks before it and the config."""
        try:
            values = validate_changes(self.schema, cmd.get("values"))
        except ValueError as exc:
            self.ack(cmd["cid"], "set", "rejected", step, str(exc))
            return {}
        before = {k: self.config[k] for k in values if k in self.config}
        self.config.update(values)
        effects: dict[str, Effect] = {k: Effect(v) for k, v in values.items()}
        done: list[tuple[ChangeCallback, dict[str, Any]]] = []
        try:
            for callback, keys in self.callbacks:
                mine = {k: v for k, v in values.items() if keys is None or k in keys}
                if mine:
                    done.append((callback, mine))  # before the call: one that refuses half-way is put back too
                    reported = callback(dict(mine)) or {}
                    effects.update({k: r if isinstance(r, Effect) else Effect(r) for k, r in reported.items()})
        except ValueError as exc:
            for key in values:
                if key in before:
                    self.config[key] = before[key]
            for callback, mine in reversed(done):  # put back what was already changed
                old = {k: before[k] for k in mine if k in before}
                if old:
                    callback(old)
            self.ack(cmd["cid"], "set", "rejected", step, f"not applied: {exc}")
            return {}
        # shown as the CLI shows numbers: 0.2, not 0.20000000298023224 read back from a float32 tensor
        text = " ".join(f"{k}={fmt_value(e.value) if type(e.value) is float else repr(e.value)}"
                        + (f" ({e.why})" if e.why else "") for k, e in effects.items())
        self.ack(cmd["cid"], "set", "applied", step, f"{text} applied at step {step}",
                 {k: e.value for k, e in effects.items()}, config=values)
        return values

    def saved(self, path: str, step: int) -> None:
        """The training code saved a checkpoint: answer every open request with its path."""
        if not self.checkpoints:
            self._note_checkpoint(path, step)
            return
        requests, self.checkpoints = self.checkpoints, []
        for cid, _ in requests:
            self.ack(cid, "checkpoint", "applied", step, f"checkpoint saved at step {step}: {path}", {"path": path})

    def ack(self, cid: str, cmd: str, state: str, step: int, detail: str,
            applied: dict[str, Any] | None = None, config: dict[str, Any] | None = None) -> None:
        """``applied``: the values in effect (shown); ``config``: the settings the run's config now holds."""
        if self._ack is not None:
            answer = {"cid": cid, "cmd": cmd, "state": state, "step": step, "detail": detail, "applied": applied or {}}
            if config is not None:
                answer["config"] = config
            self._ack(answer)

    def handled(self) -> set[str] | None:
        """The keys some callback declared it applies (None: a callback takes every key)."""
        keys: set[str] = set()
        for _, mine in self.callbacks:
            if mine is None:
                return None
            keys |= mine
        return keys
