"""Exact min/max tiers of a metric: the fold both the agent's journal and the app's store keep.

Why: opening a run of 10 x 100 M points must not read 24 GB.  Next to the raw points both sides
keep, for each (run, metric), levels of buckets over *step ranges*: level L bucket k holds the
steps [k * WIDTHS[L], (k + 1) * WIDTHS[L]) (16, 64, 256, ... steps).  Each bucket keeps exact
aggregates of the points in it (``RECORD``): how many, how many non-finite and the step of the
first one, the finite min and max with the step where each is (so a spike is drawn where it is),
the first and last point by step with their wall times (so a wall-time axis draws the same
buckets), and the sum of the finite values (so a smoothed or averaged curve needs no raw point).
Buckets are keyed by step, not by arrival, so points arriving out of order (a resumed run
re-logging steps) and pages arriving in many pieces fold into the same buckets: ``reduce`` is
associative, and the tiers after any sequence of pages equal a one-shot build over all of their
points (the sums to rounding: a float sum depends on the order of its additions).

This module is the fold alone (plain numpy, no storage): ``pilothouse.store.tier_table`` stores the
levels in SQLite, and the agent sends ``RECORD`` arrays to an app that asks for a range, so both
sides draw from the same numbers.
"""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np

BASE = 16  # steps per level-0 bucket
FANOUT = 4  # level L+1 buckets hold FANOUT level-L buckets
LEVELS = 16  # widths 16 .. 16 * 4**15 (17 G steps); wider views use the top level (still sparse)
WIDTHS = [BASE * FANOUT ** level for level in range(LEVELS)]
PER_COLUMN = 2  # the chosen level has at least this many buckets per pixel column
NONE = np.iinfo(np.int64).max  # the step of a non-finite value in a bucket that has none

RECORD = np.dtype([("bucket", "<i8"), ("count", "<i8"), ("bad", "<i8"), ("xbad", "<i8"),
                   ("min", "<f8"), ("xmin", "<i8"), ("max", "<f8"), ("xmax", "<i8"),
                   ("first", "<f8"), ("xfirst", "<i8"), ("last", "<f8"), ("xlast", "<i8"),
                   ("sum", "<f8"), ("tfirst", "<f8"), ("tlast", "<f8")])


def points(steps: np.ndarray, vals: np.ndarray, times: np.ndarray) -> np.ndarray:
    """Raw points as one-point records (bucket = step), in arrival order."""
    steps = np.asarray(steps, np.int64)
    vals = np.asarray(vals, np.float64)
    rec = np.empty(len(steps), RECORD)
    finite = np.isfinite(vals)
    clean = np.where(finite, vals, np.nan)
    rec["bucket"] = steps
    rec["count"] = 1
    rec["bad"] = ~finite
    rec["xbad"] = np.where(finite, NONE, steps)
    for field in ("min", "max"):
        rec[field] = clean
    for field in ("first", "last"):
        rec[field] = vals
    for field in ("xmin", "xmax", "xfirst", "xlast"):
        rec[field] = steps
    rec["sum"] = np.where(finite, vals, 0.0)
    rec["tfirst"] = rec["tlast"] = times
    return rec


def reduce(rec: np.ndarray) -> np.ndarray:
    """Fold records sharing a bucket into one, in bucket order.  ``rec`` is in arrival order:
    the first point of a bucket is the one at its smallest step that arrived first, the last the
    one at its largest step that arrived last; a min or max at several steps is at the smallest."""
    return reduce_groups(rec, None)[0]


def reduce_groups(rec: np.ndarray, group: np.ndarray | None) -> tuple[np.ndarray, np.ndarray | None]:
    """``reduce`` of many metrics in one pass (what a page of many agents costs is then per page,
    not per metric): ``group`` numbers each record's metric; records sharing a group and a bucket
    fold into one, in (group, bucket) order; returns them and their groups."""
    if not len(rec):
        return rec.copy(), group
    if group is None:
        if (np.diff(rec["bucket"]) < 0).any():
            rec = rec[np.argsort(rec["bucket"], kind="stable")]
        starts = np.flatnonzero(np.diff(rec["bucket"], prepend=rec["bucket"][0] - 1))
    else:
        if (np.diff(group) < 0).any() or ((np.diff(rec["bucket"]) < 0) & (np.diff(group) == 0)).any():
            order = np.lexsort((rec["bucket"], group))  # stable: arrival order kept within a bucket
            rec, group = rec[order], group[order]
        change = np.ones(len(rec), bool)
        change[1:] = (np.diff(rec["bucket"]) != 0) | (np.diff(group) != 0)
        starts = np.flatnonzero(change)
        group = group[starts]
    sizes = np.diff(starts, append=len(rec))
    out = np.empty(len(starts), RECORD)
    out["bucket"] = rec["bucket"][starts]
    out["count"] = np.add.reduceat(rec["count"], starts)
    out["bad"] = np.add.reduceat(rec["bad"], starts)
    out["xbad"] = np.minimum.reduceat(rec["xbad"], starts)
    out["sum"] = np.add.reduceat(rec["sum"], starts)
    for field, fold in (("min", np.fmin), ("max", np.fmax)):
        best = fold.reduceat(rec[field], starts)
        at = rec[field] == np.repeat(best, sizes)  # False where NaN: a bucket without a finite value
        x = np.minimum.reduceat(np.where(at, rec["x" + field], NONE), starts)
        out[field], out["x" + field] = best, np.where(np.isnan(best), np.minimum.reduceat(rec["xfirst"], starts), x)
    order = np.arange(len(rec))
    for field, fold, none in (("first", np.minimum, len(rec)), ("last", np.maximum, -1)):
        x = fold.reduceat(rec["x" + field], starts)
        index = fold.reduceat(np.where(rec["x" + field] == np.repeat(x, sizes), order, none), starts)
        out[field], out["x" + field], out["t" + field] = rec[field][index], x, rec["t" + field][index]
    return out, group


