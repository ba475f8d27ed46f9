"""On-disk min/max tiers of the app store's metrics, so reading a view costs per pixel, not per point.

The fold and its storage are shared with the agent (``pilothouse.tiers``, ``pilothouse.tier_table``):
the store keeps them per (agent, run, metric), with the level-0 blocks listing the entries that
hold their points.  ``view`` picks the coarsest level with at least two buckets per pixel column,
so it reads about 2-8 buckets per column whatever the run's length; zoomed in past the finest
level it reads the raw points of the entries touching the range and draws them through an
in-memory ``Series``, exactly as the charts draw a live run.  ``draw`` turns buckets into what a
chart draws, for the store's own tiers and for those an agent answers for a run not stored yet.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass

import numpy as np
import sqlite_utils

from pilothouse.gui.lod import Series
from pilothouse.tier_table import BLOCK, NO_IDS, TierTable
from pilothouse.tiers import WIDTHS, columns, level_for
from pilothouse.wire.entries import KIND_METRIC, join_chunks

MIGRATE_ROWS = 2000  # entries folded at a time when a store from before the tiers is opened
KEYS = ("agent", "run", "metric")


@dataclass
class TierView:
    """What a chart draws for one curve: ``xs``/``ys`` (per column its first point, min, max and
    last point at their steps, a NaN after a column holding a non-finite value; or the raw points), the
    x of non-finite values (one per column) for markers, and per column its step range
    [starts, stops), min and max (empty when the raw points were read)."""

    xs: np.ndarray
    ys: np.ndarray
    marks: np.ndarray
    level: int  # -1: raw points
    starts: np.ndarray
    stops: np.ndarray
    mins: np.ndarray
    maxs: np.ndarray


class Tiers:
    """The tier table of the app's store (``TierTable`` keyed by agent, run and metric, with the
    entry ids of each level-0 block): written in the store's own transaction."""

    def __init__(self, db: sqlite_utils.Database) -> None:
        self.db = db
        self.table = TierTable(db.conn, KEYS, ids=True)

    def create(self) -> bool:
        """Create the table; True when it holds nothing yet (``add_all`` then builds it)."""
        return self.table.create()

    def add(self, stored: Iterable[tuple[str, Sequence[Sequence]]]) -> None:
        """Fold newly stored metric entries of agents, (agent, entries) each (protocol field order:
        id, run, kind, metric, rank, n, steps, vals, times, body), into the tiers, every metric in
        one pass.  Only entries not stored before may be passed: a re-sent page must not count
        twice (``LocalStore.write_pages`` passes the rows it inserted)."""
        groups: dict[tuple[str, str, str], list] = {}
        for agent, entries in stored:
            for e in entries:
                if e[2] == KIND_METRIC and e[5]:
                    groups.setdefault((agent, e[1], e[3]), []).append(e)
        items = []
        for key, chunk in groups.items():
            steps, vals, times = join_chunks([(e[6], e[7], e[8]) for e in chunk])
            items.append((key, steps, vals, times, np.repeat(np.array([e[0] for e in chunk], np.int64), [e[5] for e in chunk])))
        self.table.fold_many(items)

    def add_all(self) -> None:
        """Build the tiers of every metric entry already stored (a store from before them)."""
        for (agent,) in self.db.execute("SELECT DISTINCT agent FROM entries WHERE kind=?", [KIND_METRIC]).fetchall():
            rows = self.db.execute("SELECT id, run, kind, metric, rank, n, steps, vals, times, body FROM entries "
                                   "WHERE agent=? AND kind=? ORDER BY id", [agent, KIND_METRIC])
            while chunk := rows.fetchmany(MIGRATE_ROWS):
                self.add([(agent, chunk)])

    def buckets(self, agent: str, run: str, metric: str, level: int, x0: float, x1: float) -> np.ndarray:
        """The filled buckets of ``level`` overlapping steps x0..x1, in step order."""
        return self.table.buckets((agent, run, metric), level, x0, x1)

    def summary(self, agent: str, run: str, metric: str) -> np.ndarray:
        """One record of the whole metric (count, x and y extent, non-finite count); empty if none."""
        return self.table.summary((agent, run, metric))

    def view(self, agent: str, run: str, metric: str, x0: float, x1: float, pixels: int,
             raw: Callable[[np.ndarray], tuple[np.ndarray, np.ndarray]]) -> TierView:
        """The points to draw steps x0..x1 on ``pixels`` columns (see ``TierView``); ``raw`` gives
        (steps, vals) of entry ids, in arrival order, for the finest zoom."""
        x0, x1, pixels = view_range(x0, x1, pixels)
        level = level_for(x0, x1, pixels)
        if level < 0:
            return self._raw_view(agent, run, metric, x0, x1, pixels, raw)
        return draw(self.buckets(agent, run, metric, level, x0, x1), level, x0, x1, pixels)

    def nearest(self, agent: str, run: str, metric: str, xq: float,
                raw: Callable[[np.ndarray], tuple[np.ndarray, np.ndarray]]) -> tuple[float, float] | None:
        """The stored point whose step is nearest xq (a crosshair readout): among the raw points
        of the blocks around xq, else among the first and last points of ever wider buckets."""
        steps, vals = self._raw_points(agent, run, metric, xq, xq, raw)
        if not len(steps):
            for level, width in enumerate(WIDTHS):
                rec = self.buckets(agent, run, metric, level, xq - width * BLOCK, xq + width * BLOCK)
                if len(rec):
                    steps, vals = np.concatenate([rec["xfirst"], rec["xlast"]]), np.concatenate([rec["first"],
                                                                                                  rec["last"]])
                    break
        if not len(steps):
            return None
        i = int(np.argmin(np.abs(steps.astype(np.float64) - xq)))
        return float(steps[i]), float(vals[i])

    def _raw_points(self, agent: str, run: str, metric: str, x0: float, x1: float,
                    raw: Callable[[np.ndarray], tuple[np.ndarray, np.ndarray]]) -> tuple[np.ndarray, np.ndarray]:
        """(steps, vals) of x0..x1 and a level-0 block either side, sorted by step (equal steps
        in arrival order), from the entries the level-0 blocks list."""
        span = WIDTHS[0] * BLOCK
        rows = self.table.rows((agent, run, metric), 0, int(np.floor(x0 / span)) - 1, int(np.floor(x1 / span)) + 1)
        ids = np.unique(np.concatenate([i for _, _, i in rows])) if rows else NO_IDS
        if not len(ids):
            return NO_IDS, np.empty(0)
        steps, vals = raw(ids)
        near = (steps >= x0 - span) & (steps <= x1 + span)
        order = np.argsort(steps[near], kind="stable")
        return steps[near][order], vals[near][order]

    def _raw_view(self, agent: str, run: str, metric: str, x0: float, x1: float, pixels: int,
                  raw: Callable[[np.ndarray], tuple[np.ndarray, np.ndarray]]) -> TierView:
        """Zoomed past level 0: the points of the entries touching the range (and a block either
        side, for the line to the edges), drawn through a Series."""
        steps, vals = self._raw_points(agent, run, metric, x0, x1, raw)
        series = Series()
        series.append(steps.astype(np.float64), vals)
        xs, ys = series.view(x0, x1, pixels)
        empty = np.empty(0)
        return TierView(xs, ys, series.nonfinite(x0, x1), -1, empty.astype(np.int64), empty.astype(np.int64),
                        empty, empty)


