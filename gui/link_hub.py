"""The one thread that runs every started link (``network.AgentLink``): it waits on all their sockets
at once (``zmq.select``) and gives each link a step when one of its sockets has something or it has
something due (an idle page, a run list to ask, an answer that did not come).

Why one thread: with a thread per agent, 64 agents were 64 Python threads waking up after each
``zmq_poll`` to take the GIL back, and the UI thread waited for it in a fifth to a third of its
samples (py-spy ``--native``, ``benchmarks/bench_load.py --app --agents 64``).  ZeroMQ sockets must
stay on the thread that made them: every link's sockets are made, used and closed here.
"""

from __future__ import annotations

import os
import sys
import threading
import time
from typing import TYPE_CHECKING

import zmq

if TYPE_CHECKING:
    from .network import AgentLink

LONGEST_WAIT = 1.0  # seconds: the hub looks at every link at least this often


class LinkHub:
    """The process's links thread; started by the first link, it ends once its last link has ended."""

    _hub: LinkHub | None = None
    _guard = threading.Lock()

    def __init__(self) -> None:
        self._adding: list[AgentLink] = []
        self._links: list[AgentLink] = []
        self._wake_r, self._wake_w = os.pipe()
        os.set_blocking(self._wake_r, False)
        os.set_blocking(self._wake_w, False)
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
            while self._take_new():
                now = time.monotonic()
                sockets: dict[zmq.Socket, AgentLink] = {}
                due = now + LONGEST_WAIT
                for link in self._links:
                    for sock in link.sockets():
                        sockets[sock] = link
                    due = min(due, link.due(now))
                ready = zmq.select([*sockets, self._wake_r], [], [], max(0.0, due - time.monotonic()))[0]
                woke = self._wake_r in ready  # rare (a stop, pages written, the store's answer): every link looks
                if woke:
                    while True:
                        try:
                            if not os.read(self._wake_r, 4096):
                                break
                        except BlockingIOError:
                            break
                woken = {sockets[s] for s in ready if s in sockets}
                now = time.monotonic()
                for link in list(self._links):
                    if woke or link in woken or now >= link.due(now):
                        self._step(link, now)
        finally:
            os.close(self._wake_r)
            os.close(self._wake_w)

    def _take_new(self) -> bool:
        """Open the links added since the last turn; False (and the hub ends) once no link is left."""
        with self._guard:
            adding, self._adding = self._adding, []
            if not adding and not self._links:
                LinkHub._hub = None
                return False
        for link in adding:
            self._links.append(link)
            self._step(link, time.monotonic(), opening=True)
        return True

    def _step(self, link: AgentLink, now: float, opening: bool = False) -> None:
        """One link's turn; a link that stopped, failed or broke is closed and leaves the hub (a bug is
        reported as a thread's uncaught exception would be, and said in the link's health)."""
        try:
            if link.stopping():
                ended = True
            else:
                if opening:
                    link.open(now)
                link.step(now)
                ended = False
        except Exception as exc:
            ended = True
            link.broke(exc)
            if not link.quiet(exc):
                threading.excepthook(threading.ExceptHookArgs((type(exc), exc, exc.__traceback__, self._thread)))
        if ended:
            self._links.remove(link)
            try:
                link.close()
            except Exception:  # closing sockets of a broken link: said in its health already
                print(f"pilothouse: closing the link to {link.url} failed", file=sys.stderr)
