"""pilothouse.gui.lod: per-pixel min/max views are exact at every zoom, NaN/Inf are gaps, memory fits."""

from __future__ import annotations

import math

import numpy as np
import pytest

from pilothouse.gui.lod import Ema, Series, ema

N = 1_000_000


@pytest.fixture(scope="module")
def big():
    rng = np.random.default_rng(7)
    x = np.arange(N, dtype=np.float64)
    y = np.cumsum(rng.normal(size=N))
    y[rng.integers(0, N, 20)] = np.nan
    y[rng.integers(0, N, 5)] = np.inf
    y[rng.integers(0, N, 5)] = -np.inf
    s = Series()
    s.append(x, y)
    return s, x, y


def visible(xs, ys, x0, x1):
    inside = (xs >= x0) & (xs <= x1)  # view() adds one neighbour point on each side
    return ys[inside]


def finite_extremes(y):
    f = y[np.isfinite(y)]
    return f.min(), f.max()


def check_view(s: Series, x: np.ndarray, y: np.ndarray, x0: float, x1: float, pixels: int):
    """The drawn min and max of [x0, x1] are the data's finite extremes; few points per pixel."""
    xs, ys = s.view(x0, x1, pixels)
    ref = y[(x >= x0) & (x <= x1)]
    if np.isfinite(ref).any():
        shown = visible(xs, ys, x0, x1)
        assert (np.nanmin(shown), np.nanmax(shown)) == finite_extremes(ref), (x0, x1, pixels)
    assert len(xs) <= 3 * pixels + 2
    return xs, ys


def test_min_and_max_of_every_visible_range_are_exact(big):
    s, x, y = big
    rng = np.random.default_rng(1)
    for _ in range(200):
        a, b = np.sort(rng.integers(0, N, 2))
        x0, x1 = a + rng.random(), b + rng.random()  # ranges need not start on a point
        pixels = int(rng.integers(1, 3000))
        check_view(s, x, y, x0, x1, pixels)


def test_exact_with_uneven_x_like_wall_time_with_pauses():
    rng = np.random.default_rng(2)
    n = 300_000
    dt = rng.exponential(1.0, n)
    dt[rng.integers(0, n, 30)] = 1e5  # the run was paused: long empty stretches of x
    x = np.cumsum(dt)
    y = rng.normal(size=n)
    y[rng.integers(0, n, 10)] = np.nan
    s = Series()
    s.append(x, y)
    order = np.argsort(y)  # y values are distinct: a value tells which point it was
    sorted_y = y[order]
    for _ in range(100):
        x0, x1 = np.sort(rng.uniform(x[0], x[-1], 2))
        pixels = int(rng.integers(50, 2000))
        xs, ys = check_view(s, x, y, x0, x1, pixels)
        drawn = np.isfinite(ys)  # every drawn value is a real point, drawn near its own x
        where = np.searchsorted(sorted_y, ys[drawn])
        assert (sorted_y[where] == ys[drawn]).all()
        assert (np.abs(x[order[where]] - xs[drawn]) <= 2 * (x1 - x0) / pixels).all()


def test_a_single_spike_survives_at_500_pixels():
    y = np.zeros(N)
    y[654_321] = 1e6
    y[123_456] = -1e6
    s = Series()
    s.append(np.arange(N, dtype=float), y)
    xs, ys = s.view(0, N - 1, 500)
    assert len(xs) <= 2 * 500 + 2
    assert ys.max() == 1e6 and ys.min() == -1e6
    assert abs(xs[ys.argmax()] - 654_321) <= N / 500  # drawn in the right pixel column


def test_small_chunks_equal_one_big_append(big):
    _, x, y = big
    m = 200_000
    pieces = Series()
    rng = np.random.default_rng(3)
    cuts = np.sort(rng.integers(0, m, 400))
    for xs, ys in zip(np.split(x[:m], cuts), np.split(y[:m], cuts)):
        pieces.append(xs, ys)
    one = Series()
    one.append(x[:m], y[:m])
    for x0, x1, px in [(0, m, 700), (1234.5, 98765.4, 333), (m - 5000, m, 100), (10, 50, 800)]:
        for got, want in zip(pieces.view(x0, x1, px), one.view(x0, x1, px)):
            np.testing.assert_array_equal(got, want)
    np.testing.assert_array_equal(pieces.nonfinite(0, m), one.nonfinite(0, m))


def test_out_of_order_appends_keep_every_point_sorted():
    s = Series()
    s.append(np.arange(0, 100.0), np.arange(0, 100.0))
    s.append(np.arange(50, 80.0), -np.arange(50, 80.0))  # a run resumed from a checkpoint
    assert len(s) == 130 and (np.diff(s.x) >= 0).all()
    _, ys = s.view(0, 100, 10)  # decimated: 130 points on 10 pixels
    assert ys.min() == -79 and ys.max() == 99


