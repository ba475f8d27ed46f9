"""Turn a batch of row-shaped trainer records into per-metric columns.

Trainers send one dict per ``log()`` call because that is the cheapest thing to do
on the training thread; the agent stores columns (numpy blobs) because that is what
makes ingest and loading fast.  Records with the same key set are converted as one
matrix, so the Python work is per record, not per point.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .protocol import ProtocolError, check_name

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


def columnize(records: list[tuple[int, int, float, dict]], known: set[str]) -> list[Column]:
    """records: (index, step, wall_time, {metric: number}).  ``known`` caches checked names.

    Raises ProtocolError, naming the metric, for a non-numeric value or a bad name;
    nothing is returned in that case, so a bad batch changes nothing.
    """
    groups: dict[tuple, _Group] = {}
    for index, step, wall_time, values in records:
        keys = tuple(values)
        group = groups.get(keys)
        if group is None:
            for key in keys:
                if key not in known:
                    _check_metric_name(key)
                    known.add(key)
            group = groups[keys] = _Group()
        row = list(values.values())
        if not _NUMERIC.issuperset(map(type, row)):
            bad = next(k for k, v in values.items() if type(v) not in _NUMERIC)
            raise ProtocolError(f"metric {bad!r} at step {step} is {type(values[bad]).__name__}, not a number")
        group.idx.append(index)
        group.steps.append(step)
        group.times.append(wall_time)
        group.rows.append(row)

    parts: dict[str, list[tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]]] = {}
    for keys, group in groups.items():
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


def _check_metric_name(key: object) -> None:
    try:
        check_name(key, "metric name")
    except ValueError as exc:
        raise ProtocolError(str(exc)) from None
