"""Which tiers a long curve is read from, in plain Python (the Charts model's choices, tested without a
display).

Why: a metric of more than ``stored_points`` points is not held in memory but read per frame from
the store's tiers: a run of one node and one attempt from its own (``StoredSeries``), a resumed run
from each attempt's over the steps it keeps (``StoredPieces``), a group whose every run is one
node's single attempt from its runs' (``StoredGroup``).  A shorter metric returns None: its points
are held.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np

from .attempts import Timeline, attempts
from .curves import Axis
from .local_store import LocalStore
from .models import RunKey
from .stored_series import StoredGroup, StoredPieces, StoredSeries
from .tiers import ALL_STEPS, attempt_key

LOWEST, HIGHEST = ALL_STEPS


@dataclass(frozen=True)
class Pieces:
    """One metric of a resumed run read from its attempts' tiers: the run's curve (each attempt
    before the first step of a later one), its superseded points (each attempt from there on), and
    the attempts whose tiers it reads (a live point of another is an attempt's first: read again)."""

    kept: StoredPieces
    superseded: StoredPieces
    attempts: frozenset[int]


def stored_series(store: LocalStore, key: RunKey, metric: str, axis: Axis, stored_points: int) -> StoredSeries | None:
    """A run's curve read from the store's tiers, when its metric has more than ``stored_points`` points."""
    stored = StoredSeries(store, *key, metric, by_time=axis is Axis.TIME)
    return stored if len(stored) > stored_points else None


def attempt_pieces(store: LocalStore, keys: list[RunKey], timeline: Timeline, axis: Axis,
                   stored_points: int) -> dict[str, Pieces] | None:
    """A resumed run's curves per metric read from its attempts' tiers, when a metric of it is longer
    than ``stored_points`` (else None: its points are held).  The attempts' first steps come from
    their tiers' extents (noted in ``timeline``), not from reading every point."""
    numbered = {}  # global attempt number -> (member, its tiers' number among the member's attempts)
    for member in keys:
        mine = [a.number for a in timeline.attempts if a.member == member]
        numbered.update({n: (member, i) for i, n in enumerate(mine, 1)})
    metrics = sorted({m for member in keys for m in store.metrics(*member)})
    lengths = {(n, metric): store.summary(*member, attempt_key(metric, i))
               for n, (member, i) in numbered.items() for metric in metrics}
    lengths = {k: rec for k, rec in lengths.items() if len(rec)}
    if not any(int(rec["count"][0]) > stored_points for rec in lengths.values()):
        return None
    for (n, _), rec in sorted(lengths.items()):  # each attempt's first step, as a read of its points finds it
        timeline.saw(np.array([n]), rec["xfirst"])
    cut = {n: timeline.cut(n) for n in numbered}

    def piece(metric: str, n: int, clip: tuple[float, float]) -> StoredSeries:
        member, i = numbered[n]
        return StoredSeries(store, *member, attempt_key(metric, i), axis is Axis.TIME, clip)

    out = {}
    for metric in metrics:
        ns = sorted(n for n in numbered if (n, metric) in lengths)
        out[metric] = Pieces(StoredPieces([piece(metric, n, (LOWEST, HIGHEST if cut[n] is None else cut[n]))
                                           for n in ns]),
                             StoredPieces([piece(metric, n, (cut[n], HIGHEST)) for n in ns if cut[n] is not None]),
                             frozenset(ns))
    return out


def tier_groups(store: LocalStore, runs: Mapping[RunKey, Mapping], group_of: Mapping[RunKey, list[RunKey]],
                groups: Mapping[str, list[RunKey]], stored_points: int) -> dict[tuple[str, str], StoredGroup]:
    """(metric, group) -> the group drawn from its runs' tiers: each metric of a group with a run
    longer than ``stored_points`` there, when every run of the group is one node's single attempt (a
    resumed run's superseded points are told apart in memory)."""
    out: dict[tuple[str, str], StoredGroup] = {}
    for group, keys in groups.items():
        if any(group_of.get(k, [k]) != [k] or len(attempts([(k, runs.get(k, {}), store.events(*k))])) > 1
               for k in keys):
            continue
        by_metric: dict[str, list[StoredSeries]] = {}
        for key in keys:
            for metric in store.metrics(*key):
                by_metric.setdefault(metric, []).append(StoredSeries(store, *key, metric))
        out.update({(metric, group): StoredGroup(members) for metric, members in by_metric.items()
                    if any(len(m) > stored_points for m in members)})
    return out
