"""``metric_history``: a metric over a step range as at most N buckets (min, max, mean, NaN/Inf count).

Why buckets: a model asking "did the reward collapse?" needs the curve's shape, not 10 M points in its
context.  A small run is read point by point and folded here into N buckets of equal step width (exact
at any width); a large one is folded by its agent from the tiers it keeps (``Client.tiers``, as the
app draws a run it has not read yet): the answer costs the same whatever the run's length, and its
buckets are then at least as wide as the tier level read (``resolution``).  Both give the same record
(``pilothouse.store.tiers.RECORD``): exact counts, min and max, the sum of the finite values, and
the step of the first non-finite one.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from pilothouse.client import Client
from pilothouse.mcp_tools.reach import Answer, Reach, ToolFailure
from pilothouse.mcp_tools.reads import bounded, run_row
from pilothouse.mcp_tools.shape import number, plural
from pilothouse.store.tiers import LEVELS, RECORD, WIDTHS, level_for, points, reduce, whole
from pilothouse.text import fmt_value, printable
from pilothouse.wire.checks import INT64_MAX

MAX_BUCKETS = 500
RAW_POINTS = 200_000  # a run of at most this many points (all its metrics) is read point by point
ALL = (-2.0 ** 63, 2.0 ** 63)


def metric_history(reach: Reach, run: str, metric: str, start_step: int | None = None, end_step: int | None = None,
                   buckets: int = 50, agent: str | None = None) -> Answer:
    bounded(buckets, "buckets", MAX_BUCKETS)
    for name, value in (("start_step", start_step), ("end_step", end_step)):
        if value is not None and (isinstance(value, bool) or not isinstance(value, int) or abs(value) > INT64_MAX):
            raise ToolFailure(f"{name} must be a step (a whole number), got {value!r}")
    if start_step is not None and end_step is not None and end_step < start_step:
        raise ToolFailure(f"end_step {end_step} is before start_step {start_step}")
    if not isinstance(metric, str) or not metric:
        raise ToolFailure("metric must be a metric name (run_summary lists a run's last values)")
    url, run_id = reach.locate(run, agent)
    with reach.client(url) as client:
        row = run_row(client, run_id)
        if (row.get("points") or 0) <= RAW_POINTS:
            rec, lo, hi, resolution = _from_points(client, run_id, row, metric, start_step, end_step, buckets)
        else:
            rec, lo, hi, resolution = _from_tiers(client, run_id, row, metric, start_step, end_step, buckets)
    return _answer(url, run_id, metric, rec, lo, hi, resolution)


def _unknown(run_id: str, row: dict, metric: str) -> ToolFailure:
    names = list(row.get("summary") or {})
    some = ", ".join(names[:20]) + (f" (+{row['metrics'] - 20} more)" if (row.get("metrics") or 0) > 20 else "")
    return ToolFailure(printable(f"run {run_id} has no metric {metric!r}; its metrics: {some or 'none yet'}"))


def _from_points(client: Client, run_id: str, row: dict, metric: str, start: int | None, end: int | None,
                 buckets: int) -> tuple[np.ndarray, int, int, int]:
    steps, vals, times = client.series(run_id, metric)
    if not len(steps):
        raise _unknown(run_id, row, metric)
    lo = int(steps.min()) if start is None else start
    hi = int(steps.max()) if end is None else end
    keep = (steps >= lo) & (steps <= hi)
    width = max(1, math.ceil((hi - lo + 1) / buckets))
    rec = points(steps[keep], vals[keep], times[keep])
    rec["bucket"] = (rec["bucket"] - lo) // width
    return reduce(rec), lo, hi, 1


def _from_tiers(client: Client, run_id: str, row: dict, metric: str, start: int | None, end: int | None,
                buckets: int) -> tuple[np.ndarray, int, int, int]:
    got = client.tiers(run_id, [metric], *ALL, level=LEVELS - 1)
    if got is None:
        raise ToolFailure(f"the agent is still folding run {run_id}'s history ({row.get('points')} points) into "
                          "the tiers this answer reads: ask again in a minute")
    extent = whole(got[metric])
    if not len(extent):
        raise _unknown(run_id, row, metric)
    lo = int(extent["xfirst"][0]) if start is None else start
    hi = int(extent["xlast"][0]) if end is None else end
    level = max(level_for(lo, hi + 1, buckets), 0)
    got = client.tiers(run_id, [metric], lo, hi + 1, buckets, level=level, by_column=True)
    if got is None:
        raise ToolFailure(f"the agent is rebuilding run {run_id}'s tiers: ask again in a minute")
    return got[metric], lo, hi, WIDTHS[level]


def _bucket(r: np.void) -> dict[str, Any]:
    finite = int(r["count"]) - int(r["bad"])
    return {"from_step": int(r["xfirst"]), "to_step": int(r["xlast"]), "count": int(r["count"]),
            "min": number(float(r["min"])) if finite else None, "max": number(float(r["max"])) if finite else None,
            "mean": number(float(r["sum"]) / finite) if finite else None, "nonfinite": int(r["bad"])}


def _answer(url: str, run_id: str, metric: str, rec: np.ndarray, lo: int, hi: int, resolution: int) -> Answer:
    rec = rec[np.argsort(rec["xfirst"], kind="stable")] if len(rec) else np.empty(0, RECORD)
    rows = [_bucket(r) for r in rec]
    count, bad = int(rec["count"].sum()), int(rec["bad"].sum())
    first_bad = int(rec["xbad"].min()) if bad else None
    data: dict[str, Any] = {"run": run_id, "agent": url, "metric": metric, "start_step": lo, "end_step": hi,
                            "points": count, "nonfinite": bad, "first_nonfinite_step": first_bad,
                            "resolution": resolution, "buckets": rows}
    text = f"{metric} of run {run_id}, steps {lo}..{hi}: {plural(count, 'point')} in {plural(len(rows), 'bucket')}"
    finite = rec[rec["count"] > rec["bad"]]
    if len(finite):
        low, high = float(np.nanmin(finite["min"])), float(np.nanmax(finite["max"]))
        last = rec[int(np.argmax(rec["xlast"]))]
        data.update({"min": number(low), "max": number(high), "last": number(float(last["last"])),
                     "last_step": int(last["xlast"])})
        text += (f"; min {fmt_value(low)}, max {fmt_value(high)}, last {_text(float(last['last']))} "
                 f"at step {int(last['xlast'])}")
    if bad:
        text += f"; {plural(bad, 'NaN/Inf value')}, the first at step {first_bad}"
    return Answer(printable(text), data)


def _text(value: float) -> str:
    return fmt_value(value) if math.isfinite(value) else repr(value)
