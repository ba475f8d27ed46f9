"""One run across restarts, in plain Python: its members, its attempts, and which points a chart draws.

A trainer that crashed is started again with its run id.  On the same node the agent writes a
``resumed`` event (attempt 2, 3, ...); on another node another agent sees the run for the first time.
The app makes one run of them: a run's members are the (agent, run id) pairs of one id and project,
ordered by when each began, its key the member that began first (a selection stays valid when the run
moves on), and its attempts every member's start and resumes in time order.

A point belongs to the attempt of its member that had begun when it was logged: a point's wall time
and an attempt's start are stamped by the trainer, on the clock of the node whose agent holds both.
A later attempt wins from its first step: an earlier attempt's points at or past that step are
superseded (a run resumed from a checkpoint older than its crash logs those steps again).  They stay
in the store and are drawn faint, so the curve itself is continuous.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import NamedTuple

import numpy as np

from pilothouse.event_text import resume_label

from .jobs import is_job_node
from .local_store import LocalStore
from .tiers import resume_started

RunKey = tuple[str, str]  # (agent URL, run id)
LIVE = ("running", "paused")  # a member still saying so when another node took over went silent: stale


@dataclass(frozen=True)
class Attempt:
    number: int  # 1, 2, ... over all of the run's members
    member: RunKey  # whose journal holds its points
    started: float  # when its process began, on its node's clock
    host: str
    after: str  # how the attempt before it ended ("" for the first)

    @property
    def label(self) -> str:
        return resume_label(self.number, self.host, self.after)


def members(runs: Iterable[tuple[RunKey, str, float]], apart: Collection[RunKey] = ()) -> dict[RunKey, list[RunKey]]:
    """(key, project, created) of every run -> each run's key and its members, first begun first.
    The keys ``apart`` are nodes of a multi-node job: running at once, each node's ranks are a run of
    their own (``pilothouse.gui.jobs``), never one node's resume of another."""
    groups: dict[tuple[str, str, str], list[RunKey]] = {}
    for key, project, _ in sorted(runs, key=lambda r: (r[2], r[0])):
        groups.setdefault((key[1], project, key[0] if key in apart else ""), []).append(key)
    return {keys[0]: keys for keys in groups.values()}


def member_lists(runs: Mapping[RunKey, Mapping]) -> dict[RunKey, list[RunKey]]:
    """Every (agent, id) of ``runs`` (run dicts as the store keeps them) -> its run's members."""
    groups = members(((k, r.get("project") or "", r.get("created") or 0.0) for k, r in runs.items()),
                     {k for k, r in runs.items() if is_job_node(r)})
    return {m: keys for keys in groups.values() for m in keys}


def attempts(runs: Sequence[tuple[RunKey, Mapping, Sequence[Mapping]]]) -> list[Attempt]:
    """A run's attempts from each member's (key, run dict, event bodies), in the order they began."""
    starts = []  # (started, member, host, after or None for a member's first)
    for key, run, events in runs:
        opened = next((e.get("host") for e in events if e.get("event") == "status" and e.get("host")), None)
        starts.append((_number(run.get("created")), key, opened or run.get("host") or "", None))
        starts.extend((started, key, e.get("host") or "", str(e.get("after") or ""))
                      for e in events if (started := resume_started(e)) is not None)
    status = {key: run.get("status") or "" for key, run, _ in runs}
    starts.sort(key=lambda s: (s[0], s[1]))
    out: list[Attempt] = []
    for started, key, host, after in starts:
        if after is None:  # a member's first attempt: after whatever the member before it says
            before = status[out[-1].member] if out else ""
            after = "stale" if before in LIVE else before
        out.append(Attempt(len(out) + 1, key, started, str(host), after))
    return out


