"""``pilothouse gui`` with no ``--agent``: the window follows the user's running local agents.

The records are read on ``LocalAgentsWatch``'s thread; what it found comes here as a signal, on the
UI thread, where the window follows each new agent for this session (not remembered: a demo's agent
on a random port must not be chased, dead, by every later start) and stops following one whose
record went (it stopped; its runs stay browsable).  An agent the user removed by hand is not taken
back while its record stays; one the user remembers (Agents → Add agent) is left alone.
"""

from __future__ import annotations

from typing import Protocol

from PySide6.QtCore import QObject, Signal

from ..local_watch import EVERY, LocalAgentsWatch


class Agents(Protocol):
    """The window's side: the agents it follows, and following or not one of them."""

    def followed(self) -> list[str]: ...
    def remembered(self, url: str) -> bool: ...
    def follow(self, url: str, remember: bool = True) -> None: ...
    def unfollow(self, url: str) -> None: ...
    def agents_changed(self) -> None: ...


class LocalFollow(QObject):
    found = Signal(object)  # the URLs recorded now (emitted on the watch's thread)

    def __init__(self, parent: QObject, agents: Agents, every: float = EVERY):
        super().__init__(parent)
        self.agents = agents
        self.mine: set[str] = set()  # followed because recorded: unfollowed when their record goes
        self.dropped: set[str] = set()  # removed by the user: not followed again this session
        self.found.connect(self._on_found)
        self.watch = LocalAgentsWatch(self._emit, every)
        self.watch.start()

    def _emit(self, urls: list[str]) -> None:
        try:
            self.found.emit(urls)
        except RuntimeError:  # the window went away while the records were read
            pass

    def _on_found(self, urls: list[str]) -> None:
        followed = set(self.agents.followed())
        changed = False
        for url in urls:
            if url not in followed and url not in self.dropped:
                self.agents.follow(url, remember=False)
                self.mine.add(url)
                changed = True
        for url in sorted(self.mine - set(urls)):
            self.mine.discard(url)
            if url in self.agents.followed() and not self.agents.remembered(url):
                self.agents.unfollow(url)
                changed = True
        if changed:
            self.agents.agents_changed()

    def drop(self, url: str) -> None:
        """The user stopped following ``url``: a record of it does not bring it back."""
        self.dropped.add(url)
        self.mine.discard(url)

    def close(self) -> None:
        self.found.disconnect()
        self.watch.stop()
