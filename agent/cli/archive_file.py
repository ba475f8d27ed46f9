"""A run in one parquet file: the layout ``pilothouse archive`` writes and ``pilothouse import`` reads.

Rows in journal order: one per metric point (``kind`` "m": ``metric``, ``rank``, ``step`` int64,
``value`` and ``time`` float64, stored byte for byte, so NaN payloads, -0.0 and subnormals come
back bit-exact), one per other entry (``kind`` "r" a rollout batch, "e" an event: ``rank`` and
``body``, the msgpack bytes the journal holds).  The run itself (id, project, name, kind, status,
created/ended, last step, loss counters, host, config, schema) is JSON in the file's key-value
metadata under ``pilothouse.archive``, with the format version and the row counts.

pyarrow is optional (``pip install 'pilothouse[archive]'``) and loaded by the functions that need it;
the node agent never loads it: the CLI decodes the file and sends plain entries.
"""

from __future__ import annotations

import json
import os
import tempfile
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from pilothouse.wire.entries import KIND_METRIC, KIND_ROLLOUTS, KINDS, Entry, Page
from pilothouse.wire.messages import MAX_HELLO_BYTES
from pilothouse.wire.run_import import IMPORT_BATCH_BYTES, check_run_meta, entry_size, import_entry

FORMAT = 1
META_KEY = b"pilothouse.archive"
MAX_META_BYTES = 4 * MAX_HELLO_BYTES  # a run's config and schema are at most MAX_HELLO_BYTES packed
COLUMNS = ("kind", "metric", "rank", "step", "value", "time", "body")
ROW_GROUP_ROWS = 256_000  # rows gathered before a row group is written: memory stays bounded
READ_ROWS = 65_536  # rows decoded at a time on import; a metric chunk sent is at most this long
_ENCODINGS = {"step": "DELTA_BINARY_PACKED", "rank": "DELTA_BINARY_PACKED",
              "value": "BYTE_STREAM_SPLIT", "time": "BYTE_STREAM_SPLIT"}  # byte-exact, and zstd finds more
_PAD = bytes(8)  # the step/value/time slot of a row that has none


class ArchiveError(ValueError):
    """The archive cannot be written or read; the text says why, and nothing was changed."""


def pyarrow() -> Any:
    try:
        import pyarrow as pa
        import pyarrow.parquet  # pa.parquet
    except ImportError:
        raise ArchiveError("archives are parquet files and need pyarrow: pip install 'pilothouse[archive]'") from None
    return pa


def schema(pa: Any) -> Any:
    return pa.schema([("kind", pa.dictionary(pa.int8(), pa.string())),
                      ("metric", pa.dictionary(pa.int32(), pa.string())), ("rank", pa.int64()), ("step", pa.int64()),
                      ("value", pa.float64()), ("time", pa.float64()), ("body", pa.binary())])


@dataclass
class Counts:
    points: int = 0
    rollouts: int = 0
    events: int = 0

    def add(self, entry: Entry) -> None:
        if entry.kind == KIND_METRIC:
            self.points += entry.n
        elif entry.kind == KIND_ROLLOUTS:
            self.rollouts += 1
        else:
            self.events += 1

    @property
    def rows(self) -> int:
        return self.points + self.rollouts + self.events


# --- writing ------------------------------------------------------------------------------------

def write_archive(out: Path, pages: Iterable[Page], run_meta: Callable[[], dict], force: bool = False) -> Counts:
    """Every entry of ``pages`` into ``out``, with the run's metadata as ``run_meta`` gives it once
    the entries are written.  Written to a temporary file beside ``out`` and renamed: a failure
    (a full disk, Ctrl+C) leaves no partial file, and ``out`` is never overwritten unless ``force``."""
    pa = pyarrow()
    if out.exists() and not force:
        raise ArchiveError(f"{out} exists; --force overwrites it")
    try:
        fd, tmp_name = tempfile.mkstemp(dir=out.parent, prefix=f".{out.name}.", suffix=".partial")
    except OSError as exc:
        raise ArchiveError(f"cannot write {out}: {exc.strerror or exc}") from None
    os.close(fd)
    tmp = Path(tmp_name)
    try:
        counts = _write(pa, tmp, pages, run_meta)
        _place(tmp, out, force)
    except (OSError, pa.ArrowException) as exc:
        raise ArchiveError(f"cannot write {out}: {getattr(exc, 'strerror', None) or exc}") from None
    finally:
        tmp.unlink(missing_ok=True)
    return counts


