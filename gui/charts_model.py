"""The Charts tab's decisions in plain Python (no Qt): which runs and metrics are charted, on which x
axis, in which groups, and where each curve's points come from; ``gui._qt.charts`` only draws them.

Each chart is a metric; each curve a run's (its superseded points a faint curve of their own) or,
grouped (by a config key or a name pattern), a group's mean with a min/max band
(``pilothouse.gui.groups``).  A curve's points come from memory (``lod.Series``), or, for a long
metric, the store's tiers (``pilothouse.gui.curve_sources``), or, for a run the store lacks most of,
its agent's tiers (``remote_tiers.RemoteSeries``): all ``curves.CurveSource``.  A run's reward quantiles share one
chart, drawn as bands (``pilothouse.gui.distribution``).

Marks: alerts, resumes, and the commands each run applied (``pilothouse.gui.steering_marks``), read
from the store's events with the history and from live events after it.

Selecting runs loads their history from the store; live entries then append.  Both are read against
one cursor per agent (taken in the same read snapshot as the history), so a point is never drawn
twice nor skipped at the seam.  A live chunk of a curve read from tiers is already in the store: it
is not decoded, its curve only learns that the store grew (``decoded`` counts the chunks that are).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from pilothouse.wire.entries import KIND_EVENT, KIND_METRIC, Entry, entry_body, entry_points

from . import distribution
from .alerts import Marker
from .attempts import Timeline, member_lists, read_points, timeline_of
from .chart_layout import constant_value, varies
from .curve_sources import Pieces, attempt_pieces, stored_series, tier_groups
from .curves import AlertMark, Axis, Curve, CurveSource, TieredSource
from .groups import band, group_runs
from .local_store import LocalStore
from .lod import Series
from .models import RunKey, config_diff, run_labels
from .palette import RunColors
from .remote_tiers import RemoteSeries, RemoteTiers
from .steering_marks import Steer, SteeringLog, steers_of
from .stored_series import STORED_POINTS, StoredGroup

PINNED = "pinned_charts"  # the store's setting: pinned metric names, in pin order
NAME_PATTERN = r"[-_]?seed\d+"  # the first guess of what tells a group's runs apart
GROUP = "group:"  # a group's curve name: never a run id (ids have no colon)
OLD = "~superseded"  # a run's points a later attempt logged again: a curve of their own, faint
REMOTE_GAP = 1_000_000  # a run the store lacks this many points of is drawn from its agent's tiers meanwhile
# (fewer arrive through the link's feed in about a second)
_NO_POINTS = (np.empty(0, np.int64), np.empty(0), np.empty(0))


@dataclass
class Change:
    """What live entries changed, for the view: the charts are to be rebuilt (``reload``), or these
    curves are new (a new metric's chart first), these charts got points, the grid or the marks must
    change."""

    reload: bool = False
    added: list[tuple[str, Curve]] = field(default_factory=list)  # (metric, curve), in order
    grew: set[str] = field(default_factory=set)
    relayout: bool = False
    marks: bool = False  # a run applied a command: the charts' marks change


@dataclass
class _Tiered:
    """A run's metric read from tiers: its curves' sources, and for a resumed run the attempts read."""

    sources: list[TieredSource]
    attempts: frozenset[int] | None = None


def curve_name(owner: RunKey | str) -> str:
    """The curve a legend entry stands for: a run's is named by its id, a group's by its name."""
    return owner if isinstance(owner, str) else owner[1]


class ChartsModel:
    """The charted runs, their curves per metric and every choice about them (see the module docstring)."""

    def __init__(self, colors: RunColors | None = None) -> None:
        self.run_colors = colors if colors is not None else RunColors()  # the app shares one book
        self.keys: list[RunKey] = []
        self.slots: dict[RunKey, int] = {}
        self.labels: dict[RunKey, str] = {}
        self.hidden: set[RunKey | str] = set()  # runs (or groups) clicked off in the legend
        self.axis = Axis.STEP
        self.curves: dict[str, dict[str, Curve]] = {}  # metric -> its curves by name, in the order made
        self.constant: dict[str, float] = {}  # charts whose every curve holds this one value
        self.varying: set[str] = set()  # charts that can never be constant again (until rebuilt)
        self.pinned: list[str] | None = None  # read from the store on the first show_runs
        self.alert_markers: dict[RunKey, list[Marker]] = {}
        self.show_steering = True  # the applied commands marked on the charts (a toggle of the view)
        self.group_by: str | None = None  # "config:<key>" or "name:<regex>"
        self.group_keys: list[str] = []  # the config keys that tell the charted runs apart
        self.group_note = ""  # why the runs are not grouped (a bad pattern)
        self.groups: dict[str, list[RunKey]] = {}  # group curve name -> its runs
        self.group_slots: dict[str, int] = {}  # group curve name -> its color slot
        self.points: dict[str, dict[RunKey, Series]] = {}  # grouped: metric -> each run's points
        self.stale_bands: set[tuple[str, str]] = set()  # (metric, group) with new points
        self.timelines: dict[RunKey, Timeline] = {}  # a charted run's attempts (``pilothouse.gui.attempts``)
        self.stored_points = STORED_POINTS  # a longer stored metric is charted from the tiers
        self.remote: RemoteTiers | None = None  # set by the app: a run the store lacks is drawn from its agent's tiers
        self.remote_keys: set[RunKey] = set()  # the charted runs drawn so
        self.remote_gap = REMOTE_GAP
        self.decoded = 0  # live metric chunks decoded: only those of curves held in memory
        self.store: LocalStore | None = None
        self._member: dict[RunKey, str] = {}  # run -> its group's curve name
        self._member_of: dict[RunKey, RunKey] = {}  # each (agent, id) of a charted run -> the run's key
        self._seen: dict[str, int] = {}  # agent url -> journal id up to which history was loaded
        self._tier_groups: dict[tuple[str, str], StoredGroup] = {}  # grouped: long metrics read from the tiers
        self._tiered: dict[tuple[RunKey, str], _Tiered] = {}  # (run, metric) read from tiers
        self._steering: dict[RunKey, SteeringLog] = {}  # each (agent, id) of a charted run -> its applied commands
        self._change = Change()

    def show_runs(self, keys: list[RunKey], store: LocalStore) -> None:
        """Chart these runs from scratch: history from the store, then live appends."""
        self.curves, self.constant, self.varying, self.points = {}, {}, set(), {}
        self.timelines, self.stale_bands, self._tiered, self._seen = {}, set(), {}, {}
        self.keys = list(keys)
        self.slots = self.run_colors.assign(self.keys)
        self.hidden &= set(self.keys)
        self.store = store
        self.remote_keys = set()
        if self.remote is not None:
            self.remote.forget()
        if self.pinned is None:
            saved = store.setting(PINNED, [])
            self.pinned = [m for m in saved if isinstance(m, str)] if isinstance(saved, list) else []
        with store.snapshot():
            runs = {(r["agent"], r["id"]): r for r in store.runs()}
            names = {key: runs.get(key, {}).get("name") or "" for key in self.keys}
            configs = {key: runs.get(key, {}).get("config") or {} for key in self.keys}
            self.labels = run_labels(names)
            self._make_groups(names, configs)
            group_of = member_lists(runs)
            self._tier_groups = tier_groups(store, runs, group_of, self.groups, self.stored_points)
            self._member_of = {m: key for key in keys for m in group_of.get(key, [key])}
            for agent in {a for a, _ in self._member_of}:
                self._seen[agent] = store.cursor(agent)
            self._steering = {m: steers_of(store.events(*m)) for m in self._member_of}  # up to the same cursor
            for key in keys:
                self._load(key, group_of.get(key, [key]), runs, store)
        self._change = Change()

    def reload(self) -> None:
        """The charts read again from the store (another axis or grouping, a resume)."""
        if self.store is not None:
            self.show_runs(self.keys, self.store)

    def set_axis(self, axis: Axis) -> None:
        """Another x axis: the charts are read again."""
        self.axis = axis
        self.reload()

    def set_group_by(self, group_by: str | None) -> bool:
        """Group the runs by ``config:<key>`` or ``name:<regex>`` (None: ungrouped) and read the charts
        again; groups align their runs by step.  False when that was the grouping already."""
        if group_by == self.group_by:
            return False
        self.group_by = group_by
        self.hidden = set()
        if group_by is not None:
            self.axis = Axis.STEP
        self.reload()
        return True

    def _make_groups(self, names: dict[RunKey, str], configs: dict[RunKey, dict]) -> None:
        """The config keys that tell the runs apart, and the groups if asked for."""
        self.group_keys = sorted(config_diff(configs))
        self.groups, self._member, self.group_note = {}, {}, ""
        if self.group_by is None or not self.keys:
            return
        try:
            grouped = group_runs(names, configs, self.group_by)
        except ValueError as exc:
            self.group_note = f"{exc}; the runs are drawn ungrouped"
            return
        self.groups = {GROUP + label: runs for label, runs in grouped.items()}
        self._member = {key: name for name, runs in self.groups.items() for key in runs}
        self.group_slots = self.run_colors.assign(self.groups)

    def _load(self, key: RunKey, keys: list[RunKey], runs: dict[RunKey, dict], store: LocalStore) -> None:
        """A run's points from every member, each attempt's superseded ones apart; a run of one node and
        one attempt draws its long metrics from the store's tiers instead (or every metric from its
        agent's tiers while the store lacks most of it), a resumed run with a long metric each
        attempt's tiers over the steps it keeps."""
        timeline = timeline_of(store, keys, runs)
        self.timelines[key] = timeline
        single = keys == [key] and len(timeline.attempts) == 1
        if single and self._lacks(store, key, runs.get(key, {})):
            for metric in sorted(runs[key].get("summary") or {}):
                self._add_tiered(key, metric, RemoteSeries(self.remote, *key, metric))
            self.remote_keys.add(key)
            return
        if single:
            for metric in store.metrics(*key):
                group = self._member.get(key)
                if (metric, group) in self._tier_groups:  # a long metric of a group: drawn from its runs' tiers
                    self._chart(metric)
                    self._tiered[(key, metric)] = _Tiered([self._tier_groups[(metric, group)]])
                    continue
                stored = None if self.groups else stored_series(store, key, metric, self.axis, self.stored_points)
                if stored is not None:  # too long to hold: drawn from the store's tiers
                    self._add_tiered(key, metric, stored)
                else:
                    self._append(key, metric, *store.series(*key, metric))
            return
        pieces = None if self.groups else attempt_pieces(store, keys, timeline, self.axis, self.stored_points)
        if pieces is not None:
            for metric, p in pieces.items():
                self._add_pieces(key, metric, p)
            return
        for p in read_points(store, keys, timeline):
            self._append_split(key, p.metric, p.steps, p.vals, p.times, timeline.superseded(p.numbers, p.steps))

    def _add_pieces(self, key: RunKey, metric: str, pieces: Pieces) -> None:
        self._add_tiered(key, metric, pieces.kept)
        if pieces.superseded.parts:
            self._add_tiered(key, metric, pieces.superseded, faint=True)
        self._tiered[(key, metric)].attempts = pieces.attempts

    def _lacks(self, store: LocalStore, key: RunKey, run: dict) -> bool:
        """Whether the store lacks ``remote_gap`` or more of the run's points on its agent (an app
        that never saw it, still following the journal): its charts then draw the agent's tiers."""
        if self.remote is None or self.groups or self.axis is not Axis.STEP:
            return False
        return int(run.get("points") or 0) - store.points(*key) >= self.remote_gap

    def remote_answered(self, agent: str) -> list[str]:
        """The charts drawing an agent's tiers (it answered: they redraw, and may turn out flat)."""
        return [metric for metric, curves in self.curves.items()
                if any(isinstance(c.source, RemoteSeries) and c.source.key[0] == agent for c in curves.values())]

    def remote_filled(self, store: LocalStore) -> bool:
        """Whether a run drawn from its agent's tiers is now in the store (charted from it on a reload)."""
        if not self.remote_keys:
            return False
        runs = {(r["agent"], r["id"]): r for r in store.runs()}
        return any(not self._lacks(store, key, runs.get(key, {})) for key in self.remote_keys)

    def add_entries(self, agent: str, entries: list[Entry]) -> Change:
        """Live metric chunks of the charted runs (other runs' entries are ignored).  A resume, or the
        first points of an attempt, changes which points are superseded: the charts are read again.
        A chunk of a curve read from tiers is not decoded: the store holds it already."""
        self._change = Change()
        floor = self._seen.get(agent)
        for e in entries:
            key = self._member_of.get((agent, e.run))
            if key is None or e.kind not in (KIND_METRIC, KIND_EVENT) or (floor is not None and e.id <= floor):
                continue
            if e.kind == KIND_EVENT:
                body = entry_body(e)
                if isinstance(body, dict) and body.get("event") == "resumed":
                    return self._reloaded()
                log = self._steering.get((agent, e.run))
                self._change.marks |= log is not None and log.add(body) is not None
                continue
            tiered = self._tiered.get((key, e.metric))
            if tiered is not None:
                if tiered.attempts is not None and self._latest(key, (agent, e.run)) not in tiered.attempts:
                    return self._reloaded()  # an attempt's first points of this metric: its tiers join the curve
                for source in tiered.sources:
                    source.grew()
                chart = self._chart_of(e.metric)
                self._change.grew.add(chart)
                self._change.relayout |= self.check_constant(chart)
                continue
            steps, vals, times = entry_points(e)
            self.decoded += 1
            timeline = self.timelines[key]
            numbers = timeline.numbers((agent, e.run), times)
            if timeline.saw(numbers, steps):
                return self._reloaded()
            self._append_split(key, e.metric, steps, vals, times, timeline.superseded(numbers, steps))
        return self._change

    def _reloaded(self) -> Change:
        self.reload()
        return Change(reload=True)

    def _latest(self, key: RunKey, member: RunKey) -> int:
        """The number of a member's latest attempt (whose live points these are)."""
        return max((a.number for a in self.timelines[key].attempts if a.member == member), default=0)

    def _chart_of(self, metric: str) -> str:
        """The chart a metric's curves are on: its own, or for a reward quantile of ungrouped runs the
        distribution chart (grouped, a quantile's group mean is a line chart like any metric's)."""
        return distribution.CHART if not self.groups and distribution.part_of(metric) else metric

    def _chart(self, metric: str) -> None:
        """The metric's chart, made if new; a group of it drawn from its runs' tiers gets its curve with it."""
        if metric in self.curves:
            return
        self.curves[metric] = {}
        self._change.relayout = True
        stored = {group: g for (m, group), g in self._tier_groups.items() if m == metric}
        for group, g in stored.items():
            self._add(metric, self._group_curve(group, g))
        if stored:
            self.check_constant(metric)

    def _add(self, metric: str, curve: Curve) -> Curve:
        self.curves[metric][curve.name] = curve
        self._change.added.append((metric, curve))
        return curve

    def _group_curve(self, group: str, source: CurveSource) -> Curve:
        return Curve(group, group, group[len(GROUP):], self.group_slots[group], source, group=True)

    def _run_curve(self, key: RunKey, metric: str, faint: bool, source: CurveSource | None = None) -> Curve:
        """The run's curve of a metric (its superseded points' with ``faint``), made if new: drawn from
        ``source``, or held in memory.  A reward quantile's is on the distribution chart, named for both."""
        chart = self._chart_of(metric)
        self._chart(chart)
        name = distribution.curve_name(key[1] + (OLD if faint else ""),
                                       distribution.part_of(metric) if chart != metric else None)
        curve = self.curves[chart].get(name)
        if curve is None:
            label = self.labels.get(key, key[1]) + (" (superseded)" if faint else "")
            source = Series() if source is None else source
            curve = self._add(chart, Curve(name, key, label, self.slots[key], source, faint))
        return curve

    def _add_tiered(self, key: RunKey, metric: str, source: TieredSource, faint: bool = False) -> None:
        """A run's curve read from tiers; its live chunks only tell it that the store grew."""
        self._run_curve(key, metric, faint, source)
        self._tiered.setdefault((key, metric), _Tiered([])).sources.append(source)
        self._change.relayout |= self.check_constant(self._chart_of(metric))

    def _append_split(self, key: RunKey, metric: str, steps: np.ndarray, vals: np.ndarray, times: np.ndarray,
                      old: np.ndarray) -> None:
        """The run's curve gets the points no later attempt superseded, its faint curve the others."""
        if old.any():
            self._append(key, metric, steps[old], vals[old], times[old], faint=True)
            steps, vals, times = steps[~old], vals[~old], times[~old]
        if len(steps):
            self._append(key, metric, steps, vals, times)

    def _append(self, key: RunKey, metric: str, steps: np.ndarray, vals: np.ndarray, times: np.ndarray,
                faint: bool = False) -> None:
        """Points held in memory; ``faint``: points a later attempt superseded (not in a group's band)."""
        if self.groups:
            self._chart(metric)
            if not faint:
                self._append_to_group(key, metric, steps, vals)
            return
        curve = self._run_curve(key, metric, faint)
        curve.source.append(times if self.axis is Axis.TIME else steps.astype(float), vals)
        chart = self._chart_of(metric)
        self._change.grew.add(chart)
        self._change.relayout |= self.check_constant(chart)

    def _append_to_group(self, key: RunKey, metric: str, steps: np.ndarray, vals: np.ndarray) -> None:
        """A grouped run's points are kept here; its group's band is marked stale (``update_bands``)."""
        group = self._member.get(key)
        if group is None:
            return
        self.points.setdefault(metric, {}).setdefault(key, Series()).append(steps.astype(float), vals)
        if group not in self.curves[metric]:
            self._add(metric, self._group_curve(group, Series()))
        self.stale_bands.add((metric, group))

    def update_bands(self) -> tuple[list[tuple[str, Curve, np.ndarray, np.ndarray, np.ndarray]], bool]:
        """Recompute the bands of groups whose runs got points (O(points) each: on a timer): per band
        its metric, its group's curve (its mean now), its low and high edges and run counts; and
        whether the grid must change."""
        stale, self.stale_bands = self.stale_bands, set()
        out, relayout = [], False
        for metric, group in stale:
            curve = self.curves.get(metric, {}).get(group)
            if curve is None:
                continue
            members = [self.points[metric][k] for k in self.groups[group] if k in self.points.get(metric, {})]
            xs, mean, lo, hi, count = band([(s.x, s.y) for s in members])
            curve.source = Series.of(xs, mean)
            out.append((metric, curve, lo, hi, count))
            self.varying.discard(metric)  # a band is drawn anew, not appended to
            relayout |= self.check_constant(metric)
        return out, relayout

    def check_constant(self, metric: str) -> bool:
        """Re-decide whether a chart is flat; True when that changed (the grid must change)."""
        if metric in self.varying:  # a live chart of many runs: not every curve's range on each append
            return False
        sources = [c.source for c in self.curves[metric].values()]
        y_ranges, finite = [s.y_range() for s in sources], all(s.all_finite for s in sources)
        value = constant_value(y_ranges, (s.x_range() for s in sources), finite)
        if value is None and varies(y_ranges, finite):
            self.varying.add(metric)
        was = self.constant.get(metric)
        if value is None:
            self.constant.pop(metric, None)
        else:
            self.constant[metric] = value
        return (was is None) != (value is None)

    def pin(self, metric: str, on: bool = True) -> None:
        """Pin a chart to the top of the grid (or unpin it); remembered in the app's store."""
        self.pinned = [m for m in self.pinned or [] if m != metric] + ([metric] if on else [])
        if self.store is not None:
            self.store.put_setting(PINNED, self.pinned)

    def hide(self, owner: RunKey | str, hidden: bool) -> None:
        """A run (or group) clicked off (or on) in the legend."""
        if hidden:
            self.hidden.add(owner)
        else:
            self.hidden.discard(owner)

    def legend(self) -> list[tuple[RunKey | str, str, int]]:
        """The legend's entries: (owner, text, color slot) of each run, or of each group when grouped."""
        if self.groups:
            return [(name, f"{name[len(GROUP):]} · {len(runs)} run{'s' if len(runs) != 1 else ''}",
                     self.group_slots[name]) for name, runs in self.groups.items()]
        return [(key, self.labels[key], self.slots[key]) for key in self.keys]

    def marks(self, metric: str) -> list[AlertMark]:
        """A chart's marks: the commands its runs applied (unless hidden; first, so that a run steered
        often does not push its alerts past the lines a chart draws), its alerts (those of its
        metric, or of none: a stale run) and resumes."""
        by_time = self.axis is Axis.TIME
        several = len(self.keys) > 1
        steering, marks = [], []
        for key in self.keys:
            name = self.labels.get(key, key[1])
            of = f" ({name})" if several else ""
            for s in self.steers(key) if self.show_steering else ():
                x = s.time if by_time else s.step
                if x == x:  # an answer without a time has no place on a wall-time axis
                    steering.append(AlertMark(float(x), s.what + of, f"{name}: {s.what} at step {s.step}\n"
                                              f"asked by {s.who}\n{s.sentence}", firing=False, steering=True))
            for m in self.alert_markers.get(key, ()):
                x = m.time if by_time else m.step
                if x is None or m.metric is not None and self._chart_of(m.metric) != metric:
                    continue
                label = f"{'⚠' if m.state == 'firing' else '✓'} {m.rule}" + of
                marks.append(AlertMark(float(x), label, f"{name}: {m.detail} ({m.state})", m.state == "firing"))
            for attempt, step in self.timelines[key].resumes() if key in self.timelines else ():
                x = attempt.started if by_time else step
                if x is not None:
                    marks.append(AlertMark(float(x), attempt.label + of, f"{name}: {attempt.label}", resume=True))
        return steering + marks

    def steers(self, key: RunKey) -> list[Steer]:
        """The commands a charted run applied (every attempt's), in the order each member journaled them."""
        return [s for member, log in self._steering.items() if self._member_of.get(member) == key for s in log.steers]
