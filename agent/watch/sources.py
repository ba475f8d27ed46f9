"""A watched run's files, each read from an offset into records as a trainer queues them.

Why one shape for every file: a run may be fed by several files of several frameworks (TensorBoard
events, a JSON-lines log of scalars, a file of rollouts per step, TRL's completion parquet files), and
the follower keeps for each of them the offset the agent holds, so a restarted watcher neither sends
twice nor misses.  A source reads from its offset only what is whole:

- ``event_file.EventSource``: TensorBoard records, through the run's ``Summaries`` (there, as it
  needs tensorboard's reader; the rest of the watcher does not).
- ``LineSource``: lines appended to a JSON-lines file (a metrics log, prime-rl's traces); a last line
  with no newline yet is read again once it has one.
- ``WholeSource``: a file a framework writes whole at a step (verl's and NeMo RL's ``{step}.jsonl``, TRL's
  ``completions_NNNNN.parquet``, ...): read once it has settled (SETTLE_S without a change; at once by
  ``import``), all of it.  A file that changes after it was read is said once; what it held was sent
  and is not sent again.

Why a source stops rather than skips at damage (a line that is not JSON, a file not of its format):
what follows may be misread too; the follower says why, once.

What a line or a file means is its format's (``pilothouse.watch.formats``): rows of scalars and of
rollouts at steps, made into records here.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from pilothouse.watch.points import MetricRecords, rollout_parts
from pilothouse.wire.checks import INT64_MAX
from pilothouse.wire.records import REC_ROLLOUTS

SETTLE_S = 2.0  # a whole-file source unchanged this long is written (verl dumps it from a thread)
READ_LINES = 20_000  # lines read from one file per poll
MAX_LINE_BYTES = 64 << 20  # one JSON line: a long agentic episode, not a runaway file


@dataclass
class Read:
    """What one read of a source gave: records in the trainer's queue form, config, lines to say."""

    records: list[tuple] = field(default_factory=list)
    config: dict[str, Any] = field(default_factory=dict)
    said: list[str] = field(default_factory=list)


@dataclass
class Parsed:
    """What a format made of some lines or a file: scalars and rollout rows at steps."""

    metrics: list[tuple[int, float, dict[str, float]]] = field(default_factory=list)  # (step, wall time, values)
    rollouts: list[tuple[int, float, list[dict]]] = field(default_factory=list)  # (step, wall time, rows)
    said: list[str] = field(default_factory=list)


class LineFormat(Protocol):
    """A JSON-lines format: what its decoded lines (one object each, with its offset in the file) hold."""

    name: str

    def lines(self, path: Path, objects: list[tuple[int, Any]]) -> Parsed: ...


class FileFormat(Protocol):
    """A format of files written whole: what one file holds."""

    name: str

    def file(self, path: Path) -> Parsed: ...


class Source(Protocol):
    key: str
    path: Path
    offset: int
    damaged: str | None
    torn: bool

    def read(self, limit: int, now: float, eager: bool) -> Read: ...

    def pending(self) -> bool: ...

    def close(self) -> None: ...


def size_of(path: Path) -> int:
    try:
        return path.stat().st_size
    except OSError:
        return 0


def first_object(path: Path) -> Any:
    """The first line of a JSON-lines file, decoded (None if unreadable or not JSON): which framework's
    log a ``.jsonl`` file is, where its name does not say, is in its first line."""
    try:
        with open(path, "rb") as f:
            return json.loads(f.readline())
    except (OSError, ValueError):
        return None


def records(parsed: Parsed, metrics: MetricRecords, out: Read) -> None:
    """A format's scalars and rows as records; a step the agent would refuse is left out, said once."""
    out.said.extend(parsed.said)
    out.records.extend(metrics.rows(parsed.metrics, out.said))
    for step, wall_time, rows in parsed.rollouts:
        if not 0 <= step <= INT64_MAX:
            metrics.skip(out.said, f"step {step}", f"step {step} is negative: rollouts at it are left out")
            continue
        out.records.extend((REC_ROLLOUTS, None, (step, wall_time, part)) for part in rollout_parts(rows))


class LineSource:
    """A JSON-lines file that grows by whole lines: each poll reads the lines after ``offset``."""

    def __init__(self, key: str, path: Path, offset: int, fmt: LineFormat, metrics: MetricRecords):
        self.key, self.path, self.offset, self.fmt, self._metrics = key, path, offset, fmt, metrics
        self.damaged: str | None = None
        self.torn = False

    def read(self, limit: int, now: float, eager: bool) -> Read:
        out = Read()
        if self.damaged is not None:
            return out
        try:
            with open(self.path, "rb") as f:
                if size_of(self.path) < self.offset:
                    self._stop(f"{self.path} is shorter than the {self.offset} bytes already sent: it was truncated or "
                               "replaced (verl's file logger starts it anew on a restart); stopped reading it")
                    return out
                f.seek(self.offset)
                objects, end = [], self.offset
                for raw in f:
                    if not raw.endswith(b"\n"):
                        self.torn = len(raw) < MAX_LINE_BYTES  # its writer is mid-line: read again when whole
                        if not self.torn:
                            self._stop(f"{self.path}: a line at offset {end} is over {MAX_LINE_BYTES} bytes")
                        break
                    self.torn = False
                    if raw.strip():
                        try:
                            objects.append((end, json.loads(raw)))
                        except ValueError as exc:
                            self._stop(f"{self.path}: the line at offset {end} is not JSON ({exc}): stopped reading "
                                       f"this file (is it a {self.fmt.name} file?)")
                            break
                    end += len(raw)
                    if len(objects) >= limit:
                        break
        except OSError as exc:
            self._stop(f"cannot read {self.path}: {exc}")
            return out
        if objects:
            records(self.fmt.lines(self.path, objects), self._metrics, out)
        self.offset = end
        return out

    def pending(self) -> bool:
        return self.offset < size_of(self.path) and not (self.damaged or self.torn)

    def _stop(self, why: str) -> None:
        self.damaged = why

    def close(self) -> None:
        pass


class WholeSource:
    """A file a framework writes whole: read once settled, all at once; ``offset`` is its size once read."""

    def __init__(self, key: str, path: Path, offset: int, fmt: FileFormat, metrics: MetricRecords):
        self.key, self.path, self.offset, self.fmt, self._metrics = key, path, offset, fmt, metrics
        self.damaged: str | None = None
        self.torn = False
        self._told = False

    def read(self, limit: int, now: float, eager: bool) -> Read:
        out = Read()
        if self.damaged is not None:
            return out
        try:
            stat = os.stat(self.path)
        except OSError:
            return out
        if self.offset:
            if stat.st_size != self.offset and not self._told:
                self._told = True
                out.said.append(f"{self.path} was written again after it was sent ({self.offset} -> {stat.st_size} "
                                "bytes): the agent keeps what it held then; its rows are not sent twice")
            return out
        self.torn = not eager and now - stat.st_mtime < SETTLE_S  # still being written, maybe
        if self.torn or stat.st_size == 0:
            return out
        try:
            parsed = self.fmt.file(self.path)
        except (OSError, ValueError) as exc:
            self.damaged = f"{self.path} is not a {self.fmt.name} file ({exc}): left out"
            return out
        records(parsed, self._metrics, out)
        self.offset = stat.st_size
        return out

    def pending(self) -> bool:
        return not self.offset and size_of(self.path) > 0 and not self.damaged

    def close(self) -> None:
        pass

