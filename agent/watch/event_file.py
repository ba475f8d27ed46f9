"""One TensorBoard event file read from a byte offset as it grows, with tensorboard's own record
reader (its framing and CRC checks; no protobuf or CRC code of ours).

A writer appends records: the data's length and that length's CRC, the data, the data's CRC.  A
reader that reaches the end while a record is half written sees a short read, or (on file systems
that show a file's new size before its data) zeros where the header will be, or a data CRC that
does not match yet, with nothing after the record.  None of these is skipped nor fatal: the offset
stays at the end of the last whole record and the record is read again on the next poll.  A bad
header that is not zeros, or a bad record with data after it, is damage (or not an event file at
all): reading that file stops there, said once.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import BinaryIO

from google.protobuf.message import DecodeError
from tensorboard.compat.proto.event_pb2 import Event
from tensorboard.compat.tensorflow_stub import errors
from tensorboard.compat.tensorflow_stub.pywrap_tensorflow import PyRecordReader_New

from pilothouse.watch.sources import Read, size_of
from pilothouse.watch.summaries import Summaries

RECORD_OVERHEAD = 16  # the length (8 bytes) and its CRC (4) before the data, the data's CRC (4) after
EVENT_FILE = "tfevents"  # in every event file's name (events.out.tfevents.<time>.<host>...)


def is_event_file(name: str) -> bool:
    return EVENT_FILE in name and not name.endswith((".tmp", ".swp"))


class EventFileTail:
    """Whole events after ``offset``, as the file grows; ``damaged`` says why reading stopped."""

    def __init__(self, path: Path, offset: int = 0):
        self.path = path
        self.offset = offset
        self.damaged: str | None = None
        self.torn = False  # the file ends in part of a record (for now)
        self._reader: PyRecordReader_New | None = None
        self._handle: BinaryIO | None = None

    def read(self, limit: int) -> list[tuple[int, Event]]:
        """Up to ``limit`` events, each with the offset just past it."""
        out: list[tuple[int, Event]] = []
        if self.damaged is not None:
            return out
        reader = self._reader or self._open()
        if reader is None:
            return out
        while len(out) < limit:
            try:
                reader.GetNext()
            except errors.OutOfRangeError:  # the end, for now
                self.torn = False
                break
            except errors.DataLossError as exc:
                self.torn = True
                if "truncated" not in str(exc):  # a CRC mismatch: maybe data not landed yet
                    self._crc_failed(str(exc))
                break  # a short read: the reader keeps the part it has and continues from it next time
            record = reader.record()
            try:
                event = Event.FromString(record)
            except DecodeError:
                self._stop(f"the record at offset {self.offset} of {self.path} is not a TensorBoard event")
                break
            self.offset += RECORD_OVERHEAD + len(record)
            out.append((self.offset, event))
        return out

    def _open(self) -> PyRecordReader_New | None:
        try:
            reader = PyRecordReader_New(str(self.path))
            handle = open(self.path, "rb")  # noqa: SIM115 (kept open while the file is followed)
        except (errors.NotFoundError, OSError) as exc:
            self._stop(f"cannot read {self.path}: {exc}")
            return None
        handle.seek(self.offset)
        # The stub reader has no start offset of its own (it refuses one) and reads only through
        # ``file_handle``: given one at the offset, it reads on from there.
        reader.file_handle = handle
        self._reader, self._handle = reader, handle
        return reader

    def _crc_failed(self, why: str) -> None:
        """A record not landed yet is retried (reopened at its start: the buffered bytes are stale);
        anything else stops this file."""
        try:
            with open(self.path, "rb") as f:
                f.seek(self.offset)
                header = f.read(12)
                size = os.fstat(f.fileno()).st_size
        except OSError as exc:
            self._stop(f"cannot read {self.path}: {exc}")
            return
        if why.endswith("failed header crc32 check"):
            landing = header == bytes(12)
        else:  # the header is good: the record ends where it says, and is the file's last so far
            landing = size == self.offset + RECORD_OVERHEAD + int.from_bytes(header[:8], "little")
        if landing:
            self.close()
        else:
            what = "is not a TensorBoard event file" if self.offset == 0 else "is damaged"
            self._stop(f"{self.path} {what}: a record at offset {self.offset} fails its CRC check with data after "
                       f"it; stopped reading this file")

    def _stop(self, why: str) -> None:
        self.damaged = why
        self.close()

    def close(self) -> None:
        if self._handle is not None:
            self._handle.close()
        self._reader = self._handle = None


class EventSource:
    """A TensorBoard event file, decoded by the run's ``Summaries`` (shared by its event files)."""

    def __init__(self, key: str, path: Path, offset: int, summaries: Summaries):
        self.key, self.path = key, path
        self._tail = EventFileTail(path, offset)
        self._summaries = summaries

    offset = property(lambda self: self._tail.offset)
    damaged = property(lambda self: self._tail.damaged)
    torn = property(lambda self: self._tail.torn)

    def read(self, limit: int, now: float, eager: bool) -> Read:
        out = Read()
        for _, event in self._tail.read(limit):
            decoded = self._summaries.decode(event)
            out.said.extend(decoded.skipped)
            out.config.update(decoded.config)
            out.records.extend(decoded.records)
        return out

    def pending(self) -> bool:
        return self._tail.offset < size_of(self.path) and not (self._tail.damaged or self._tail.torn)

    def close(self) -> None:
        self._tail.close()
