"""Trainer records in a 'rec' message, and how the agent turns a batch of them into columns.

A batch is columnar, so neither side does Python work per value.  ``log`` packs each
metrics record into bytes as it is called (the values are in cache then; the I/O thread
only joins bytes), and a batch of ``n`` records (seqs ``seq .. seq+n-1``) goes out as:

- ``keys``: each distinct set of metric names, once;
- ``metrics``: one group per key set, ``[keyset_index, at, rows]``: ``at`` the records' offsets
  in the batch (uint32), ``rows`` one row per record of step (int64), wall time and the values
  (float64), all little-endian;
- ``others``: rollouts and checkpoints, ``[at, kind, step, wall_time, payload]`` each.

Every offset 0..n-1 appears exactly once, so a record cannot vanish between the trainer's
seqs and the journal.  Values are bit-exact (NaN, ±Inf, -0.0); an int metric becomes the
float64 that numpy would make of it.
"""

from __future__ import annotations

import struct
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from pilothouse.wire import chat
from pilothouse.wire.checks import INT64_MAX, check_name
from pilothouse.wire.messages import ProtocolError

# Records in the trainer's queue: (kind, names, payload).  Metrics: their key set and their
# row as bytes (see metrics_packer); rollouts and checkpoints: names None, (step, wall_time, rows or path).
REC_METRICS = 0
REC_ROLLOUTS = 1
REC_CHECKPOINT = 2  # a checkpoint the loop saved unasked: its path

MAX_ROLLOUT_ROWS = 10_000
MAX_CHECKPOINT_PATH = 4096
# Distinct metric names in one run (W&B's advice is the same order): the trainer API refuses the
# next one, the agent stores none past it and says so; per-sample names are a bug, not a run.
MAX_METRICS_PER_RUN = 10_000

_AT = np.dtype("<u4")


def metrics_packer(count: int) -> Callable[..., bytes]:
    """``pack(step, wall_time, *values)`` -> one row of a metrics group, for ``count`` values."""
    return struct.Struct(f"<qd{count}d").pack


def encode_batch(records: Sequence[tuple]) -> dict[str, Any]:
    """Queued records -> the ``n``, ``keys``, ``metrics`` and ``others`` entries of a 'rec' message."""
    kinds, names, payloads = zip(*records)
    n = len(records)
    if kinds.count(REC_METRICS) == n and names.count(names[0]) == n:  # the usual batch: one dict shape
        return {"n": n, "keys": [names[0]], "metrics": [[0, np.arange(n, dtype=_AT).tobytes(), b"".join(payloads)]],
                "others": []}
    groups: dict[tuple[str, ...], list[int]] = {}
    others = []
    for i, kind in enumerate(kinds):
        if kind == REC_METRICS:
            groups.setdefault(names[i], []).append(i)
        else:
            others.append([i, kind, *payloads[i]])
    metrics = [[k, np.array(at, _AT).tobytes(), b"".join([payloads[i] for i in at])]
               for k, at in enumerate(groups.values())]
    return {"n": n, "keys": list(groups), "metrics": metrics, "others": others}


