"""The user's running local agents, watched on a thread of their own for the app.

Why: ``pilothouse gui`` with no ``--agent`` follows the agents this user runs on this machine, as the
CLI finds them (``pilothouse.local_agents``): the demo's agent on a random port, a second demo, the
agent ``ph.init`` started in the background.  Agents that start while the app runs must appear too,
so their records are read again every few seconds.  Reading them is file I/O (and removes stale
records), which never runs on the Qt thread: this thread reads, ``on_change`` says what it found.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable

from pilothouse.local_agents import LocalAgent, recorded
from pilothouse.security import SecurityError
from pilothouse.wire.urls import check_url

EVERY = 2.0  # seconds between two reads of the records: an agent started now shows within this
log = logging.getLogger("pilothouse.gui")


class LocalAgentsWatch:
    """Calls ``on_change(urls)`` on its own thread with the URLs of the user's running agents, oldest
    first: once at the start, then whenever the set changes."""

    def __init__(self, on_change: Callable[[list[str]], None], every: float = EVERY,
                 read: Callable[[], list[LocalAgent]] = recorded):
        self.on_change = on_change
        self.every = every
        self.read = read
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        if self._thread is None:
            self._thread = threading.Thread(target=self._main, name="local agents", daemon=True)
            self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(2.0)

    def _main(self) -> None:
        last: list[str] | None = None
        while not self._stop.is_set():
            urls = self.urls()
            if urls is not None and urls != last:
                last = urls
                self.on_change(urls)
            self._stop.wait(self.every)

    def urls(self) -> list[str] | None:
        """The recorded agents' URLs (those a link can follow); None when the records cannot be read
        now (then the agents followed stay as they are: a passing error must not drop them)."""
        try:
            agents = self.read()
        except (OSError, SecurityError) as exc:  # e.g. a runtime dir another user can write to: refused
            log.warning("cannot read your local agents' records: %s", exc)
            return None
        urls = []
        for agent in agents:
            try:
                urls.append(check_url(agent.url))
            except ValueError:
                continue
        return list(dict.fromkeys(urls))