def test_chunks_joined_when_read_equal_chunks_read_one_by_one_out_of_order_included():
    """``append`` only queues a chunk (a live curve gets one per batch, is read once a frame): joining
    them on the next read gives the very points, order of equal x included, pyramid and gap marks."""
    rng = np.random.default_rng(11)
    chunks = []
    for i in range(300):
        xs = np.sort(rng.integers(0, 4_000, rng.integers(1, 40))).astype(float) if i % 7 == 3 \
            else np.arange(i * 20, i * 20 + rng.integers(1, 30), dtype=float)  # every 7th resumes from before
        ys = rng.normal(size=len(xs))
        ys[rng.random(len(xs)) < 0.02] = np.nan
        chunks.append((xs, ys + i))  # + i: a tie's order shows in y
    lazy, eager = Series(), Series()
    for n, (xs, ys) in enumerate(chunks):
        lazy.append(xs, ys)
        eager.append(xs, ys)
        assert len(eager.x) == len(lazy)  # eager is read after every chunk; lazy's length counts what waits
        if n == 40:
            xs[:] = -1.0  # the caller reuses its array: what was appended stands
    assert lazy._waiting and lazy.generation > 0  # old points moved (caches smooth again)
    np.testing.assert_array_equal(lazy.x, eager.x)
    np.testing.assert_array_equal(lazy.y, eager.y)
    for x0, x1, px in [(0, 6_000, 300), (100, 900, 700), (3_000, 3_100, 20)]:
        for got, want in zip(lazy.view(x0, x1, px), eager.view(x0, x1, px)):
            np.testing.assert_array_equal(got, want)
    np.testing.assert_array_equal(lazy.nonfinite(0, 6_000), eager.nonfinite(0, 6_000))
    assert lazy.y_range() == eager.y_range() and lazy.nbytes <= eager.nbytes  # fewer, larger extensions


def test_nan_and_inf_are_gaps_and_marked():
    x = np.arange(10_000, dtype=float)
    y = np.ones_like(x)
    y[[100, 5000, 7000]] = [np.nan, np.inf, -np.inf]
    s = Series()
    s.append(x, y)
    np.testing.assert_array_equal(s.nonfinite(0, 9999), [100, 5000, 7000])
    np.testing.assert_array_equal(s.nonfinite(200, 6000), [5000])
    for pixels in (50, 20_000):  # decimated and raw paths
        xs, ys = s.view(0, 9999, pixels)
        assert not np.isinf(ys).any()
        gaps = xs[np.isnan(ys)]
        for bad in (100, 5000, 7000):
            assert np.any(np.abs(gaps - bad) <= 10_000 / pixels + 1), (pixels, bad)
        assert np.nanmax(ys) == 1 and np.nanmin(ys) == 1


def test_memory_per_point_within_budget(big):
    s, _, _ = big
    assert s.nbytes / len(s) <= 24
    grown = Series()  # many appends: capacity slack counts too
    for i in range(1000):
        grown.append(np.arange(i * 1000, (i + 1) * 1000, dtype=float), np.ones(1000))
    assert grown.nbytes / len(grown) <= 24


def reference_ema(values, alpha):
    """TensorBoard's smoothing loop (vz_line_chart2), non-finite values passed through."""
    last, count, out = 0.0, 0, []
    for v in values:
        if not math.isfinite(v):
            out.append(v)
            continue
        last = last * alpha + (1 - alpha) * v
        count += 1
        out.append(last / (1 - alpha ** count))
    return np.array(out)


@pytest.mark.parametrize("alpha", [0.0, 0.6, 0.99])
def test_ema_matches_tensorboard_in_chunks(alpha):
    rng = np.random.default_rng(5)
    y = rng.normal(size=5000) * 10 + np.arange(5000)
    y[[0, 17, 2500]] = [np.nan, np.inf, np.nan]
    want = reference_ema(y, alpha)
    s = Series()
    smooth = Ema(s, alpha)
    for lo in range(0, 5000, 333):
        s.append(np.arange(lo, min(lo + 333, 5000), dtype=float), y[lo:lo + 333])
        smooth.update()
    np.testing.assert_allclose(smooth.series.y, want, rtol=1e-9, atol=1e-9)
    whole, _, _ = ema(y, alpha)
    np.testing.assert_allclose(whole, want, rtol=1e-9, atol=1e-9)


@pytest.mark.parametrize("alpha", [0.3, 0.9, 0.99])
def test_a_weighted_ema_equals_the_ema_of_each_value_repeated_its_weight(alpha):
    """A tiered view smooths its columns' means, each weighing the points it holds: exactly
    TensorBoard's EMA over the points, had each column's points all been its mean."""
    rng = np.random.default_rng(6)
    means = rng.normal(size=300) * 5
    means[[4, 150]] = [np.nan, np.inf]  # a column without a finite point passes through
    weights = rng.integers(1, 40, 300).astype(float)
    repeated = np.repeat(means, weights.astype(int))
    ends = np.cumsum(weights.astype(int)) - 1
    got, _, count = ema(means, alpha, weights=weights)
    finite = np.isfinite(means)
    np.testing.assert_allclose(got[finite], reference_ema(repeated, alpha)[ends][finite], rtol=1e-9, atol=1e-9)
    assert np.isnan(got[4]) and np.isinf(got[150]) and count == weights[finite].sum()
