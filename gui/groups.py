"""Run groups: runs grouped by a config key or a name pattern, each drawn as a mean with a min/max band.

Why plain numpy here: a group's band is recomputed from its runs' points whenever they grow, so
``band`` is vectorised (no Python loop per point) and tested against a brute-force reference
without a display; the Qt chart only draws what it returns.
"""

from __future__ import annotations

import math
import re
from collections.abc import Hashable, Mapping, Sequence
from typing import Any

import numpy as np

from pilothouse.gui.models import RunKey, flatten
from pilothouse.gui.run_columns import identity

UNSET = "(unset)"  # the group of runs whose config lacks the key
EMPTY = "(empty)"  # the group of runs whose whole name the pattern removes
_MISSING = object()


def group_runs(names: Mapping[RunKey, str], configs: Mapping[RunKey, dict], by: str) -> dict[str, list[RunKey]]:
    """Runs (``names``' keys, in its order) by ``config:<dotted key>`` (label ``lr=0.001``) or by
    ``name:<regex>`` (label: the name with every match removed, so ``-seed\\d+`` puts
    ``lr3e-3-seed1`` and ``lr3e-3-seed2`` in ``lr3e-3``). Groups come in order of first appearance."""
    kind, sep, arg = by.partition(":")
    if not sep or kind not in ("config", "name"):
        raise ValueError(f"group by 'config:<key>' or 'name:<regex>', not {by!r}")
    if kind == "config":
        return _by_config(names, configs, arg)
    return _by_name(names, arg)


def _by_config(names: Mapping[RunKey, str], configs: Mapping[RunKey, dict], key: str) -> dict[str, list[RunKey]]:
    if not key:
        raise ValueError("group by config needs a key, e.g. 'config:optimizer.lr'")
    groups: dict[Hashable, tuple[Any, list[RunKey]]] = {}
    for run in names:
        value = flatten(configs.get(run) or {}).get(key, _MISSING)
        groups.setdefault(('unset',) if value is _MISSING else identity(value), (value, []))[1].append(run)
    return _labelled(key, list(groups.values()))


def _labelled(key: str, groups: list[tuple[Any, list[RunKey]]]) -> dict[str, list[RunKey]]:
    """``key=value`` per group; a text value whose label another value has too ("1" and 1) is quoted."""
    labels = [f"{key}={_text(value)}" for value, _ in groups]
    shared = {label for label in labels if labels.count(label) > 1}
    return {f"{key}={value!r}" if label in shared and isinstance(value, str) else label: runs
            for label, (value, runs) in zip(labels, groups)}


def _text(value: Any) -> str:
    """Values as the Config panel shows them: true/false, numbers as repr, strings bare."""
    if value is _MISSING:
        return UNSET
    if isinstance(value, bool):
        return str(value).lower()
    return value if isinstance(value, str) else repr(value)


def _by_name(names: Mapping[RunKey, str], pattern: str) -> dict[str, list[RunKey]]:
    try:
        regex = re.compile(pattern)
    except re.error as exc:
        raise ValueError(f"bad name pattern {pattern!r}: {exc}") from None
    groups: dict[str, list[RunKey]] = {}
    for run, name in names.items():
        groups.setdefault(regex.sub("", name or run[1]) or EMPTY, []).append(run)
    return groups


