"""Which agents the MCP server asks, and which of them holds a run: as the CLI finds them.

The server is a local process of the owner and reaches agents with the owner's keys: the URLs given
with ``--agent`` (or $PILOTHOUSE_AGENT), else the user's agents on this machine, looked up again at
every call (``pilothouse.local_agents``: agents start and stop while a model's session lasts hours).
A tool's ``agent`` argument may only name one of those: a model cannot point the owner's keys at an
address of its choosing.
"""

from __future__ import annotations

import socket
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

from pilothouse.client import AgentError, AgentUnavailable, Client
from pilothouse.local_agents import NOT_FOUND, QUICK, recorded
from pilothouse.security import Keyring
from pilothouse.text import printable
from pilothouse.wire.urls import DEFAULT_URL


class ToolFailure(Exception):
    """What a tool answers as an error result (``is_error``): a sentence for the model, never a traceback."""


@dataclass
class Answer:
    """A tool's answer: a short sentence, and the data (plain JSON) as structured content."""

    text: str
    data: dict[str, Any] = field(default_factory=dict)
    error: bool = False


class Reach:
    """The agents the server asks and the keys it asks them with."""

    def __init__(self, urls: list[str], keys: Keyring, timeout: float = 5.0):
        self.given = list(dict.fromkeys(urls))  # empty: the user's local agents, found at each call
        self.keys = keys
        self.timeout = timeout

    def urls(self) -> list[str]:
        if self.given:
            return self.given
        mine = [a.url for a in recorded() if a.url != DEFAULT_URL]
        return [DEFAULT_URL, *mine] if _listening(DEFAULT_URL) else mine

    def probe_timeout(self) -> float:
        """Seconds an agent has to answer while the one holding a run is looked for: the user's own
        agents answer at once or are not there (the default address often has none)."""
        return self.timeout if self.given else QUICK

    @contextmanager
    def client(self, url: str, timeout: float | None = None) -> Iterator[Client]:
        """A client for one call: each tool call may run on another worker thread, and a ``Client``
        stays on the thread that made it."""
        with Client(url, timeout=self.timeout if timeout is None else timeout, keys=self.keys) as client:
            yield client

    def choose(self, agent: str | None) -> list[str]:
        """The agents to ask: all of them, or the one ``agent`` names (one of them, or a refusal)."""
        urls = self.urls()
        if not urls:
            raise ToolFailure(f"no agent of yours runs on this machine and none answers at {DEFAULT_URL}: start one "
                              "(`pilothouse agent`, or a training script's ph.init starts one), or give this server "
                              "the agents to read (`pilothouse mcp --agent URL`)")
        if agent is None:
            return urls
        if agent not in urls:
            raise ToolFailure(printable(f"agent {agent!r} is not one this server reaches ({', '.join(urls)}); "
                                        "leave agent out to ask them all"))
        return [agent]

    def locate(self, run: str, agent: str | None = None) -> tuple[str, str]:
        """(agent URL, run id) of run ``run`` (an id, or a name: the live run of that name), asked of
        every agent or of ``agent``.  None holds it, or several do: a ToolFailure saying so."""
        if not isinstance(run, str) or not run.strip():
            raise ToolFailure("run must be a run id or name (list_runs lists them)")
        urls = self.choose(agent)
        hits: list[tuple[str, str]] = []
        silent: list[str] = []
        for url in urls:
            with self.client(url, self.probe_timeout() if len(urls) > 1 else self.timeout) as client:
                try:
                    hits.append((url, client.resolve(run)))
                except AgentUnavailable as exc:
                    silent.append(f"{url}: {exc}")
                except AgentError as exc:
                    if NOT_FOUND not in str(exc):  # a name several runs share: the agent says which to give
                        raise ToolFailure(printable(f"{exc} (agent {url})")) from None
        if len(hits) > 1:
            raise ToolFailure(printable(f"run {run!r} is on {len(hits)} agents ({', '.join(u for u, _ in hits)}): "
                                        "pass agent=URL to say which"))
        if not hits:
            asked = ", ".join(urls)
            why = f"; no answer from {'; '.join(silent)}" if silent and (self.given or len(silent) == len(urls)) else ""
            raise ToolFailure(printable(f"no run with id or name {run!r} on {asked}{why}; list_runs lists the runs"))
        return hits[0]


def _listening(url: str) -> bool:
    """Whether something takes connections at the default address: nothing there (the usual case when the
    user's agents run elsewhere) is known at once, not after a probe's timeout on every call."""
    parts = urlsplit(url)
    try:
        socket.create_connection((parts.hostname, parts.port), timeout=0.2).close()
        return True
    except OSError:
        return False
