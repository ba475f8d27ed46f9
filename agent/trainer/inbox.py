"""Where commands from the agent wait between the outbox thread and the helm, exactly once.

The outbox thread puts what it receives here and tells it what the helm answered; the helm takes
commands at a step boundary and states here whether the run is paused, which the outbox thread's
heartbeat reports.  Neither knows the other: both know this, so the wiring runs one way.

A command id is handed to the helm once.  The agent resends a command until its answer arrives, so a
resend of one in hand is ignored, and a resend of one answered (the answer was lost) gets the same
answer again, never a second application.
"""

from __future__ import annotations

import collections
import threading
from typing import Any


class Inbox:
    def __init__(self) -> None:
        self._commands: collections.deque[dict[str, Any]] = collections.deque()
        self._wake = threading.Event()
        self._answered: dict[str, dict[str, Any]] = {}  # cid -> its final answer, to answer a resend again
        self._taken: set[str] = set()  # cids handed to the helm and not answered yet
        # the helm's state, set before its ack is queued: a heartbeat sent in between never reports
        # the old state after the ack and undoes it at the agent
        self.paused = False

    # --- the outbox thread ---------------------------------------------------------------------

    def receive(self, command: dict[str, Any]) -> dict[str, Any] | None:
        """A ``cmd`` from the agent: the earlier answer to send again, or None (queued for the helm,
        or ignored: in hand already, or without a command id)."""
        cid = command.get("cid")
        if not isinstance(cid, str):
            return None
        if cid in self._answered:
            return self._answered[cid]
        if cid not in self._taken:
            self._taken.add(cid)
            self._commands.append(command)
            self._wake.set()
        return None

    def answered(self, answer: dict[str, Any]) -> None:
        """The helm's answer is going out: a final one (not "scheduled") is kept for resends."""
        cid = answer["cid"]
        if cid is not None and answer["state"] != "scheduled":
            self._answered[cid] = answer
            self._taken.discard(cid)

    # --- the training thread -------------------------------------------------------------------

    def pending(self) -> bool:
        return bool(self._commands)

    def take(self, wait: float = 0.0) -> list[dict[str, Any]]:
        """The commands received so far, in order (waiting up to ``wait`` s for one when there is none)."""
        if wait and not self._commands:
            self._wake.wait(wait)
        self._wake.clear()
        taken = []
        while self._commands:
            taken.append(self._commands.popleft())
        return taken
