"""A chart curve read from the app store's tiers instead of held in memory.

Why: a stored run of 100 M points per metric would take 2 GB per metric as a ``lod.Series``;
read through the tiers (``pilothouse.gui.tiers``), each frame costs a few buckets per pixel
column and the app holds only what it draws.  ``StoredSeries`` answers what a chart asks of a
``Series`` (``pilothouse.gui.curves.CurveSource``) from the store.  Live points need no copy (nor
decoding) here: the link writes a page to the store (tiers included) before the UI hears of it, so
``grew`` only forgets the cached extent and the next frame reads them.  x is the step, or with
``by_time`` the wall time (the buckets keep the times of their first and last points).  A smoothed
copy follows the columns' means of the frame drawn (``pilothouse.gui.tiers.smoothed``).
``StoredGroup`` draws a group of such runs (a mean and a min/max band) the same way.
"""

from __future__ import annotations

from collections.abc import Iterable

import numpy as np

from pilothouse.gui.groups import band
from pilothouse.gui.local_store import LocalStore
from pilothouse.gui.lod import Series, view_of
from pilothouse.gui.tiers import Clip, TierView

STORED_POINTS = 2_000_000  # a stored metric longer than this is charted from the tiers


class StoredSeries:
    """One metric of one run in a ``LocalStore``, read per frame from its tiers."""

    generation = 0  # stored points never move (the tiers fold re-logged steps in place)

    def __init__(self, store: LocalStore, agent: str, run: str, metric: str, by_time: bool = False,
                 clip: Clip = None) -> None:
        self.store, self.key, self.by_time, self.clip = store, (agent, run, metric), by_time, clip
        self._summary: np.ndarray | None = None
        self._last: tuple[float, float, TierView] | None = None

    def _whole(self) -> np.ndarray:
        if self._summary is None:
            self._summary = self.store.summary(*self.key, self.clip)
        return self._summary

    def __len__(self) -> int:
        whole = self._whole()
        return int(whole["count"][0]) if len(whole) else 0

    @property
    def nbytes(self) -> int:
        """Bytes held: the last frame's arrays (the points stay on disk)."""
        return sum(a.nbytes for a in (self._last[2].xs, self._last[2].ys)) if self._last else 0

    def grew(self) -> None:
        """New live points are already in the store: only the cached extent is out of date."""
        self._summary = None

    @property
    def drawn(self) -> TierView | None:
        """The view of the last frame (what its smoothed copy follows)."""
        return self._last[2] if self._last else None

    def view(self, x0: float, x1: float, pixels: int) -> tuple[np.ndarray, np.ndarray]:
        view = (self.store.time_view if self.by_time else self.store.view)(*self.key, x0, x1, pixels, self.clip)
        self._last = (x0, x1, view)
        return view.xs, view.ys

    def nonfinite(self, x0: float, x1: float) -> np.ndarray:
        """x of non-finite values in x0..x1, one per pixel column of the last frame drawn."""
        if self._last is None or self._last[:2] != (x0, x1):
            self.view(x0, x1, 1000)
        marks = self._last[2].marks
        return marks[(marks >= min(x0, x1)) & (marks <= max(x0, x1))]

    def nearest(self, xq: float) -> tuple[float, float] | None:
        return (self.store.nearest_time if self.by_time else self.store.nearest)(*self.key, xq, self.clip)

    def x_range(self) -> tuple[float, float] | None:
        whole = self._whole()
        first, last = ("tfirst", "tlast") if self.by_time else ("xfirst", "xlast")
        return (float(whole[first][0]), float(whole[last][0])) if len(whole) else None

    def y_range(self) -> tuple[float, float] | None:
        whole = self._whole()
        return None if not len(whole) or np.isnan(whole["min"][0]) else (float(whole["min"][0]),
                                                                           float(whole["max"][0]))

    @property
    def all_finite(self) -> bool:
        whole = self._whole()
        return not len(whole) or int(whole["bad"][0]) == 0


class _Stored:
    """What a curve made of several stored series (``parts``) answers as their sum or hull."""

    generation = 0

    def __init__(self, parts: list[StoredSeries]) -> None:
        self.parts = parts
        self.drawn: TierView | None = None

    def __len__(self) -> int:
        return sum(len(p) for p in self.parts)

    @property
    def nbytes(self) -> int:
        return sum(p.nbytes for p in self.parts)

    def grew(self) -> None:
        """New live points are already in the store: the parts forget their cached extents."""
        for p in self.parts:
            p.grew()

    def x_range(self) -> tuple[float, float] | None:
        return _hull(p.x_range() for p in self.parts)

    def y_range(self) -> tuple[float, float] | None:
        return _hull(p.y_range() for p in self.parts)

    @property
    def all_finite(self) -> bool:
        return all(p.all_finite for p in self.parts)


