"""The one thread that runs every started link (``network.AgentLink``): it waits on all their sockets
at once (``zmq.select``) and gives each link a step when one of its sockets has something or it has
something due (an idle page, a run list to ask, an answer that did not come).

Why one thread: with a thread per agent, 64 agents were 64 Python threads waking up after each
``zmq_poll`` to take the GIL back, and the UI thread waited for it in a fifth to a third of its
samples (py-spy ``--native``, ``benchmarks/bench_load.py --app --agents 64``).  ZeroMQ sockets must
stay on the thread that made them: every link's sockets are made, used and closed here.
"""

from __future__ import annotations

import math
import os
import sys
import threading
import time
from typing import TYPE_CHECKING

import zmq

if TYPE_CHECKING:
    from .network import AgentLink

LONGEST_WAIT = 1.0  # seconds: the hub looks at every link at least this often
TURN_GAP = 0.005  # seconds from one turn to the next at least: what many agents sent meanwhile is taken in
# one turn (a turn for each page of 64 agents cost the thread twice what the pages did, bench_load.py --app);
# the store's writer joins 20 ms of pages into one write anyway (``store_writer.WRITE_GAP``)


class LinkHub:
    """The process's links thread; started by the first link, it ends once its last link has ended."""

    _hub: LinkHub | None = None
    _guard = threading.Lock()

    def __init__(self) -> None:
        self._adding: list[AgentLink] = []
        self._wake_r, self._wake_w = os.pipe()
        os.set_blocking(self._wake_r, False)
        os.set_blocking(self._wake_w, False)
        # the hub's thread only: what each link waits on and when it is due, kept from its last step (a turn
        # costs what the links that have something cost, not what all of them do: 64 agents)
        self._poller = zmq.Poller()
        self._poller.register(self._wake_r, zmq.POLLIN)
        self._due: dict[AgentLink, float] = {}
        self._watched: dict[AgentLink, list[zmq.Socket]] = {}
        self._owner: dict[zmq.Socket, AgentLink] = {}
        self._thread = threading.Thread(target=self._main, name="link hub", daemon=True)

    @classmethod
    def add(cls, link: AgentLink) -> None:
        """Run ``link`` on the hub (started if none runs)."""
        with cls._guard:
            hub = cls._hub
            if hub is None:
                hub = cls._hub = cls()
                hub._thread.start()
            hub._adding.append(link)
            hub._wake()

    @classmethod
    def wake(cls) -> None:
        """Have the hub look at its links now (a link stopped, pages written, an answer of the store
        came): from any thread."""
        with cls._guard:
            if cls._hub is not None:
                cls._hub._wake()

    def _wake(self) -> None:
        try:
            os.write(self._wake_w, b"\0")
        except BlockingIOError:  # the pipe is full: a wake-up is pending already
            pass

    # --- the hub's thread ---------------------------------------------------------------------------

    def _main(self) -> None:
        try:
            turned = 0.0
            while self._take_new():
                pause = turned + TURN_GAP - time.monotonic()
                if pause > 0:
                    time.sleep(pause)
                turned = time.monotonic()
                wait = min(self._due.values(), default=math.inf) - turned
                ready = self._poller.poll(max(0.0, min(wait, LONGEST_WAIT)) * 1000)
                turn = {self._owner[s] for s, _ in ready if s in self._owner}
                if any(s == self._wake_r for s, _ in ready):  # rare (a stop, pages written, the store's answer)
                    self._drain()
                    turn = set(self._due)  # every link looks
                now = time.monotonic()
                turn.update(link for link, due in self._due.items() if due <= now)
                for link in turn:
                    self._step(link, now)
        finally:
            os.close(self._wake_r)
            os.close(self._wake_w)

    def _drain(self) -> None:
        try:
            while os.read(self._wake_r, 4096):
                pass
        except BlockingIOError:
            pass

    def _take_new(self) -> bool:
        """Open the links added since the last turn; False (and the hub ends) once no link is left."""
        with self._guard:
            adding, self._adding = self._adding, []
            if not adding and not self._due:
                LinkHub._hub = None
                return False
        for link in adding:
            self._step(link, time.monotonic(), opening=True)
        return True

    def _step(self, link: AgentLink, now: float, opening: bool = False) -> None:
        """One link's turn; a link that stopped, failed or broke is closed and leaves the hub (a bug is
        reported as a thread's uncaught exception would be, and said in the link's health)."""
        try:
            if not link.stopped():
                if opening:
                    link.open(now)
                link.step(now)
                self._watch(link, link.sockets())
                self._due[link] = link.due(now)
                return
        except Exception as exc:
            link.broke(exc)
            if not link.quiet(exc):
                threading.excepthook(threading.ExceptHookArgs((type(exc), exc, exc.__traceback__, self._thread)))
        self._watch(link, [])
        self._due.pop(link, None)
        try:
            link.close()
        except Exception:  # closing sockets of a broken link: said in its health already
            print(f"pilothouse: closing the link to {link.url} failed", file=sys.stderr)

    def _watch(self, link: AgentLink, sockets: list[zmq.Socket]) -> None:
        """Poll ``sockets`` for ``link`` from now on, and no other of its sockets (a socket it closed, too:
        a query unanswered is asked again on a fresh one)."""
        old = self._watched.get(link, [])
        if old == sockets:
            return
        for sock in old:
            if sock not in sockets:
                self._poller.unregister(sock)
                del self._owner[sock]
        for sock in sockets:
            if sock not in old:
                self._poller.register(sock, zmq.POLLIN)
                self._owner[sock] = link
        if sockets:
            self._watched[link] = sockets
        else:
            self._watched.pop(link, None)