def first_level(steps: np.ndarray, vals: np.ndarray, times: np.ndarray,
                group: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray | None]:
    """Level 0 of these points (of many metrics at once with ``group``, as in ``reduce_groups``):
    ``regroup(points(steps, vals, times), BASE)``, computed on the plain arrays when the steps do not go
    back within a group and the groups come in order (the usual page), which costs a third as much."""
    bucket = np.floor_divide(steps, BASE)
    if group is None:
        sorted_ = not (np.diff(steps) < 0).any()
        change = np.diff(bucket, prepend=bucket[:1] - 1) != 0
    else:
        same = np.diff(group) == 0
        sorted_ = not ((np.diff(group) < 0).any() or (same & (np.diff(steps) < 0)).any())
        change = np.ones(len(steps), bool)
        change[1:] = (np.diff(bucket) != 0) | ~same
    if len(steps) < 2 or not sorted_:
        return regroup(points(steps, vals, times), BASE, group)
    starts = np.flatnonzero(change)
    ends = np.append(starts[1:], len(steps))
    finite = np.isfinite(vals)
    clean = np.where(finite, vals, np.nan)
    out = np.empty(len(starts), RECORD)
    out["bucket"] = bucket[starts]
    out["count"] = ends - starts
    out["bad"] = np.add.reduceat(~finite, starts)
    out["xbad"] = np.minimum.reduceat(np.where(finite, NONE, steps), starts)
    out["sum"] = np.add.reduceat(np.where(finite, vals, 0.0), starts)
    out["first"], out["xfirst"] = vals[starts], steps[starts]  # sorted: the earliest arrival at the lowest step
    out["last"], out["xlast"] = vals[ends - 1], steps[ends - 1]
    out["tfirst"], out["tlast"] = times[starts], times[ends - 1]
    for field, fold in (("min", np.fmin), ("max", np.fmax)):
        best = fold.reduceat(clean, starts)
        x = np.minimum.reduceat(np.where(clean == np.repeat(best, ends - starts), steps, NONE), starts)
        out[field], out["x" + field] = best, np.where(np.isnan(best), steps[starts], x)
    return out, None if group is None else group[starts]


def regroup(rec: np.ndarray, width: int, group: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray | None]:
    """Records of a finer level (or raw points) folded into buckets of ``width`` steps (per group)."""
    out = rec.copy()
    out["bucket"] = np.floor_divide(out["xfirst"], width)  # a record lies inside one bucket of any coarser level
    return reduce_groups(out, group)


def levels(steps: np.ndarray, vals: np.ndarray, times: np.ndarray) -> Iterator[tuple[int, np.ndarray]]:
    """(level, buckets) of these points at every level, finest first."""
    rec, _ = first_level(np.asarray(steps, np.int64), np.asarray(vals, np.float64), np.asarray(times, np.float64))
    for level, width in enumerate(WIDTHS):
        if level:
            rec, _ = regroup(rec, width)
        yield level, rec


def level_for(x0: float, x1: float, pixels: int) -> int:
    """The coarsest level with at least PER_COLUMN buckets per pixel column; -1: read raw points."""
    per_column = (x1 - x0) / max(pixels, 1)
    fits = [level for level, width in enumerate(WIDTHS) if width * PER_COLUMN <= per_column]
    return fits[-1] if fits else -1


def columns(rec: np.ndarray, level: int, x0: float, x1: float, pixels: int) -> tuple[np.ndarray, np.ndarray]:
    """The buckets ``rec`` of ``level`` (those overlapping steps x0..x1) folded per pixel column:
    one record per column that holds any (``bucket``: the column), and the columns' step bounds
    (``pixels`` + 1 of them).  Column edges fall on the bucket grid, so a bucket is in one column."""
    rec = rec.copy()
    width = WIDTHS[level]
    edges = np.rint(np.linspace(x0, x1, pixels + 1)[1:-1] / width)
    rec["bucket"] = np.searchsorted(edges, rec["bucket"], "right")
    bounds = np.concatenate([[np.floor(x0 / width)], edges, [np.floor(x1 / width) + 1]]) * width
    return reduce(rec), bounds


def whole(rec: np.ndarray) -> np.ndarray:
    """One record of all these buckets (count, x and y extent, non-finite count); empty if none."""
    if not len(rec):
        return rec.copy()
    rec = rec.copy()
    rec["bucket"] = 0
    return reduce(rec)
