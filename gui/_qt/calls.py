"""Client calls off the UI thread: the one way a panel asks an agent something and hears back.

A call runs on a worker thread with its own ``Client`` (a socket belongs to the thread that made
it); its outcome comes back as the ``answered`` signal, which Qt delivers on the UI thread.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

from PySide6.QtCore import QObject, Signal

from pilothouse.client import CALL_ERRORS, Client

CALL_TIMEOUT = 5.0  # seconds to wait for the agent itself; a command's own wait comes on top


class Calls(QObject):
    answered = Signal(object, bool, object)  # the caller's tag, ok, the result or the error text

    def call(self, url: str, fn: Callable[[Client], Any], tag: Any = None) -> None:
        """Run ``fn(client)`` for the agent at ``url`` on a worker thread."""
        threading.Thread(target=self._work, args=(url, fn, tag), daemon=True, name="pilothouse-call").start()

    def _work(self, url: str, fn: Callable[[Client], Any], tag: Any) -> None:
        try:
            with Client(url, timeout=CALL_TIMEOUT) as client:
                ok, result = True, fn(client)
        except CALL_ERRORS as exc:
            ok, result = False, str(exc)
        try:
            self.answered.emit(tag, ok, result)
        except RuntimeError:  # the window or panel went away while the agent was answering
            pass