class StoredPieces(_Stored):
    """One curve of a run across attempts, read per frame from the tiers: each piece an attempt's
    tiers over the steps it keeps (``StoredSeries`` with a clip: those before a later attempt's
    first step for the run's curve, those from there on for its superseded points), in step order;
    a frame draws each piece on its share of the columns, joined into one line."""

    def grew(self) -> None:
        """Live points are the latest attempt's (a new attempt reloads the charts): only the last
        piece's extent is out of date.  A clipped piece's extent splits buckets at its edges down to
        points, so forgetting every piece's would cost each live frame that much per piece."""
        if self.parts:
            self.parts[-1].grew()

    def view(self, x0: float, x1: float, pixels: int) -> tuple[np.ndarray, np.ndarray]:
        x0, x1 = min(x0, x1), max(x0, x1)
        drawn = []
        for piece in self.parts:
            extent = piece.x_range()
            if extent is None or extent[1] < x0 or extent[0] > x1:
                continue
            a, b = max(x0, extent[0]), min(x1, extent[1])
            piece.view(a, b, max(round(pixels * (b - a) / (x1 - x0)) if x1 > x0 else pixels, 1))
            drawn.append(piece.drawn)
        empty = np.empty(0)
        if not drawn:
            self.drawn = None
            return empty, empty
        joined = [np.concatenate(parts) for parts in zip(*((v.xs, v.ys, v.marks, v.centers, v.means, v.weights)
                                                            for v in drawn))]
        self.drawn = TierView(*joined[:3], min(v.level for v in drawn), empty, empty, empty, empty, *joined[3:])
        return self.drawn.xs, self.drawn.ys

    def nonfinite(self, x0: float, x1: float) -> np.ndarray:
        marks = self.drawn.marks if self.drawn is not None else np.empty(0)
        return marks[(marks >= min(x0, x1)) & (marks <= max(x0, x1))]

    def nearest(self, xq: float) -> tuple[float, float] | None:
        found = [p for piece in self.parts if (p := piece.nearest(xq)) is not None]
        return min(found, key=lambda p: abs(p[0] - xq)) if found else None


class StoredGroup(_Stored):
    """A group of stored runs' metric read per frame from their tiers, as a chart asks of a group's mean
    curve: per pixel column (every run's view of a range has the same columns), the mean of the runs'
    column means and the lowest min and highest max among them, which is the band ``groups.band``
    gives per step as the chart draws it per column; zoomed in to the raw points, ``band`` itself."""

    def __init__(self, members: list[StoredSeries]) -> None:
        super().__init__(members)
        empty = np.empty(0)
        self._band = (empty, empty, empty, empty, empty.astype(np.int64))  # xs, mean, lo, hi, count

    @property
    def nbytes(self) -> int:
        return super().nbytes + sum(a.nbytes for a in self._band)

    def view(self, x0: float, x1: float, pixels: int) -> tuple[np.ndarray, np.ndarray]:
        views = []
        for m in self.parts:
            m.view(x0, x1, pixels)
            views.append(m.drawn)
        if all(v.level >= 0 for v in views):
            xs, mean, lo, hi, count, weights = _columns(views)
        else:
            xs, mean, lo, hi, count = band([(v.centers, v.means) for v in views])
            weights = np.ones(len(xs))
        self._band = (xs, mean, lo, hi, count)
        finite = np.isfinite(mean)
        empty = np.empty(0)
        self.drawn = TierView(xs, mean, empty, views[0].level if views else -1, empty, empty, lo, hi, xs[finite],
                              mean[finite], weights[finite])
        return view_of(xs, mean, x0, x1, pixels)

    def edges(self) -> tuple[Series, Series, np.ndarray]:
        """The last frame's band: its low and high edges and how many runs count per x."""
        xs, _, lo, hi, count = self._band
        return Series.of(xs, lo), Series.of(xs, hi), count

    def nonfinite(self, x0: float, x1: float) -> np.ndarray:
        return np.empty(0)

    def nearest(self, xq: float) -> tuple[float, float] | None:
        """The last frame's mean nearest xq."""
        xs, mean, *_ = self._band
        if not len(xs):
            return None
        i = int(np.argmin(np.abs(xs - xq)))
        return float(xs[i]), float(mean[i])


def _hull(ranges: Iterable[tuple[float, float] | None]) -> tuple[float, float] | None:
    """The smallest range holding these (None: no range)."""
    got = [r for r in ranges if r is not None]
    return (min(r[0] for r in got), max(r[1] for r in got)) if got else None


def _columns(views: list[TierView]) -> tuple[np.ndarray, ...]:
    """(xs, mean, lo, hi, count, weights) of the runs' views folded per column: xs the mean of the
    runs' column middles, weights their mean number of points (for smoothing)."""
    starts = np.unique(np.concatenate([v.starts for v in views]))
    n = len(starts)
    total, middles, points = np.zeros(n), np.zeros(n), np.zeros(n)
    count = np.zeros(n, np.int64)
    lo, hi = np.full(n, np.nan), np.full(n, np.nan)
    for v in views:
        at = np.searchsorted(starts, v.starts)
        lo[at], hi[at] = np.fmin(lo[at], v.mins), np.fmax(hi[at], v.maxs)
        filled = at[~np.isnan(v.mins)]  # the columns with a finite point: those of means, centers and weights
        total[filled] += v.means
        middles[filled] += v.centers
        points[filled] += v.weights
        count[filled] += 1
    keep = count > 0
    count = count[keep]
    return (middles[keep] / count, total[keep] / count, lo[keep], hi[keep], count, points[keep] / count)