class Timeline:
    """One run's attempts and the first step each logged: which attempt a point is of, and whether a
    later attempt superseded it."""

    def __init__(self, run_attempts: Sequence[Attempt]):
        self.attempts = list(run_attempts)
        self.first_steps: dict[int, int] = {}  # attempt number -> the lowest step it logged
        self._starts = {m: (np.array([a.started for a in self.attempts if a.member == m]),
                            np.array([a.number for a in self.attempts if a.member == m]))
                        for m in {a.member for a in self.attempts}}

    def numbers(self, member: RunKey, times: np.ndarray) -> np.ndarray:
        """The attempt number of each point of ``member`` logged at ``times``."""
        starts, numbers = self._starts[member]
        if len(numbers) == 1:  # a member that never resumed, nearly every live chunk: no search
            return np.full(len(times), numbers[0])
        return numbers[np.clip(np.searchsorted(starts, times, side="right") - 1, 0, len(numbers) - 1)]

    def saw(self, numbers: np.ndarray, steps: np.ndarray) -> bool:
        """Note these points' steps; True when an attempt after the first now begins at another step
        (what earlier points it supersedes changed)."""
        if len(self.attempts) == 1:  # a run of one attempt: nothing to supersede (the model's live path, per chunk)
            if len(steps):
                low, number = int(steps.min()), self.attempts[0].number
                self.first_steps[number] = min(low, self.first_steps.get(number, low))
            return False
        moved = False
        for number in np.unique(numbers).tolist():
            low = int(steps[numbers == number].min())
            if low < self.first_steps.get(number, low + 1):
                self.first_steps[number] = low
                moved |= number > 1
        return moved

    def cut(self, number: int) -> int | None:
        """The lowest first step of the attempts after ``number``: its points from there on are
        superseded (None: no later attempt logged a step yet)."""
        return min((step for n, step in self.first_steps.items() if n > number), default=None)

    def superseded(self, numbers: np.ndarray, steps: np.ndarray) -> np.ndarray:
        """Points at or past the first step of an attempt after theirs."""
        if len(self.attempts) == 1 or not self.first_steps:
            return np.zeros(len(steps), bool)
        top = max(a.number for a in self.attempts)
        cut = np.array([np.inf if (c := self.cut(n)) is None else c for n in range(top + 2)])
        return steps >= cut[numbers]

    def resumes(self) -> list[tuple[Attempt, int | None]]:
        """Each attempt after the first with the step it began at (None: none logged yet)."""
        return [(a, self.first_steps.get(a.number)) for a in self.attempts[1:]]


class Points(NamedTuple):
    """One member's points of one metric, each with the number of the attempt that logged it."""

    member: RunKey
    metric: str
    steps: np.ndarray
    vals: np.ndarray
    times: np.ndarray
    numbers: np.ndarray


def read_run(store: LocalStore, keys: Sequence[RunKey],
             runs: Mapping[RunKey, Mapping]) -> tuple[Timeline, Iterator[Points]]:
    """A run's attempts and every point of its members ``keys`` (``read_points``)."""
    timeline = timeline_of(store, keys, runs)
    return timeline, read_points(store, keys, timeline)


def timeline_of(store: LocalStore, keys: Sequence[RunKey], runs: Mapping[RunKey, Mapping]) -> Timeline:
    """A run's attempts, from its members' run dicts and events (no point read)."""
    return Timeline(attempts([(m, runs.get(m, {}), store.events(*m)) for m in keys]))


def read_points(store: LocalStore, keys: Sequence[RunKey], timeline: Timeline) -> Iterator[Points]:
    """Every point of a run's members ``keys``, a part of a metric at a time (read them in one
    ``store.snapshot()``).  Which points are superseded is known only once every attempt's first step
    is: a run resumed is read twice, the first time for those steps, so memory stays one part's."""
    if len(timeline.attempts) > 1:
        for p in _points(store, keys, timeline):
            timeline.saw(p.numbers, p.steps)
    return _points(store, keys, timeline)


def _points(store: LocalStore, keys: Sequence[RunKey], timeline: Timeline) -> Iterator[Points]:
    for member in keys:
        for metric in store.metrics(*member):
            for steps, vals, times in store.series_parts(*member, metric):
                yield Points(member, metric, steps, vals, times, timeline.numbers(member, times))


def _number(value: object) -> float:
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else 0.0
