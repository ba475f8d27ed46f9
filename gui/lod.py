"""Appendable chart series with a min/max level-of-detail pyramid, so drawing costs follow pixels.

A chart of 10M points cannot re-scan every point per frame (pyqtgraph's own peak downsampling
does). ``Series`` keeps, next to the raw points, the NaN-aware min and max of every bucket of
8, 64, 512, ... points. ``view(x0, x1, pixels)`` answers each pixel column's exact min and max
from a few buckets of one level (column edges moved onto bucket edges, by less than half a
column), and the two edge columns exactly down to the raw points, so the visible range's
extremes are exact and a single spike among millions of points stays visible at every zoom
(the README's promise: every point is kept; no sampling).

Non-finite values (NaN, +-Inf) are stored as they came. The pyramid and ``view()`` skip them
(a chart cannot place Inf), ``view()`` breaks the line at them (a NaN in the output, drawn as a
gap with ``connect='finite'``), and ``nonfinite()`` gives their x positions so they can be marked.

Memory: x and y are 16 B per point; the pyramid adds 16 B per 8 points over all levels
(2.3 B), the x[::16] index 0.5 B, and capacity grows by 1.25x, not 2x: at most ~23.5 B per
point, ~19-22 B in practice (``nbytes``). A smoothed copy (``Ema``) is a second Series.

x must be finite and is kept sorted: an append that goes backwards (a run resumed from a
checkpoint re-logs old steps) is merged in with a stable sort, so every point is kept, equal x
keep arrival order, and the pyramid is rebuilt from the first moved point on. That costs
O(moved tail), which is fine for the rare resumes; in-order appends cost amortized O(chunk).
"""

from __future__ import annotations

import numpy as np

FANOUT = 8  # points per bucket at level 1; each level up groups FANOUT buckets of the level below
GROWTH = 1.25  # capacity growth factor: amortized O(1) appends with at most 25 % slack (memory budget)
_MIN_CAPACITY = 64
_FAST_ENTRIES = 64  # a column spanning more entries of its level goes through _range_minmax
MAX_WAITING = 64  # chunks appended to a Series before they are joined unread (``Series._settle``)
STRIDE = 16  # every STRIDE-th x is kept in a small index: column edges are found in cache


class _Buffer:
    """A growable 1-D array; over-allocates by GROWTH, not 2x, to stay within 24 B per point."""

    __slots__ = ("data", "n")

    def __init__(self, dtype: type) -> None:
        self.data = np.empty(0, dtype)
        self.n = 0

    @property
    def view(self) -> np.ndarray:
        return self.data[: self.n]

    def resize(self, n: int) -> None:
        """Set the length to n, keeping the first min(n, old) values (new values are garbage)."""
        if n > len(self.data):
            grown = np.empty(max(n, int(len(self.data) * GROWTH), _MIN_CAPACITY), self.data.dtype)
            grown[: self.n] = self.data[: self.n]
            self.data = grown
        self.n = n

    def extend(self, values: np.ndarray) -> None:
        start = self.n
        self.resize(start + len(values))
        self.data[start: self.n] = values


def _finite_or_nan(values: np.ndarray) -> np.ndarray:
    """values with +-Inf turned into NaN (a copy only when there is an Inf)."""
    inf = np.isinf(values)
    if inf.any():
        values = values.copy()
        values[inf] = np.nan
    return values


def _reduce_pieces(arr: np.ndarray, starts: np.ndarray, ends: np.ndarray, fn: np.ufunc) -> np.ndarray:
    """fn.reduce(arr[s:e]) for sorted, disjoint, non-empty pieces, with one reduceat call.

    reduceat needs every index < len(arr), so a piece ending at the array's end is reduced
    one short and then folded with the last element. Back-to-back pieces (the usual case:
    adjacent pixel columns) need one index each instead of two.
    """
    stop = int(ends[-1])
    view = arr[:stop]  # the last index's reduction then covers one element, not the whole tail
    if (starts[1:] == ends[:-1]).all():
        idx, every = np.append(starts, stop - 1), 1
    else:
        idx, every = np.empty(2 * len(starts), np.intp), 2
        idx[0::2] = starts
        idx[1::2] = np.minimum(ends, stop - 1)
    out = fn.reduceat(view, idx)[:every * len(starts):every]
    at_end = ends == stop
    out[at_end] = fn(out[at_end], view[-1])
    return out