def _write(pa: Any, path: Path, pages: Iterable[Page], run_meta: Callable[[], dict]) -> Counts:
    counts = Counts()
    gathered: list[Entry] = []
    rows = 0
    with pa.parquet.ParquetWriter(path, schema(pa), compression="zstd", use_dictionary=["kind", "metric"],
                                  column_encoding=_ENCODINGS) as writer:
        for page in pages:
            for entry in page.entries:
                counts.add(entry)
                gathered.append(entry)
                rows += entry.n if entry.kind == KIND_METRIC else 1
            if rows >= ROW_GROUP_ROWS:
                writer.write_batch(_rows(pa, gathered))
                gathered, rows = [], 0
        if gathered:
            writer.write_batch(_rows(pa, gathered))
        meta = {"format": FORMAT, "run": run_meta(), "points": counts.points, "rollouts": counts.rollouts,
                "events": counts.events}
        writer.add_key_value_metadata({META_KEY: json.dumps(meta, ensure_ascii=False)})
    with open(path, "rb") as f:
        os.fsync(f.fileno())  # on disk before the name says it is there
    return counts


def _place(tmp: Path, out: Path, force: bool) -> None:
    """``tmp`` takes the name ``out``; without ``force``, never over a file that appeared meanwhile."""
    if force:
        os.replace(tmp, out)
        return
    try:
        os.link(tmp, out)  # fails if ``out`` exists, where a rename would replace it
    except FileExistsError:
        raise ArchiveError(f"{out} exists; --force overwrites it") from None


def _rows(pa: Any, entries: list[Entry]) -> Any:
    """Journal entries -> one record batch, a row per point and per other entry."""
    metric = np.array([e.kind == KIND_METRIC for e in entries])
    counts = np.array([e.n if m else 1 for e, m in zip(entries, metric)], np.int64)
    names: dict[str, int] = {}
    codes = [names.setdefault(e.metric, len(names)) if m else 0 for e, m in zip(entries, metric)]
    valid = np.repeat(metric, counts)
    total = len(valid)

    def points(blobs: list[bytes | None], dtype: type) -> Any:
        blob = b"".join(b if m else _PAD for b, m in zip(blobs, metric))
        return pa.array(np.frombuffer(blob, dtype), mask=~valid)

    lengths = np.zeros(total, np.int32)
    starts = np.cumsum(counts) - counts
    bodies = [e.body or b"" for e, m in zip(entries, metric) if not m]
    lengths[starts[~metric]] = [len(b) for b in bodies]
    offsets = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int32)
    body = pa.Array.from_buffers(pa.binary(), total, [pa.py_buffer(np.packbits(~valid, bitorder="little")),
                                                       pa.py_buffer(offsets), pa.py_buffer(b"".join(bodies))])
    kinds = np.repeat(np.array([KINDS.index(e.kind) for e in entries], np.int8), counts)
    return pa.record_batch([
        pa.DictionaryArray.from_arrays(pa.array(kinds), pa.array(KINDS, pa.string())),
        pa.DictionaryArray.from_arrays(pa.array(np.repeat(np.array(codes, np.int32), counts), mask=~valid),
                                       pa.array(list(names), pa.string())),
        pa.array(np.repeat(np.array([e.rank for e in entries], np.int64), counts)),
        points([e.steps for e in entries], np.int64), points([e.vals for e in entries], np.float64),
        points([e.times for e in entries], np.float64), body,
    ], schema=schema(pa))


# --- reading ------------------------------------------------------------------------------------

@dataclass
class Archive:
    path: Path
    run: dict  # checked as the agent checks it (check_run_meta)
    counts: Counts
    file: Any  # the pyarrow ParquetFile

    def entries(self) -> Iterator[list]:
        """The run's entries as ``import_batch`` takes them, in journal order: consecutive points of
        one metric and rank become one chunk."""
        pa = pyarrow()
        for batch in self.file.iter_batches(batch_size=READ_ROWS):
            yield from _entries(pa, batch, self.path)


def open_archive(path: Path) -> Archive:
    """The archive at ``path`` with its metadata checked, or ArchiveError saying what is wrong."""
    pa = pyarrow()
    try:
        file = pa.parquet.ParquetFile(path)
    except OSError as exc:
        raise ArchiveError(f"cannot read {path}: {exc.strerror or exc}") from None
    except pa.ArrowException:
        raise ArchiveError(f"{path} is not a parquet file") from None
    raw = (file.metadata.metadata or {}).get(META_KEY)
    if raw is None:
        raise ArchiveError(f"{path} is a parquet file but not a Pilothouse archive (no {META_KEY.decode()} metadata)")
    if len(raw) > MAX_META_BYTES:
        raise ArchiveError(f"{path}: the archive's metadata is {len(raw)} bytes; at most {MAX_META_BYTES} are read")
    try:
        meta = json.loads(raw)
    except (ValueError, RecursionError):
        raise ArchiveError(f"{path}: the archive's metadata is not valid JSON") from None
    if not isinstance(meta, dict) or meta.get("format") != FORMAT:
        version = meta.get("format") if isinstance(meta, dict) else None
        raise ArchiveError(f"{path} is an archive of format version {str(version)[:20]}; this pilothouse reads "
                           f"version {FORMAT}")
    _check_columns(pa, file.schema_arrow, path)
    try:
        run = check_run_meta(meta.get("run"))
        counts = Counts(*(_count(meta.get(k), k) for k in ("points", "rollouts", "events")))
    except (ValueError, TypeError) as exc:
        raise ArchiveError(f"{path}: the archived run's metadata is malformed: {exc}") from None
    if counts.rows != file.metadata.num_rows:
        raise ArchiveError(f"{path} holds {file.metadata.num_rows} rows but its metadata says {counts.rows}")
    return Archive(path, run, counts, file)


