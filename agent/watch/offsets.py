"""What an agent holds of a watched logdir, kept on disk so a restarted watcher neither sends a
record twice under another number nor misses one.

Per run: ``acked``, the last seq the agent acknowledged and every event file's offset just past
it; ``chunks``, what was queued since, each ``[last_seq, file, offset]`` (records of one file
only), written before the records are queued.  A restarted watcher learns the seq the agent holds
(its welcome) and finds the file offsets that go with it, even when the agent stored a batch whose
acknowledgement never came back.  One owner-only JSON file per (agent, logdir), replaced whole and
synced, and locked while a watcher uses it.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import secrets
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pilothouse.security import owned_file, private_dir


class StateError(RuntimeError):
    """The state file is held by another watcher, or cannot be used; the text says which."""


@dataclass
class RunState:
    seq: int = 0  # acknowledged by the agent
    offsets: dict[str, int] = field(default_factory=dict)  # event file name -> offset just past ``seq``
    chunks: list[list] = field(default_factory=list)  # [last seq, file, offset], queued after ``seq``
    plugins: dict[str, str] = field(default_factory=dict)  # tag -> plugin, as the run's events named them
    # the run's secret (Run.token): a restarted watcher proves with it that the run is its own
    token: str = field(default_factory=lambda: secrets.token_hex(16))

    def queued(self, last_seq: int, name: str, offset: int) -> None:
        self.chunks.append([last_seq, name, offset])

    def acked(self, seq: int) -> bool:
        """Fold the chunks the agent now holds into ``offsets``; True if any was."""
        folded = bool(self.chunks) and self.chunks[0][0] <= seq
        while self.chunks and self.chunks[0][0] <= seq:
            last, name, offset = self.chunks.pop(0)
            self.seq, self.offsets[name] = last, offset
        return folded

    def resume(self, held: int) -> tuple[str | None, int]:
        """Continue where the agent holds records up to ``held``: ``offsets`` then say where each file
        goes on, and the file returned must be read first, its next ``skip`` records passed over (the
        agent stored them, their acknowledgement was lost).  ValueError if ``held`` is not a seq this
        state can have led to."""
        last = self.chunks[-1][0] if self.chunks else self.seq
        if not self.seq <= held <= last:
            raise ValueError(f"the agent holds records up to {held}, the watch state has {self.seq} acknowledged "
                             f"and up to {last} sent")
        self.acked(held)
        name = self.chunks[0][1] if self.chunks and held > self.seq else None
        self.chunks.clear()
        return name, held - self.seq


class WatchState:
    """The state file of one (agent, logdir): loaded at start, saved after each poll that changed it."""

    def __init__(self, directory: Path, agent: str, logdir: Path):
        key = hashlib.sha256(f"{agent}\0{logdir}".encode()).hexdigest()[:20]
        private_dir(directory)  # the user's own: a folder or lock file another user made first is refused
        self.path = directory / f"{key}.json"
        self.agent, self.logdir = agent, str(logdir)
        lock = owned_file(directory / f"{key}.lock", os.O_WRONLY | os.O_APPEND | os.O_CREAT)
        self._lock = open(lock, "a")  # noqa: SIM115 (held while watching)
        try:
            fcntl.flock(self._lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            self._lock.close()
            raise StateError(f"{logdir} is already being watched into {agent} by another process "
                             f"(it holds {self.path.with_suffix('.lock')})") from None
        self.runs: dict[str, RunState] = self._load()

    def _load(self) -> dict[str, RunState]:
        try:
            data: Any = json.loads(self.path.read_text())
        except FileNotFoundError:
            return {}
        except (OSError, ValueError) as exc:
            raise StateError(f"cannot read the watch state {self.path}: {exc}; move it away to start over "
                             "(runs the agent already has will then be refused, not sent twice)") from None
        return {run: RunState(r["seq"], r["offsets"], r["chunks"], r.get("plugins", {}),
                              r.get("token") or secrets.token_hex(16))
                for run, r in data.get("runs", {}).items()}

    def save(self) -> None:
        data = {"agent": self.agent, "logdir": self.logdir,
                "runs": {run: vars(r) for run, r in self.runs.items()}}
        tmp = self.path.with_suffix(".tmp")
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as f:
            json.dump(data, f, separators=(",", ":"))
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, self.path)

    def close(self) -> None:
        self._lock.close()
