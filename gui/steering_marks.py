"""Steering on the charts, in plain Python: every command a run applied (a ``set``, a pause, a
resume, a checkpoint, a stop) becomes a mark at the step it took effect, saying what changed and
who asked.

Why from the journal's events: the agent writes a ``command`` event when one is asked (with its
sender, ``who``) and an ``ack`` event when the trainer answers (the step, the values in effect);
the app keeps both in its store and gets both live, so a mark needs nothing the Events pane does
not already have.  The sentences are ``pilothouse.event_text``'s, the ones `pilothouse events`
prints.  The agent's ack of a ``set`` carries the settings it replaced (``before``, from the run's
config as the agent held it): the mark says ``lr 0.0003 → 0.0001``; for a setting not in the config
before, the value an earlier ``set`` of the run applied, else ``lr=0.0001``.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from pilothouse.event_text import ASKED_KEPT, sender, sentence, value_text
from pilothouse.text import printable

# what a mark says for an applied command that changes no value (a set says its values)
DONE = {"pause": "paused", "resume": "resumed", "checkpoint": "checkpoint saved", "stop": "stopping"}
_UNKNOWN = object()  # a set value whose previous value no event says


@dataclass(frozen=True)
class Steer:
    """One applied command of a run: where it took effect, what changed, who asked."""

    step: int
    time: float  # when the agent journaled the answer: the mark's x on a wall-time axis
    what: str  # ``lr 0.0003 → 0.0001``, ``paused``, ``checkpoint saved``
    who: str  # ``alice@laptop (cli)``, ``alert rule nan-loss``
    sentence: str  # the journal's sentence for the answer, as `pilothouse events` prints it


class SteeringLog:
    """One run's events in journal order, turned into its applied commands (``steers``).  Fed the
    stored events when the charts are built, then the live ones: an answer finds its command (and
    so who asked) among the events before it."""

    def __init__(self) -> None:
        self.steers: list[Steer] = []
        self._asked: dict[str, Mapping] = {}  # cid -> its command event, for the answer
        self._values: dict[str, Any] = {}  # setting -> the value the last applied set put in effect

    def add(self, body: Any) -> Steer | None:
        """An event of the run; the mark when it is an applied command's answer."""
        if not isinstance(body, Mapping) or not isinstance(body.get("cid"), str):
            return None
        if body.get("event") == "command":
            if len(self._asked) >= ASKED_KEPT:
                self._asked.pop(next(iter(self._asked)))
            self._asked[body["cid"]] = body
            return None
        step, cmd = body.get("step"), body.get("cmd")
        if body.get("event") != "ack" or body.get("state") != "applied" or not isinstance(cmd, str) \
                or not isinstance(step, int) or isinstance(step, bool):
            return None
        asked = self._asked.get(body["cid"])
        stamp = body.get("time")
        who = sender(asked.get("who") if asked else None)  # text a peer sent: printable, as sentences are
        steer = Steer(step, float(stamp) if isinstance(stamp, (int, float)) else float("nan"),
                      printable(self._what(cmd, body)), printable(who), sentence(body, asked))
        self.steers.append(steer)
        return steer

    def _what(self, cmd: str, body: Mapping) -> str:
        """What changed: each value a set put in effect (from the one before it, where known)."""
        applied = body.get("applied")
        if cmd != "set" or not isinstance(applied, Mapping) or not applied:
            return DONE.get(cmd, cmd)
        before = body.get("before") if isinstance(body.get("before"), Mapping) else {}
        changes = []
        for key, value in applied.items():
            key = str(key)
            new = value_text(value)
            old = before[key] if key in before else self._values.get(key, _UNKNOWN)
            changes.append(f"{key}={new}" if old is _UNKNOWN else f"{key} {value_text(old)} → {new}")
            self._values[key] = value
        return ", ".join(changes)


def steers_of(bodies: Iterable[Any]) -> SteeringLog:
    """A run's stored events, oldest first, read into a log that live events then extend."""
    log = SteeringLog()
    for body in bodies:
        log.add(body)
    return log