def band(series: Sequence[tuple[np.ndarray, np.ndarray]]) -> tuple[np.ndarray, np.ndarray, np.ndarray,
                                                                   np.ndarray, np.ndarray]:
    """(xs, mean, lo, hi, count) of runs' (x, y) points: per x of the union of the runs' x (sorted),
    the mean, min and max over the runs' finite values there and how many there are (NaN in mean,
    lo and hi where none is). A run that logged an x twice (resumed) counts with its last value.

    x must be finite (a Series' is). Steps (integers, every k-th one or not) are placed on a grid
    of the union's span in O(points), with no sort; other x cost one sort of all the points.
    """
    runs = [_last_per_x(np.asarray(x, np.float64).ravel(), np.asarray(y, np.float64).ravel()) for x, y in series]
    runs = [run for run in runs if len(run[0])]
    if not runs:
        return np.empty(0), np.empty(0), np.empty(0), np.empty(0), np.empty(0, np.int64)
    xs, present, places = _grid(runs) or _merged(runs)
    total = np.zeros(len(xs))
    count = np.zeros(len(xs), np.int64)
    lo = np.full(len(xs), np.nan)
    hi = np.full(len(xs), np.nan)
    for (_, y), at in zip(runs, places):
        finite = np.isfinite(y)
        value, addend = (y, y) if finite.all() else (np.where(finite, y, np.nan), np.where(finite, y, 0.0))
        total[at] += addend
        count[at] += finite
        lo[at] = np.fmin(lo[at], value)
        hi[at] = np.fmax(hi[at], value)
    if present is not None:
        xs, total, count, lo, hi = xs[present], total[present], count[present], lo[present], hi[present]
    with np.errstate(invalid="ignore", divide="ignore"):
        mean = np.where(count > 0, total / count, np.nan)
    return xs, mean, lo, hi, count


def _last_per_x(x: np.ndarray, y: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """x strictly increasing, each x with the last y logged at it (stable: equal x keep log order)."""
    if len(x) != len(y):
        raise ValueError(f"x and y differ in length: {len(x)} != {len(y)}")
    step = np.diff(x)
    if (step > 0).all():
        return x, y
    if (step < 0).any():
        order = np.argsort(x, kind="stable")
        x, y = x[order], y[order]
    last = np.append(x[1:] != x[:-1], True)
    return x[last], y[last]


Place = slice | np.ndarray  # where a run's points go in the union: a (strided) slice, else indices
Placed = tuple[np.ndarray, "np.ndarray | None", list[Place]]  # the union's x, which of them are logged, places


def _grid(runs: list[tuple[np.ndarray, np.ndarray]]) -> Placed | None:
    """Integer x (steps) on the grid origin + k * spacing spanning them all, if it has no more
    entries than there are points. A run logged every d-th step is a strided slice of it."""
    origin, end = min(x[0] for x, _ in runs), max(x[-1] for x, _ in runs)
    offsets = _integer_offsets([x for x, _ in runs], origin) if end - origin < 2 ** 53 else None
    if offsets is None:
        return None
    strides = [_stride(o) for o in offsets]
    spacing = math.gcd(*(math.gcd(int(o[0]), d) if d else int(np.gcd.reduce(o)) for o, d in zip(offsets, strides)))
    spacing = spacing or 1  # every run is one point at the origin
    size = int(end - origin) // spacing + 1
    if size > sum(len(o) for o in offsets):
        return None
    places = [slice(int(o[0]) // spacing, int(o[-1]) // spacing + 1, d // spacing) if d else o // spacing
              for o, d in zip(offsets, strides)]
    present = np.zeros(size, bool)
    for at in places:
        present[at] = True
    xs = origin + spacing * np.arange(size, dtype=np.float64)
    return xs, None if present.all() else present, places


def _integer_offsets(xs: list[np.ndarray], origin: float) -> list[np.ndarray] | None:
    """x - origin as int64 per run, or None when some x is not a whole number."""
    offsets = []
    for x in xs:
        delta = x - origin
        ints = delta.astype(np.int64)
        if not np.array_equal(ints, delta):
            return None
        offsets.append(ints)
    return offsets


def _stride(offsets: np.ndarray) -> int:
    """d when the (increasing) offsets go up by d at every point, 0 when they do not (or one point)."""
    if len(offsets) == 1:
        return 0
    d = int(offsets[1] - offsets[0])
    return d if (np.diff(offsets) == d).all() else 0


def _merged(runs: list[tuple[np.ndarray, np.ndarray]]) -> Placed:
    """Any x: the union by one sort of every point, each run placed in it by a binary search."""
    merged = np.sort(np.concatenate([x for x, _ in runs]), kind="stable")  # merges the sorted runs
    xs = merged[np.append(True, merged[1:] != merged[:-1])]
    return xs, None, [np.searchsorted(xs, x) for x, _ in runs]