def _count(value: Any, what: str) -> int:
    if type(value) is not int or value < 0:
        raise ValueError(f"{what} must be a count, got {str(value)[:40]}")
    return value


def _check_columns(pa: Any, found: Any, path: Path) -> None:
    """The archive's columns, by name and type; text columns may be dictionary-encoded or not."""
    want = schema(pa)
    if found.names != want.names:
        raise ArchiveError(f"{path} has columns {', '.join(found.names)[:200]}; an archive has {', '.join(COLUMNS)}")
    for have, need in zip(found, want):
        plain = need.type.value_type if pa.types.is_dictionary(need.type) else need.type
        if have.type != need.type and (have.type != plain or plain != pa.string()):
            raise ArchiveError(f"{path}: column {have.name} is {have.type}, not {need.type}")


def _entries(pa: Any, batch: Any, path: Path) -> Iterator[list]:
    kind_codes, kind_names = _codes(batch.column("kind"))
    metric_codes, metric_names = _codes(batch.column("metric"))
    if kind_codes.min(initial=0) < 0 or not set(kind_names) <= set(KINDS):
        raise ArchiveError(f"{path}: a row's kind is missing or not one of {', '.join(KINDS)}")
    kinds = np.array([KINDS.index(k) for k in kind_names] or [0], np.int8)[kind_codes]
    metric = kinds == KINDS.index(KIND_METRIC)
    columns = [batch.column(c) for c in ("rank", "step", "value", "time", "body")]
    valid = [c.is_valid().to_numpy(zero_copy_only=False) for c in columns]
    if not valid[0].all() or not all(v[metric].all() for v in valid[1:4]) or (metric_codes[metric] < 0).any() \
            or not valid[4][~metric].all():
        raise ArchiveError(f"{path}: a point needs a metric, rank, step, value and time; a rollout batch or event "
                           "a rank and a body")
    rank, steps, vals, times = (_raw(c, d) for c, d in zip(columns, (np.int64, np.int64, np.float64, np.float64)))
    n = len(kinds)
    start = np.ones(n, bool)  # where an entry begins: not a point, or another metric or rank than the row before
    start[1:] = ~metric[1:] | ~metric[:-1] | (metric_codes[1:] != metric_codes[:-1]) | (rank[1:] != rank[:-1])
    starts = np.flatnonzero(start)
    bodies = iter(columns[4].filter(pa.array(~metric)).to_pylist())
    for s, e in zip(starts.tolist(), [*starts[1:].tolist(), n]):
        if metric[s]:
            yield import_entry(KIND_METRIC, metric_names[metric_codes[s]], int(rank[s]), steps[s:e].tobytes(),
                               vals[s:e].tobytes(), times[s:e].tobytes())
        else:
            entry = import_entry(KINDS[kinds[s]], None, int(rank[s]), body=next(bodies))
            if entry_size(entry) > IMPORT_BATCH_BYTES:
                raise ArchiveError(f"{path}: an entry of {entry_size(entry)} bytes is larger than an import batch "
                                   f"({IMPORT_BATCH_BYTES})")
            yield entry


def _codes(column: Any) -> tuple[np.ndarray, list[str]]:
    """A text column as (a code per row, -1 for none; the texts the codes index)."""
    if not hasattr(column, "indices"):
        column = column.dictionary_encode()
    codes = _raw(column.indices.cast("int64"), np.int64)
    codes = np.where(column.is_valid().to_numpy(zero_copy_only=False), codes, -1)
    return codes, column.dictionary.to_pylist()


def _raw(array: Any, dtype: type) -> np.ndarray:
    """A fixed-width column's values byte for byte (what sits in a null slot is left to the caller)."""
    data = array.buffers()[1]
    if data is None:
        return np.zeros(len(array), dtype)
    return np.frombuffer(data, dtype)[array.offset:array.offset + len(array)]
