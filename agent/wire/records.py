"""Trainer records in a 'rec' message, and how the agent turns a batch of them into columns.

On the wire a batch names each distinct set of metric names once (``keys``) and each
metrics record carries ``[0, step, wall_time, keyset_index, [values...]]``: the training
thread does no more than split its dict, and the agent decodes floats, not a string
per point.  Records with the same key set are converted as one matrix, so the
agent's Python work is per record, not per point.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from pilothouse.wire.checks import SCALARS, check_name
from pilothouse.wire.messages import ProtocolError

# Records inside a trainer batch: [0, step, wall_time, keyset_index, values] for metrics,
# [1, step, wall_time, rows] for rollouts; see encode_records.
REC_METRICS = 0
REC_ROLLOUTS = 1
REC_CHECKPOINT = 2  # [2, step, wall_time, path]: a checkpoint the loop saved unasked

MAX_ROLLOUT_ROWS = 10_000
# Distinct metric names in one run (W&B's advice is the same order): the trainer API refuses the
# next one, the agent stores none past it and says so; per-sample names are a bug, not a run.
MAX_METRICS_PER_RUN = 10_000


def encode_records(records: list[tuple]) -> tuple[list[tuple[str, ...]], list[tuple]]:
    """Trainer-side records -> the ``keys`` table and ``recs`` list of a 'rec' message.

    Metrics records arrive as (0, step, wall_time, names, values) and leave with ``names``
    replaced by its index in the table, so each name crosses the wire once per batch."""
    table: dict[tuple[str, ...], int] = {}
    wire = []
    for rec in records:
        if rec[0] == REC_METRICS:
            index = table.get(rec[3])
            if index is None:
                index = table[rec[3]] = len(table)
            wire.append((REC_METRICS, rec[1], rec[2], index, rec[4]))
        else:
            wire.append(rec)
    return list(table), wire



_NUMERIC = frozenset((float, int))


@dataclass
class Column:
    metric: str
    steps: np.ndarray  # int64
    vals: np.ndarray  # float64
    times: np.ndarray  # float64


class _Group:
    __slots__ = ("idx", "steps", "times", "rows")

    def __init__(self) -> None:
        self.idx: list[int] = []
        self.steps: list[int] = []
        self.times: list[float] = []
        self.rows: list[list] = []


def check_keysets(keysets: Any, known: set[str]) -> list[tuple[str, ...]]:
    """Validate the batch's table of metric-name sets; ``known`` caches names already checked."""
    if not isinstance(keysets, list):
        raise ProtocolError("'rec' keys must be a list of lists of metric names")
    out = []
    for names in keysets:
        if not isinstance(names, list) or len(set(names)) != len(names):
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


def columnize(records: list[tuple[int, int, float, int, list]], keysets: list[tuple[str, ...]]) -> list[Column]:
    """records: (index, step, wall_time, keyset_index, values).

    Raises ProtocolError, naming the metric, for a non-numeric value or a malformed
    record; nothing is returned in that case, so a bad batch changes nothing.
    """
    groups: dict[int, _Group] = {}
    for index, step, wall_time, ks, values in records:
        if type(ks) is not int or not 0 <= ks < len(keysets) or type(values) is not list \
                or len(values) != len(keysets[ks]):
            raise ProtocolError(f"metrics record at step {step} does not match its key set")
        if not _NUMERIC.issuperset(map(type, values)):
            bad = next(i for i, v in enumerate(values) if type(v) not in _NUMERIC)
            raise ProtocolError(f"metric {keysets[ks][bad]!r} at step {step} is {type(values[bad]).__name__}, "
                                "not a number")
        group = groups.get(ks)
        if group is None:
            group = groups[ks] = _Group()
        group.idx.append(index)
        group.steps.append(step)
        group.times.append(wall_time)
        group.rows.append(values)

    parts: dict[str, list[tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]]] = {}
    for ks, group in groups.items():
        keys = keysets[ks]
        try:
            matrix = np.array(group.rows, dtype=np.float64).reshape(len(group.rows), len(keys))
        except OverflowError:
            raise ProtocolError("metric value does not fit in a float64") from None
        idx = np.array(group.idx, dtype=np.int64)
        steps = np.array(group.steps, dtype=np.int64)
        times = np.array(group.times, dtype=np.float64)
        for j, key in enumerate(keys):
            parts.setdefault(key, []).append((idx, steps, matrix[:, j], times))

    columns = []
    for metric, pieces in parts.items():
        if len(pieces) == 1:
            _, steps, vals, times = pieces[0]
        else:  # the metric appeared with different companions: restore record order
            idx = np.concatenate([p[0] for p in pieces])
            order = np.argsort(idx, kind="stable")
            steps = np.concatenate([p[1] for p in pieces])[order]
            vals = np.concatenate([p[2] for p in pieces])[order]
            times = np.concatenate([p[3] for p in pieces])[order]
        columns.append(Column(metric, steps, np.ascontiguousarray(vals), times))
    return columns


def check_rollouts(rows: Any) -> list[dict]:
    """Rollout rows: a list of flat dicts of text and numbers (prompt, completion, reward, ...)."""
    if not isinstance(rows, list) or len(rows) > MAX_ROLLOUT_ROWS:
        raise ProtocolError(f"rollouts must be a list of at most {MAX_ROLLOUT_ROWS} rows")
    for row in rows:
        if not isinstance(row, dict):
            raise ProtocolError(f"a rollout row must be a dict, got {type(row).__name__}")
        for key, value in row.items():
            if not isinstance(key, str) or not isinstance(value, SCALARS):
                raise ProtocolError(f"rollout field {str(key)[:40]!r} has unsupported type {type(value).__name__}")
    return rows