def view_range(x0: float, x1: float, pixels: int) -> tuple[float, float, int]:
    """A view's range in order and its column count, or ValueError for a non-finite range."""
    if not (np.isfinite(x0) and np.isfinite(x1)):
        raise ValueError(f"a view's x range must be finite: {x0}..{x1}")
    return min(x0, x1), max(x0, x1), max(int(pixels), 1)


def draw(rec: np.ndarray, level: int, x0: float, x1: float, pixels: int) -> TierView:
    """What a chart draws of the buckets ``rec`` of ``level`` (those overlapping x0..x1, in step
    order) on ``pixels`` columns: the buckets folded per column, each column's envelope."""
    cols, bounds = columns(rec, level, x0, x1, pixels)
    starts = np.maximum.accumulate(bounds[cols["bucket"]]).astype(np.int64)
    stops = bounds[cols["bucket"] + 1].astype(np.int64)
    return drawn(cols, level, starts, stops)


def drawn(cols: np.ndarray, level: int, starts: np.ndarray, stops: np.ndarray) -> TierView:
    """The view of records folded per pixel column (``columns``): each column's envelope."""
    xs, ys = _envelope(cols)
    return TierView(xs, ys, cols["xbad"][cols["bad"] > 0].astype(np.float64), level, starts, stops,
                    cols["min"], cols["max"])


def _envelope(cols: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Per column its first point, min, max and last point at their own steps (in step order;
    a non-finite first or last left out), then a NaN where the column holds a non-finite value:
    the line runs through every column's extremes and joins the columns where the data does."""
    n = len(cols)
    x = np.empty((n, 5))
    y = np.empty((n, 5))
    for i, field in enumerate(("first", "min", "max", "last")):
        x[:, i], y[:, i] = cols["x" + field], cols[field]
    order = np.argsort(x[:, :4], axis=1, kind="stable")
    x[:, :4] = np.take_along_axis(x[:, :4], order, axis=1)
    y[:, :4] = np.take_along_axis(y[:, :4], order, axis=1)
    x[:, 4], y[:, 4] = x[:, 3], np.nan
    keep = np.ones((n, 5), bool)
    keep[:, :4] = np.isfinite(y[:, :4])
    keep[:, 4] = cols["bad"] > 0
    return x[keep], y[keep]
