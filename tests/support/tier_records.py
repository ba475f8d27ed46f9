"""Tier records for the tests of the tier fold: ``spiky``, a series that tests every edge of a fold
(spikes, NaN, ±Inf, a gap, steps logged again), and ``same_buckets`` / ``same_rows``, which compare
tier records built along different paths (pages in pieces, one shot, an agent's answer).

Every field must match bit for bit except ``sum``: a float sum depends on the order of its
additions, which differs between a one-shot fold and one in pages, so it is compared to 1e-9.
"""

from __future__ import annotations

import numpy as np

from pilothouse.store.tiers import RECORD

EXACT = [name for name in RECORD.names if name != "sum"]


def same_buckets(got: np.ndarray, want: np.ndarray) -> bool:
    """Whether two RECORD arrays hold the same buckets (``sum`` to rounding, the rest bit for bit)."""
    got, want = np.asarray(got, RECORD), np.asarray(want, RECORD)
    return len(got) == len(want) and all(got[f].tobytes() == want[f].tobytes() for f in EXACT) and bool(
        np.allclose(got["sum"], want["sum"], rtol=1e-9, atol=1e-9))


def same_rows(got: list[tuple], want: list[tuple], at: int) -> bool:
    """Whether two lists of stored tier rows are the same, comparing the raw RECORD blob in column ``at``
    with ``same_buckets`` and the other columns exactly."""
    if len(got) != len(want):
        return False
    for a, b in zip(got, want):
        if a[:at] + a[at + 1:] != b[:at] + b[at + 1:] or not same_buckets(np.frombuffer(a[at], RECORD),
                                                                           np.frombuffer(b[at], RECORD)):
            return False
    return True


def spiky(rng: np.random.Generator, n: int, resumed: bool = True) -> tuple[np.ndarray, np.ndarray]:
    """A random walk with spikes, NaN and ±Inf, a gap in the steps, and (if ``resumed``) a
    stretch of steps logged again out of order, as a run resumed from a checkpoint does."""
    steps = np.arange(n, dtype=np.int64) * 3
    steps[n // 2:] += 10_000_000  # a sparse stretch
    if resumed:
        steps = np.concatenate([steps, steps[n // 4: n // 3]])
    vals = np.cumsum(rng.standard_normal(len(steps)))
    spots = rng.integers(0, len(vals), 40)
    vals[spots[:10]] = 1e6
    vals[spots[10:20]] = -1e6
    vals[spots[20:30]] = np.nan
    vals[spots[30:35]] = np.inf
    vals[spots[35:]] = -np.inf
    return steps, vals
