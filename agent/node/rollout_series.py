"""The ``rollouts/*`` series the agent derives from a run's rollouts: reward quantiles, the fraction of
GRPO groups with no signal, lengths, turns and tool calls, one point per step with rollouts.

Why in the agent: every client (charts, alerts, export, the CLI, an MCP agent) then sees them as
ordinary metrics of the run, with no user code and whatever logged the rows (a trainer, TRL's
callback, an import).  The numbers are ``pilothouse.wire.rollout_groups.StepStats``.

When a step's point is written: a step's rows may come in several calls and from several ranks, so a
step stays open until rollouts of a step CLOSE_BEHIND later arrive, the run ends, or no rows came for
IDLE_SECONDS; then its series get one point each.  Rows for a step already written are not folded in
(a point is never rewritten), and the agent keeps only a few numbers per open row in memory.  An
agent stopped with a step open loses that step's points (its rows are kept).

A point is written under DERIVED_RANK, a rank no trainer has, so the agent knows its own series from
a run's: a run that logs a metric of one of these names itself keeps it, and the agent writes none.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from pilothouse.store.db import sqlite_utils
from pilothouse.wire.job import MAX_RANKS
from pilothouse.wire.rollout_groups import DERIVED, StepStats

DERIVED_RANK = MAX_RANKS  # above every trainer's rank
CLOSE_BEHIND = 2  # ranks a step apart still interleave their rows; two steps apart, the earlier is done
IDLE_SECONDS = 30.0
Points = tuple[str, np.ndarray, np.ndarray, np.ndarray]  # (metric, steps, values, wall times) to store


@dataclass(frozen=True)
class RunSeries:
    """A run's open steps and the last step written; replaced, never changed, so the journal undoes a
    message by putting the old one back."""

    open: dict[int, tuple[StepStats, float, float]] = field(default_factory=dict)  # step -> (stats, wall, idle since)
    written: int = -1


class RolloutSeries:
    """The open steps of every run this agent is ingesting; ``changed(run)`` is called before a run's
    state is replaced (the journal's undo)."""

    def __init__(self, db: sqlite_utils.Database, changed: Callable[[dict, str], None]) -> None:
        self.db, self._changed = db, changed
        self.runs: dict[str, RunSeries] = {}
        self.own: dict[str, frozenset[str]] = {}  # run -> derived names the run logs itself

    def add(self, run: str, step: int, wall_time: float, rows: list[dict], now: float) -> list[Points]:
        """Fold a batch's rows into its step; the points of the steps this closes."""
        state = self.runs.get(run, RunSeries())
        if step <= state.written:
            return []
        opened = dict(state.open)
        stats, wall, _ = opened.get(step, (StepStats(), wall_time, now))
        opened[step] = (stats.add(rows), max(wall, wall_time), now)
        return self._close(run, RunSeries(opened, state.written), lambda s: s <= step - CLOSE_BEHIND)

    def idle(self, now: float, idle: float = IDLE_SECONDS) -> list[str]:
        """Runs with a step no rows came for in ``idle`` seconds."""
        return [run for run, state in self.runs.items() if any(t <= now - idle for _, _, t in state.open.values())]

    def close_idle(self, now: float, idle: float = IDLE_SECONDS) -> dict[str, list[Points]]:
        """The points of steps no rows came for in ``idle`` seconds, by run."""
        return {run: self._close(run, self.runs[run], lambda s, state=self.runs[run]: state.open[s][2] <= now - idle)
                for run in self.idle(now, idle)}

    def close_run(self, run: str) -> list[Points]:
        """The run ended: the points of all its open steps."""
        state = self.runs.get(run)
        return self._close(run, state, lambda s: True) if state is not None and state.open else []

    def logged_by_run(self, run: str, metric: str) -> None:
        """A trainer logged ``metric`` itself: if it is a derived name, the agent writes no more of it."""
        if metric in DERIVED and metric not in self._own(run):
            self._changed(self.own, run)
            self.own[run] = self.own[run] | {metric}

    def _close(self, run: str, state: RunSeries, closing: Callable[[int], bool]) -> list[Points]:
        done = sorted(s for s in state.open if closing(s))
        self._changed(self.runs, run)
        self.runs[run] = RunSeries({s: v for s, v in state.open.items() if s not in done},
                                   max([state.written, *done]))
        if not self.runs[run].open:
            del self.runs[run]
        own = self._own(run)
        series: dict[str, list[tuple[int, float, float]]] = {}
        for step in done:
            stats, wall, _ = state.open[step]
            for name, value in stats.series().items():
                if name not in own:
                    series.setdefault(name, []).append((step, value, wall))
        return [(name, *(np.array(col, dtype) for col, dtype in zip(zip(*points), (np.int64, np.float64, np.float64))))
                for name, points in series.items()]

    def _own(self, run: str) -> frozenset[str]:
        """The derived names this run logs itself, read once per agent start (an index walk of those
        names' entries)."""
        if run not in self.own:
            self._changed(self.own, run)
            marks = ",".join("?" * len(DERIVED))
            self.own[run] = frozenset(m for (m,) in self.db.execute(
                f"SELECT DISTINCT metric FROM journal WHERE run=? AND kind='m' AND metric IN ({marks}) AND rank<>?",
                [run, *DERIVED, DERIVED_RANK]))
        return self.own[run]