def join_batches(parts: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """Batches encoded one after another -> one batch (the I/O thread encodes a big one in slices)."""
    if len(parts) == 1:
        return parts[0]
    table: dict[tuple[str, ...], int] = {}
    metrics, others, offset = [], [], 0
    for part in parts:
        index = [table.setdefault(tuple(names), len(table)) for names in part["keys"]]
        for ks, at, rows in part["metrics"]:
            metrics.append([index[ks], (np.frombuffer(at, _AT) + offset).astype(_AT).tobytes(), rows])
        others.extend([o[0] + offset, *o[1:]] for o in part["others"])
        offset += part["n"]
    return {"n": offset, "keys": list(table), "metrics": metrics, "others": others}


def metric_points(metrics: list[list]) -> int:
    """Values in a batch's metrics groups (its rows less their step and time)."""
    return sum(len(rows) // 8 - len(at) // 2 for _, at, rows in metrics)


@dataclass
class Column:
    metric: str
    steps: np.ndarray  # int64
    vals: np.ndarray  # float64
    times: np.ndarray  # float64


@dataclass
class Group:
    """The metrics records of one key set: ``values`` has a row per record, a column per name."""

    names: tuple[str, ...]
    at: np.ndarray
    steps: np.ndarray
    times: np.ndarray
    values: np.ndarray


@dataclass
class RecordBatch:
    """A checked batch: ``others`` are (at, kind, step, wall_time, payload) in batch order."""

    n: int
    groups: list[Group]
    others: list[tuple[int, int, int, float, Any]]

    def columns(self, skip: int = 0) -> list[Column]:
        """One column per metric over the records at offsets ``skip`` and later, in record order.  A
        group's steps and times are copied once and shared by its metrics' columns, its values once
        (a metric's column is a row of them): an agent pays this per batch, often of one step, and
        its cost is in the number of numpy calls, not in the points."""
        parts: dict[str, list[tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]]] = {}
        for g in self.groups:
            keep = slice(int(np.searchsorted(g.at, skip)) if skip else 0, None)  # at is increasing
            at = g.at[keep]
            if not len(at):
                continue
            steps, times = np.array(g.steps[keep], np.int64), np.array(g.times[keep], np.float64)
            rows = np.array(g.values[keep].T, np.float64, order="C")
            for j, name in enumerate(g.names):
                parts.setdefault(name, []).append((at, steps, rows[j], times))
        columns = []
        for metric, pieces in parts.items():
            if len(pieces) == 1:
                _, steps, vals, times = pieces[0]
            else:  # the metric appeared with different companions: restore record order
                order = np.argsort(np.concatenate([p[0] for p in pieces]), kind="stable")
                steps, vals, times = (np.concatenate([p[i] for p in pieces])[order] for i in (1, 2, 3))
            columns.append(Column(metric, steps, vals, times))
        return columns

    def others_from(self, skip: int = 0) -> list[tuple[int, int, int, float, Any]]:
        return [o for o in self.others if o[0] >= skip]


def check_keysets(keysets: Any, known: set[str]) -> list[tuple[str, ...]]:
    """Validate the batch's table of metric-name sets; ``known`` caches names already checked."""
    if not isinstance(keysets, list):
        raise ProtocolError("'rec' keys must be a list of lists of metric names")
    out = []
    for names in keysets:
        if not isinstance(names, (list, tuple)) or len(set(names)) != len(names):  # tuples: the agent's own
            raise ProtocolError("each 'rec' key set must be a list of distinct metric names")
        for name in names:
            if name not in known:
                try:
                    check_name(name, "metric name")
                except ValueError as exc:
                    raise ProtocolError(str(exc)) from None
                known.add(name)
        out.append(tuple(names))
    return out


def check_batch(n: Any, keys: Any, metrics: Any, others: Any, known: set[str]) -> RecordBatch:
    """A 'rec' batch checked in full (ProtocolError saying what is wrong); arrays are views of the frame."""
    if type(n) is not int or n < 1:
        raise ProtocolError(f"'rec' n must be an int >= 1, got {n!r}")
    keysets = check_keysets(keys, known)
    if not isinstance(metrics, list) or not isinstance(others, list):
        raise ProtocolError("'rec' metrics and others must be lists")
    groups = [_check_group(i, g, keysets) for i, g in enumerate(metrics)]
    rest = [_check_other(o) for o in others]
    if sum(len(g.at) for g in groups) + len(rest) != n:
        raise ProtocolError(f"'rec' batch of {n} records holds {sum(len(g.at) for g in groups) + len(rest)}")
    if len(groups) == 1 and not rest:  # the usual batch: n increasing offsets (checked), each below n, are 0..n-1
        numbered = int(groups[0].at[-1]) < n
    else:
        offsets = np.concatenate([g.at for g in groups] + [np.array([o[0] for o in rest], np.int64)])
        numbered = int(offsets.max()) < n and len(np.unique(offsets)) == n
    if not numbered:
        raise ProtocolError(f"'rec' records must be numbered 0..{n - 1}, each once")
    if any(a[0] >= b[0] for a, b in zip(rest, rest[1:])):
        raise ProtocolError("'rec' others must be in batch order")
    return RecordBatch(n, groups, rest)


def _check_group(i: int, group: Any, keysets: list[tuple[str, ...]]) -> Group:
    if not isinstance(group, list) or len(group) != 3 or type(group[0]) is not int \
            or type(group[1]) is not bytes or type(group[2]) is not bytes:
        raise ProtocolError(f"'rec' metrics group {i} must be [keyset, at, rows] (an int and two bytes)")
    ks, at, rows = group
    if not 0 <= ks < len(keysets):
        raise ProtocolError(f"'rec' metrics group {i} names key set {ks}, the table has {len(keysets)}")
    m, width = len(at) // 4, 2 + len(keysets[ks])
    if m == 0 or len(at) != 4 * m or len(rows) != 8 * width * m:
        raise ProtocolError(f"'rec' metrics group {i}: {len(at)} bytes of offsets and {len(rows)} of rows do not "
                            f"hold records of step, time and {width - 2} metrics")
    floats = np.frombuffer(rows, "<f8").reshape(m, width)
    g = Group(keysets[ks], np.frombuffer(at, _AT), np.frombuffer(rows, "<i8").reshape(m, width)[:, 0],
              floats[:, 1], floats[:, 2:])
    if m > 1 and not (np.diff(g.at.astype(np.int64)) > 0).all():
        raise ProtocolError(f"'rec' metrics group {i}: record offsets must increase")
    if (g.steps < 0).any():
        raise ProtocolError(f"record step must be an int >= 0, got {int(g.steps.min())}")
    return g


def _check_other(rec: Any) -> tuple[int, int, int, float, Any]:
    if not isinstance(rec, list) or len(rec) != 5:
        raise ProtocolError("a record in 'others' must be [at, kind, step, wall_time, payload]")
    at, kind, step, wall_time, payload = rec
    if type(at) is not int or at < 0:
        raise ProtocolError(f"record offset must be an int >= 0, got {at!r}")
    if type(step) is not int or not 0 <= step <= INT64_MAX or type(wall_time) is not float:
        raise ProtocolError(f"record step must be an int >= 0 and wall_time a float, got {step!r}, {wall_time!r}")
    if kind == REC_ROLLOUTS:
        check_rollouts(payload)
    elif kind == REC_CHECKPOINT:
        if not isinstance(payload, str) or len(payload) > MAX_CHECKPOINT_PATH:
            raise ProtocolError(f"a checkpoint path must be a string of at most {MAX_CHECKPOINT_PATH} characters")
    else:
        raise ProtocolError(f"record kind {kind!r} is not known (1: rollouts, 2: checkpoint)")
    return at, kind, step, wall_time, payload


def check_rollouts(rows: Any) -> list[dict]:
    """Rollout rows: a list of maps of text and numbers (prompt, completion, reward, ...), where
    ``prompt``, ``completion`` and ``messages`` may be chats (``pilothouse.wire.chat``)."""
    if not isinstance(rows, list) or len(rows) > MAX_ROLLOUT_ROWS:
        raise ProtocolError(f"rollouts must be a list of at most {MAX_ROLLOUT_ROWS} rows")
    for i, row in enumerate(rows):
        if not isinstance(row, dict):
            raise ProtocolError(f"rollout row {i} must be a dict, got {type(row).__name__}")
        for key, value in row.items():
            if not isinstance(key, str):
                raise ProtocolError(f"rollout row {i} has a field name that is not text: {str(key)[:40]!r}")
            problem = chat.check_field(key, value)
            if problem is not None:
                raise ProtocolError(f"rollout row {i} field {key[:40]!r} {problem}")
    return rows