class Series:
    """(x, y) float64 points, appendable, with per-pixel min/max views of any x range."""

    def __init__(self) -> None:
        self._x = _Buffer(np.float64)
        self._y = _Buffer(np.float64)
        self._mins: list[_Buffer] = []  # _mins[k]: min of each full bucket of FANOUT**(k+1) points
        self._maxs: list[_Buffer] = []
        self._bad = _Buffer(np.int64)  # sorted indices of non-finite y
        self._xc = _Buffer(np.float64)  # x[::STRIDE]
        self._generation = 0  # bumped when old points move (an out-of-order append), for caches
        self._waiting: list[tuple[np.ndarray, np.ndarray]] = []  # appended chunks, joined when next read
        self._waiting_n = 0

    @classmethod
    def of(cls, xs: np.ndarray, ys: np.ndarray) -> Series:
        """A Series holding these points."""
        series = cls()
        series.append(xs, ys)
        return series

    def __len__(self) -> int:
        return self._x.n + self._waiting_n

    @property
    def x(self) -> np.ndarray:
        self._settle()
        return self._x.view

    @property
    def y(self) -> np.ndarray:
        self._settle()
        return self._y.view

    @property
    def generation(self) -> int:
        self._settle()
        return self._generation

    @property
    def nbytes(self) -> int:
        """Bytes held, capacity slack included (the memory budget is 24 B per stored point)."""
        self._settle()
        held = [self._x, self._y, self._bad, self._xc, *self._mins, *self._maxs]
        return sum(b.data.nbytes for b in held)

    def append(self, xs: np.ndarray, ys: np.ndarray) -> None:
        """Append a chunk; x must be finite. Out-of-order x is merged in (see the module doc)."""
        xs = np.array(xs, np.float64).ravel()  # copies: the chunk is read after the caller is done with it
        ys = np.array(ys, np.float64).ravel()
        if len(xs) != len(ys):
            raise ValueError(f"x and y differ in length: {len(xs)} != {len(ys)}")
        if not len(xs):
            return
        if not np.isfinite(xs).all():
            raise ValueError("x values must be finite")
        self._waiting.append((xs, ys))
        self._waiting_n += len(xs)
        if len(self._waiting) >= MAX_WAITING:  # a curve nobody looks at (its chart out of sight) stays compact
            self._settle()

    def _settle(self) -> None:
        """Join the chunks appended since the last read, in one pass: a live chart's curve gets a chunk
        per batch of points and is read once a frame (or not at all while out of sight), and the pyramid
        cost about as much per chunk as per point (bench_load.py: 32 runs x 10 metrics, a batch every
        20 ms).  Appending them one by one gives the same points in the same order (a stable merge)."""
        if not self._waiting:
            return
        chunks, self._waiting, self._waiting_n = self._waiting, [], 0
        xs = chunks[0][0] if len(chunks) == 1 else np.concatenate([c[0] for c in chunks])
        ys = chunks[0][1] if len(chunks) == 1 else np.concatenate([c[1] for c in chunks])
        n = self._x.n
        in_order = (n == 0 or xs[0] >= self._x.data[n - 1]) and not (np.diff(xs) < 0).any()
        if in_order:
            self._x.extend(xs)
            self._y.extend(ys)
            self._rebuild_from(n)
            return
        first = int(np.searchsorted(self.x, xs.min(), "right"))  # points before it stay put
        tail_x = np.concatenate([self.x[first:], xs])
        tail_y = np.concatenate([self.y[first:], ys])
        order = np.argsort(tail_x, kind="stable")
        self._x.n = self._y.n = first
        self._x.extend(tail_x[order])
        self._y.extend(tail_y[order])
        self._generation += 1
        self._rebuild_from(first)

    def _rebuild_from(self, first: int) -> None:
        """Recompute the pyramid and non-finite index for points first.. (only the tail changes)."""
        n = self._x.n
        bad = self._bad.view
        self._bad.n = int(np.searchsorted(bad, first))
        self._bad.extend(first + np.flatnonzero(~np.isfinite(self.y[first:])))
        self._xc.n = min(self._xc.n, -(-first // STRIDE))
        self._xc.extend(self.x[self._xc.n * STRIDE::STRIDE])
        below_min = below_max = None  # level k-1's arrays; None means the raw y
        size, k = FANOUT, 0
        while n // size:
            if k == len(self._mins):
                self._mins.append(_Buffer(np.float64))
                self._maxs.append(_Buffer(np.float64))
            mins, maxs = self._mins[k], self._maxs[k]
            keep, count = min(first // size, mins.n), n // size
            lo, hi = keep * FANOUT, count * FANOUT  # the range of level k-1 entries to regroup
            if below_min is None:
                seg = _finite_or_nan(self.y[lo:hi]).reshape(-1, FANOUT)
                seg_min = seg_max = seg
            else:
                seg_min = below_min[lo:hi].reshape(-1, FANOUT)
                seg_max = below_max[lo:hi].reshape(-1, FANOUT)
            mins.resize(keep)
            maxs.resize(keep)
            mins.extend(np.fmin.reduce(seg_min, axis=1))
            maxs.extend(np.fmax.reduce(seg_max, axis=1))
            below_min, below_max = mins.view, maxs.view
            size, k = size * FANOUT, k + 1

    def view(self, x0: float, x1: float, pixels: int) -> tuple[np.ndarray, np.ndarray]:
        """Points to draw x0..x1 on ``pixels`` columns: raw points when they fit, otherwise per
        column its min then its max (both at the column's first x), plus a NaN after any column
        holding a non-finite value. One neighbour point on each side keeps the line to the edges.
        """
        n = len(self)
        if x1 < x0:
            x0, x1 = x1, x0
        if n == 0 or pixels < 1:
            return np.empty(0), np.empty(0)
        x, y = self.x, self.y
        a, b = int(np.searchsorted(x, x0, "left")), int(np.searchsorted(x, x1, "right"))
        lo, hi = max(a - 1, 0), min(b + 1, n)
        if b - a <= 2 * pixels:
            return x[lo:hi].copy(), np.where(np.isfinite(y[lo:hi]), y[lo:hi], np.nan)
        level = self._level_for((b - a) / pixels)
        inner = self._boundaries(np.linspace(x0, x1, pixels + 1)[1:-1], a, b, level, (x1 - x0) / pixels)
        bounds = np.concatenate([[a], inner, [b]])
        starts, ends = bounds[:-1], bounds[1:]
        filled = ends > starts
        starts, ends = starts[filled], ends[filled]
        mins, maxs = self._columns_minmax(starts, ends, level)
        bad = self._bad.view
        gap = np.searchsorted(bad, ends) > np.searchsorted(bad, starts)
        cols = np.empty((len(starts), 3))
        cols[:, 0], cols[:, 1], cols[:, 2] = mins, maxs, np.nan
        keep = np.ones((len(starts), 3), bool)
        keep[:, 2] = gap
        ys = cols[keep]
        xs = np.repeat(x[starts], 2 + gap.astype(np.intp))
        before, after = slice(lo, a), slice(b, hi)
        return (np.concatenate([x[before], xs, x[after]]),
                np.concatenate([_finite_or_nan(y[before]), ys, _finite_or_nan(y[after])]))

    def _level_for(self, per_column: float) -> int:
        """The coarsest pyramid level with at least 4 buckets per pixel column (0: raw)."""
        level = 0
        while level < len(self._mins) and FANOUT ** (level + 1) * 4 <= per_column:
            level += 1
        return level

    def _boundaries(self, edges: np.ndarray, a: int, b: int, level: int, column_dx: float) -> np.ndarray:
        """Index of the first point of each pixel column, on the level's bucket grid.

        A boundary on the grid makes its column a few whole buckets; it may be off by less
        than a bucket, which is invisible while a bucket spans under half a column of x. Where
        it spans more (sparse x, e.g. wall time across a pause) the boundary is exact. Searching
        the bucket grid, not the 10M-point x, also keeps the search in cache.
        """
        x = self.x
        if level == 0:
            return np.searchsorted(x[a:b], edges, "left") + a
        size = FANOUT ** level
        k0, k1 = a // size, -(-b // size)
        if size >= STRIDE:
            grid = self._xc.view[k0 * (size // STRIDE): k1 * (size // STRIDE): size // STRIDE]
        else:
            grid = x[k0 * size: k1 * size: size]
        at = np.searchsorted(grid, edges, "left")  # grid[at-1] < edge <= grid[at]
        bounds = (at + k0) * size
        wide = (at == 0) | (at == len(grid))
        inside = np.flatnonzero(~wide)
        wide[inside] = grid[at[inside]] - grid[at[inside] - 1] > column_dx / 2
        bounds[wide] = np.searchsorted(x, edges[wide], "left")
        return np.maximum.accumulate(np.clip(bounds, a, b))

    def _columns_minmax(self, starts: np.ndarray, ends: np.ndarray, level: int) -> tuple[np.ndarray, np.ndarray]:
        """Min and max of each column: one reduceat for the columns on bucket edges of
        ``level``, the exact decomposition for the rest (the edge columns, sparse stretches)."""
        mins = np.empty(len(starts))
        maxs = np.empty(len(starts))
        size = FANOUT ** level
        fast = (starts % size == 0) & (ends % size == 0) & (ends - starts <= _FAST_ENTRIES * size)
        if fast.any():
            mins[fast], maxs[fast] = self._pieces_minmax(level, starts[fast] // size, ends[fast] // size)
        rest = np.flatnonzero(~fast)
        if len(rest) <= 4:  # usually just the two edge columns: scalar code is cheaper
            for i in rest:
                mins[i], maxs[i] = self._one_range_minmax(int(starts[i]), int(ends[i]))
        else:
            mins[rest], maxs[rest] = self._range_minmax(starts[rest], ends[rest])
        return mins, maxs

    def _one_range_minmax(self, lo: int, hi: int) -> tuple[float, float]:
        """_range_minmax for a single range, in plain Python (no per-level array set-up)."""
        low, high = np.nan, np.nan
        level = 0
        while lo < hi:
            up_lo, up_hi = -(-lo // FANOUT), hi // FANOUT
            if up_lo >= up_hi:
                pieces = [(lo, hi)]
            else:
                pieces = [(lo, up_lo * FANOUT), (up_hi * FANOUT, hi)]
            for s, e in pieces:
                if s < e:
                    if level == 0:
                        seg_min = seg_max = _finite_or_nan(self.y[s:e])
                    else:
                        seg_min, seg_max = self._mins[level - 1].view[s:e], self._maxs[level - 1].view[s:e]
                    low = np.fmin(low, np.fmin.reduce(seg_min))
                    high = np.fmax(high, np.fmax.reduce(seg_max))
            if up_lo >= up_hi:
                break
            lo, hi, level = up_lo, up_hi, level + 1
        return float(low), float(high)

    def _range_minmax(self, starts: np.ndarray, ends: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Exact NaN-skipping min and max of y[s:e] for sorted disjoint ranges, via the pyramid.

        Each range is cut into, per level, a left and a right piece of fewer than FANOUT
        buckets, down to the level where no full bucket of the next level fits: work per range
        is O(FANOUT * levels), independent of how many points it spans.
        """
        mins = np.full(len(starts), np.nan)
        maxs = np.full(len(starts), np.nan)
        lo, hi = starts.copy(), ends.copy()  # in units of the current level's entries
        active = lo < hi
        level = 0
        while active.any():
            up_lo, up_hi = -(-lo // FANOUT), hi // FANOUT
            last = up_lo >= up_hi  # no full bucket of the level above inside: finish here
            left_end = np.where(last, hi, up_lo * FANOUT)
            right_start = np.where(last, hi, up_hi * FANOUT)
            cols = np.flatnonzero(active)
            s = np.stack([lo[cols], right_start[cols]], axis=1).ravel()
            e = np.stack([left_end[cols], hi[cols]], axis=1).ravel()
            piece_min, piece_max = self._pieces_minmax(level, s, e)
            mins[cols] = np.fmin(mins[cols], np.fmin(piece_min[0::2], piece_min[1::2]))
            maxs[cols] = np.fmax(maxs[cols], np.fmax(piece_max[0::2], piece_max[1::2]))
            active &= ~last
            lo, hi, level = up_lo, up_hi, level + 1
        return mins, maxs

    def _pieces_minmax(self, level: int, s: np.ndarray, e: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Min and max of entries s:e of one level (0: raw y) per sorted disjoint piece; NaN if empty."""
        pmin = np.full(len(s), np.nan)
        pmax = np.full(len(s), np.nan)
        filled = s < e
        if not filled.any():
            return pmin, pmax
        s, e = s[filled], e[filled]
        if level == 0:
            arr_min = arr_max = self.y
        else:
            arr_min, arr_max = self._mins[level - 1].view, self._maxs[level - 1].view
        got_min = _reduce_pieces(arr_min, s, e, np.fmin)
        got_max = _reduce_pieces(arr_max, s, e, np.fmax)
        if level == 0:  # raw y may hold +-Inf, which the pyramid skips: redo those few pieces
            for i in np.flatnonzero(np.isinf(got_min) | np.isinf(got_max)):
                seg = _finite_or_nan(arr_min[s[i]:e[i]])
                got_min[i], got_max[i] = np.fmin.reduce(seg), np.fmax.reduce(seg)
        pmin[filled], pmax[filled] = got_min, got_max
        return pmin, pmax

    def nonfinite(self, x0: float, x1: float) -> np.ndarray:
        """x of every NaN/Inf value with x0 <= x <= x1, for gap markers."""
        x, bad = self.x, self._bad.view
        a, b = np.searchsorted(x, min(x0, x1), "left"), np.searchsorted(x, max(x0, x1), "right")
        return x[bad[np.searchsorted(bad, a): np.searchsorted(bad, b)]]

    def nearest(self, xq: float) -> tuple[float, float] | None:
        """The stored point whose x is nearest xq (for a crosshair readout); None when empty."""
        n = len(self)
        if not n:
            return None
        x = self.x
        i = int(np.searchsorted(x, xq))
        if i == n or (i > 0 and xq - x[i - 1] <= x[i] - xq):
            i -= 1
        return float(x[i]), float(self.y[i])

    def x_range(self) -> tuple[float, float] | None:
        return (float(self.x[0]), float(self.x[-1])) if len(self) else None

    def y_range(self) -> tuple[float, float] | None:
        """Min and max of the finite values, from the pyramid (cost per level, not per point);
        None when there is none."""
        self._settle()
        low, high = self._one_range_minmax(0, len(self))
        return None if np.isnan(low) else (low, high)

    @property
    def all_finite(self) -> bool:
        self._settle()
        return self._bad.n == 0


def view_of(xs: np.ndarray, ys: np.ndarray, x0: float, x1: float, pixels: int) -> tuple[np.ndarray, np.ndarray]:
    """``Series.view`` of these points (x sorted) for one frame: the points themselves when they fit
    two to a column (a view drawn from tiers, a column each), so no pyramid is built for nothing."""
    if len(xs) <= 2 * pixels:
        return xs, np.where(np.isinf(ys), np.nan, ys)
    return Series.of(xs, ys).view(x0, x1, pixels)


def ema(values: np.ndarray, alpha: float, last: float = 0.0, count: float = 0,
        weights: np.ndarray | None = None) -> tuple[np.ndarray, float, float]:
    """TensorBoard's debiased EMA: ``alpha`` is its smoothing slider (weight of the past, 0 = raw).

    Non-finite values pass through unchanged and do not enter the average. ``last`` and
    ``count`` carry the state between chunks, so a growing series is smoothed incrementally.
    ``weights``: how many points each value stands for (a column of a tiered view: its mean), as
    if each had been logged that many times.  The recurrence runs as a log-step parallel scan in
    numpy, not a Python loop.  Returns (smoothed, last, count).
    """
    v = np.asarray(values, np.float64)
    if not len(v):
        return v.copy(), last, count
    finite = np.isfinite(v)
    held = finite if weights is None else np.where(finite, weights, 0.0)
    decay = np.where(finite, alpha, 1.0) if weights is None else alpha ** held
    mul = decay.copy()  # s_i = mul_i * s_(i-1) + add_i
    add = np.where(finite, (1.0 - decay) * np.where(finite, v, 0.0), 0.0)
    add[0] += mul[0] * last
    step = 1
    while step < len(v):  # Hillis-Steele scan of the affine maps
        add[step:] = add[step:] + mul[step:] * add[:-step]
        mul[step:] = mul[step:] * mul[:-step]
        step *= 2
    counts = count + np.cumsum(held)
    with np.errstate(divide="ignore", invalid="ignore"):
        smoothed = np.where(finite, add / (1.0 - alpha ** counts), v)
    return smoothed, float(add[-1]), counts[-1].item()


class Ema:
    """An EMA-smoothed copy of a Series, kept current by ``update()`` (only new points cost)."""

    def __init__(self, source: Series, alpha: float) -> None:
        if not 0.0 <= alpha < 1.0:
            raise ValueError(f"alpha must be in [0, 1): {alpha}")
        self.source, self.alpha = source, alpha
        self._reset()

    def _reset(self) -> None:
        self.series = Series()
        self._last, self._count, self._generation = 0.0, 0, self.source.generation

    def update(self) -> Series:
        if self._generation != self.source.generation:  # old points moved: smooth again
            self._reset()
        done = len(self.series)
        if done < len(self.source):
            smoothed, self._last, self._count = ema(self.source.y[done:], self.alpha, self._last, self._count)
            self.series.append(self.source.x[done:], smoothed)
        return self.series
