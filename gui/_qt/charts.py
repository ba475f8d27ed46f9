"""The Charts tab: one chart per metric of the selected runs, grouped by prefix, runs overlaid,
each run in its color (``pilothouse.gui.palette``) and named in the legend above the charts.
Pinned charts come first, a search narrows the grid, flat charts fold into one line
(``pilothouse.gui.chart_layout``).  Grouped (by a config key or a name pattern), each group is
drawn as its mean with a min/max band (``pilothouse.gui.groups``) instead of its runs.

Selecting runs loads their history from the local store; live entries then append.  Both
are read against one cursor per agent (taken in the same read snapshot as the history),
so a point is never drawn twice nor skipped at the seam.
"""

from __future__ import annotations

import numpy as np
import pyqtgraph as pg
from PySide6.QtCore import Qt, QTimer
from PySide6.QtWidgets import (
    QCheckBox,
    QComboBox,
    QGridLayout,
    QHBoxLayout,
    QLabel,
    QLineEdit,
    QScrollArea,
    QSlider,
    QVBoxLayout,
    QWidget,
)

from pilothouse.wire.entries import KIND_EVENT, KIND_METRIC, Entry, entry_body, entry_points

from ..alerts import Marker
from ..attempts import Timeline, attempts, member_lists, read_points, timeline_of
from ..chart_layout import arrange, constant_value, folded_text, varies
from ..groups import band, group_runs
from ..local_store import LocalStore
from ..lod import Series
from ..models import RunKey, config_diff, run_labels
from ..palette import RunColors, color, dashed
from ..remote_tiers import RemoteSeries, RemoteTiers
from ..stored_series import STORED_POINTS, StoredGroup, StoredPieces, StoredSeries
from ..tiers import ALL_STEPS, attempt_key
from .chart import AlertMark, ChartWidget
from .legend import RunLegend

COLUMNS = 2
CHART_HEIGHT = 240
PINNED = "pinned_charts"  # the store's setting: pinned metric names, in pin order
BAND_MS = 1000  # a group's band is recomputed from its runs' points at most this often
NAME_PATTERN = r"[-_]?seed\d+"  # the first guess of what tells a group's runs apart
GROUP = "group:"  # a group's curve name: never a run id (ids have no colon)
OLD = "~superseded"  # a run's points a later attempt logged again: a curve of their own, faint
REMOTE_GAP = 1_000_000  # a run the store lacks this many points of is drawn from its agent's tiers meanwhile
# (fewer arrive through the link's feed in about a second)


class ChartsPanel(QWidget):
    def __init__(self, colors: RunColors | None = None) -> None:
        super().__init__()
        self.run_colors = colors if colors is not None else RunColors()  # the app shares one book
        self.keys: list[RunKey] = []
        self.slots: dict[RunKey, int] = {}
        self.labels: dict[RunKey, str] = {}
        self.hidden: set[RunKey] = set()  # clicked off in the legend
        self.emphasis: RunKey | None = None  # hovered in the legend
        self.charts: dict[str, ChartWidget] = {}
        self.seen: dict[str, int] = {}  # agent url -> journal id up to which history was loaded
        self.member_of: dict[RunKey, RunKey] = {}  # each (agent, id) of a charted run -> the run's key
        self.timelines: dict[RunKey, Timeline] = {}  # a charted run's attempts (``pilothouse.gui.attempts``)
        self.alert_markers: dict[RunKey, list[Marker]] = {}
        self.pinned: list[str] | None = None  # read from the store on the first show_runs
        self.constant: dict[str, float] = {}  # charts whose every curve holds this one value
        self.varying: set[str] = set()  # charts that can never be constant again (until rebuilt)
        self.shown: list[str] = []  # the grid, in order
        self.group_by: str | None = None  # "config:<key>" or "name:<regex>"
        self.groups: dict[str, list[RunKey]] = {}  # group curve name -> its runs
        self.member: dict[RunKey, str] = {}  # run -> its group's curve name
        self.group_slots: dict[str, int] = {}  # group curve name -> its color slot
        self.points: dict[str, dict[RunKey, Series]] = {}  # grouped: metric -> each run's points
        self.tier_groups: dict[tuple[str, str], StoredGroup] = {}  # grouped: long metrics read from the tiers
        self._stale_bands: set[tuple[str, str]] = set()  # (metric, group) with new points
        self.band_timer = QTimer(self, singleShot=True, interval=BAND_MS, timeout=self._update_bands)
        self.group_box = QComboBox(toolTip="draw each group of runs as its mean with a min/max band")
        self.group_box.setSizeAdjustPolicy(QComboBox.SizeAdjustPolicy.AdjustToContents)
        self.group_box.activated.connect(self._group_changed)
        self.name_pattern = QLineEdit(NAME_PATTERN, toolTip="a regex: runs whose names are alike once its "
                                      "matches are removed form a group")
        self.name_pattern.editingFinished.connect(self._group_changed)
        self.name_pattern.hide()
        self.group_note = QLabel(wordWrap=True)  # why the runs are not grouped (a bad pattern)
        self.group_note.hide()
        self.search = QLineEdit(placeholderText="search charts… (words or a glob: rewards/*)",
                                clearButtonEnabled=True)
        self.search.textChanged.connect(self._layout)
        self.show_constant = QCheckBox("show constant charts")
        self.show_constant.toggled.connect(self._layout)
        self.folded = QLabel(wordWrap=True)
        self.smoothing = QSlider(Qt.Horizontal, minimum=0, maximum=99, value=0, toolTip="EMA smoothing")
        self.smoothing.valueChanged.connect(self._restyle)
        self.log_y = QCheckBox("log y")
        self.log_y.toggled.connect(self._restyle)
        self.x_axis = QComboBox()
        self.x_axis.addItems(["step", "wall time"])
        self.x_axis.currentTextChanged.connect(self._reload)
        self._store: LocalStore | None = None
        self.stored_points = STORED_POINTS  # a longer stored metric is charted from the tiers
        self.remote: RemoteTiers | None = None  # set by the app: a run the store lacks is drawn from its agent's tiers
        self.remote_keys: set[RunKey] = set()  # the charted runs drawn so
        self.remote_gap = REMOTE_GAP
        controls = QHBoxLayout()
        controls.addWidget(QLabel("smoothing"))
        controls.addWidget(self.smoothing)
        controls.addWidget(self.log_y)
        controls.addWidget(QLabel("x:"))
        controls.addWidget(self.x_axis)
        controls.addWidget(QLabel("group:"))
        controls.addWidget(self.group_box)
        controls.addWidget(self.name_pattern)
        controls.addWidget(self.search, 1)
        controls.addWidget(self.show_constant)
        self.legend = RunLegend()
        self.legend.highlighted.connect(self._highlight)
        self.legend.hidden_changed.connect(self._hide)
        self.legend.hide()
        self.grid_host = QWidget()
        self.grid = QGridLayout(self.grid_host)
        scroll = QScrollArea(widgetResizable=True)
        scroll.setWidget(self.grid_host)
        self.hint = QLabel("Select runs on the left to chart them; select several to compare.",
                           alignment=Qt.AlignCenter)
        layout = QVBoxLayout(self)
        layout.addLayout(controls)
        layout.addWidget(self.legend)
        layout.addWidget(self.group_note)
        layout.addWidget(self.folded)
        layout.addWidget(self.hint)
        layout.addWidget(scroll)

    def show_runs(self, keys: list[RunKey], store: LocalStore) -> None:
        """Chart these runs from scratch: history from the store, then live appends."""
        for chart in self.charts.values():
            chart.setParent(None)
            chart.deleteLater()
        self.charts = {}
        self.constant = {}
        self.varying = set()
        self.points = {}
        self.tier_groups = {}
        self.timelines = {}
        self._stale_bands = set()
        self.keys = list(keys)
        self.emphasis = None
        self.slots = self.run_colors.assign(self.keys)
        self.hidden &= set(self.keys)
        self.seen = {}
        self._store = store
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
            self.tier_groups = self._tier_groups(store, runs, group_of)
            self.member_of = {m: key for key in keys for m in group_of.get(key, [key])}
            for agent in {a for a, _ in self.member_of}:
                self.seen[agent] = store.cursor(agent)
            for key in keys:
                self._load(key, group_of.get(key, [key]), runs, store)
        self._update_bands()
        self._show_legend()
        self._layout()

    def _load(self, key: RunKey, keys: list[RunKey], runs: dict[RunKey, dict], store: LocalStore) -> None:
        """A run's points from every member, each attempt's superseded ones apart; a run of one node and
        one attempt draws its long metrics from the store's tiers instead, a resumed run with a long
        metric each attempt's tiers over the steps it keeps."""
        timeline = timeline_of(store, keys, runs)
        self.timelines[key] = timeline
        if keys == [key] and len(timeline.attempts) == 1 and self._lacks(store, key, runs.get(key, {})):
            for metric in sorted(runs[key].get("summary") or {}):
                self._append(key, metric, *_NO_POINTS, stored=RemoteSeries(self.remote, *key, metric))
            self.remote_keys.add(key)
            return
        if keys == [key] and len(timeline.attempts) == 1:
            for metric in store.metrics(*key):
                group = self.member.get(key)
                if (metric, group) in self.tier_groups:  # a long metric of a group: drawn from its runs' tiers
                    self._chart(metric)
                    continue
                stored = self._stored(store, key, metric)
                if stored is not None:  # too long to hold: drawn from the store's tiers
                    self._append(key, metric, *_NO_POINTS, stored=stored)
                else:
                    self._append(key, metric, *store.series(*key, metric))
            return
        pieces = None if self.groups else self._attempt_pieces(store, keys, timeline)
        if pieces is not None:
            for metric, (kept, superseded) in pieces.items():
                self._append(key, metric, *_NO_POINTS, stored=kept)
                if superseded.parts:
                    self._append(key, metric, *_NO_POINTS, faint=True, stored=superseded)
            return
        for p in read_points(store, keys, timeline):
            self._append_split(key, p.metric, p.steps, p.vals, p.times, timeline.superseded(p.numbers, p.steps))

    def _append_split(self, key: RunKey, metric: str, steps: np.ndarray, vals: np.ndarray, times: np.ndarray,
                      old: np.ndarray) -> bool:
        """The run's curve gets the points no later attempt superseded, its faint curve the others."""
        made = False
        if old.any():
            made = self._append(key, metric, steps[old], vals[old], times[old], faint=True)
            steps, vals, times = steps[~old], vals[~old], times[~old]
        return (self._append(key, metric, steps, vals, times) if len(steps) else False) or made

    def _lacks(self, store: LocalStore, key: RunKey, run: dict) -> bool:
        """Whether the store lacks ``remote_gap`` or more of the run's points on its agent (an app
        that never saw it, still following the journal): its charts then draw the agent's tiers."""
        if self.remote is None or self.groups or self.x_axis.currentText() != "step":
            return False
        return int(run.get("points") or 0) - store.points(*key) >= self.remote_gap

    def remote_answered(self, agent: str) -> None:
        """An agent answered tiers: the charts drawing them redraw (and may turn out flat)."""
        relayout = False
        for metric, chart in self.charts.items():
            if any(isinstance(c.series, RemoteSeries) and c.series.key[0] == agent for c in chart.curves.values()):
                chart.schedule_redraw()
                relayout |= self._check_constant(metric, chart)
        if relayout:
            self._layout()

    def remote_filled(self, store: LocalStore) -> bool:
        """Whether a run drawn from its agent's tiers is now in the store (charted from it on a reload)."""
        if not self.remote_keys:
            return False
        runs = {(r["agent"], r["id"]): r for r in store.runs()}
        return any(not self._lacks(store, key, runs.get(key, {})) for key in self.remote_keys)

    def _stored(self, store: LocalStore, key: RunKey, metric: str) -> StoredSeries | None:
        """A curve read from the tiers for a metric of more than ``stored_points`` points, on either
        x axis, ungrouped (a group's band needs its runs' points in memory)."""
        if self.groups:
            return None
        stored = StoredSeries(store, *key, metric, by_time=self.x_axis.currentText() == "wall time")
        return stored if len(stored) > self.stored_points else None

    def _attempt_pieces(self, store: LocalStore, keys: list[RunKey],
                        timeline: Timeline) -> dict[str, tuple[StoredPieces, StoredPieces]] | None:
        """A resumed run's curves read from its attempts' tiers, when a metric of it is longer than
        ``stored_points`` (else None: its points are held): per metric, the run's curve (each attempt
        before the first step of a later one) and its superseded points (each attempt from there on).
        The attempts' first steps come from their tiers' extents, not from reading every point."""
        by_time = self.x_axis.currentText() == "wall time"
        numbered = {}  # global attempt number -> (member, its tiers' number among the member's attempts)
        for member in keys:
            mine = [a.number for a in timeline.attempts if a.member == member]
            numbered.update({n: (member, i) for i, n in enumerate(mine, 1)})
        metrics = sorted({m for member in keys for m in store.metrics(*member)})
        lengths = {(n, metric): store.summary(*member, attempt_key(metric, i))
                   for n, (member, i) in numbered.items() for metric in metrics}
        lengths = {k: rec for k, rec in lengths.items() if len(rec)}
        if not any(int(rec["count"][0]) > self.stored_points for rec in lengths.values()):
            return None
        for (n, _), rec in sorted(lengths.items()):  # each attempt's first step, as a read of its points finds it
            timeline.saw(np.array([n]), rec["xfirst"])
        cut = {n: timeline.cut(n) for n in numbered}

        def piece(metric: str, n: int, clip: tuple[float, float]) -> StoredSeries:
            member, i = numbered[n]
            return StoredSeries(store, *member, attempt_key(metric, i), by_time, clip)

        out = {}
        for metric in metrics:
            ns = sorted(n for n in numbered if (n, metric) in lengths)
            out[metric] = (StoredPieces([piece(metric, n, (LOWEST, HIGHEST if cut[n] is None else cut[n]))
                                         for n in ns]),
                           StoredPieces([piece(metric, n, (cut[n], HIGHEST)) for n in ns if cut[n] is not None]))
        return out

    def _tier_groups(self, store: LocalStore, runs: dict[RunKey, dict],
                     group_of: dict[RunKey, list[RunKey]]) -> dict[tuple[str, str], StoredGroup]:
        """(metric, group) -> the group drawn from its runs' tiers: each metric of a group with a run
        longer than ``stored_points`` there, when every run of the group is one node's single
        attempt (a resumed run's superseded points are told apart in memory)."""
        out: dict[tuple[str, str], StoredGroup] = {}
        for group, keys in self.groups.items():
            if any(group_of.get(k, [k]) != [k] or len(attempts([(k, runs.get(k, {}), store.events(*k))])) > 1
                   for k in keys):
                continue
            by_metric: dict[str, list[StoredSeries]] = {}
            for key in keys:
                for metric in store.metrics(*key):
                    by_metric.setdefault(metric, []).append(StoredSeries(store, *key, metric))
            out.update({(metric, group): StoredGroup(members) for metric, members in by_metric.items()
                        if any(len(m) > self.stored_points for m in members)})
        return out

    def _make_groups(self, names: dict[RunKey, str], configs: dict[RunKey, dict]) -> None:
        """Offer the config keys that tell the runs apart, and group the runs if asked to."""
        choice = self.group_box.currentData()
        self.group_box.clear()
        self.group_box.addItem("no groups", None)
        self.group_box.addItem("name pattern", "name")
        for key in sorted(config_diff(configs)):
            self.group_box.addItem(f"config {key}", f"config:{key}")
        self.group_box.setCurrentIndex(max(self.group_box.findData(choice), 0))
        self.groups, self.member = {}, {}
        self.group_note.hide()
        if self.group_by is None or not self.keys:
            return
        try:
            grouped = group_runs(names, configs, self.group_by)
        except ValueError as exc:
            self.group_note.setText(f"{exc}; the runs are drawn ungrouped")
            self.group_note.show()
            return
        self.groups = {GROUP + label: runs for label, runs in grouped.items()}
        self.member = {key: name for name, runs in self.groups.items() for key in runs}
        self.group_slots = self.run_colors.assign(self.groups)

    def _show_legend(self) -> None:
        if self.groups:
            entries = [(name, f"{name[len(GROUP):]} · {len(runs)} run{'s' if len(runs) != 1 else ''}",
                        self.group_slots[name])
                       for name, runs in self.groups.items()]
        else:
            entries = [(key, self.labels[key], self.slots[key]) for key in self.keys]
        self.legend.set_runs(entries, self.hidden)

    def _group_changed(self, *_: object) -> None:
        """Another grouping: the charts are rebuilt from the store; groups align runs by step."""
        data = self.group_box.currentData()
        self.name_pattern.setVisible(data == "name")
        group_by = f"name:{self.name_pattern.text()}" if data == "name" else data
        if group_by == self.group_by:
            return
        self.group_by = group_by
        self.hidden = set()
        if group_by is not None and self.x_axis.currentText() != "step":
            self.x_axis.blockSignals(True)
            self.x_axis.setCurrentText("step")
            self.x_axis.blockSignals(False)
        self.x_axis.setEnabled(group_by is None)
        self._reload()

    def add_entries(self, agent: str, entries: list[Entry]) -> None:
        """Live metric chunks of the charted runs (other runs' entries are ignored).  A resume, or the
        first points of an attempt, changes which points are superseded: the charts are read again."""
        added = False
        floor = self.seen.get(agent)
        for e in entries:
            key = self.member_of.get((agent, e.run))
            if key is None or e.kind not in (KIND_METRIC, KIND_EVENT) or (floor is not None and e.id <= floor):
                continue
            if e.kind == KIND_EVENT:
                body = entry_body(e)
                if isinstance(body, dict) and body.get("event") == "resumed":
                    self._reload()
                    return
                continue
            steps, vals, times = entry_points(e)
            timeline = self.timelines[key]
            numbers = timeline.numbers((agent, e.run), times)
            if timeline.saw(numbers, steps):
                self._reload()
                return
            added |= self._append_split(key, e.metric, steps, vals, times, timeline.superseded(numbers, steps))
        if self._stale_bands and not self.band_timer.isActive():
            self.band_timer.start()
        if added:
            self._layout()

    def pin(self, metric: str, on: bool = True) -> None:
        """Pin a chart to the top of the grid (or unpin it); remembered in the app's store."""
        pins = [m for m in self.pinned or [] if m != metric] + ([metric] if on else [])
        self.pinned = pins
        if self._store is not None:
            self._store.put_setting(PINNED, pins)
        if metric in self.charts:
            self._title(metric)
        self._layout()

    def show_alerts(self, markers: dict[RunKey, list[Marker]]) -> None:
        """Alert markers of the charted runs: on the chart of the alert's metric, or on every
        chart of the run for an alert without one (a stale run)."""
        self.alert_markers = markers
        for metric, chart in self.charts.items():
            self._mark(metric, chart)

    def _mark(self, metric: str, chart: ChartWidget) -> None:
        by_time = self.x_axis.currentText() == "wall time"
        several = len(self.keys) > 1
        marks = []
        for key in self.keys:
            name = self.labels.get(key, key[1])
            for m in self.alert_markers.get(key, ()):
                x = m.time if by_time else m.step
                if x is None or m.metric not in (metric, None):
                    continue
                label = f"{'⚠' if m.state == 'firing' else '✓'} {m.rule}" + (f" ({name})" if several else "")
                marks.append(AlertMark(float(x), label, f"{name}: {m.detail} ({m.state})", m.state == "firing"))
            for attempt, step in self.timelines[key].resumes() if key in self.timelines else ():
                x = attempt.started if by_time else step
                if x is not None:
                    marks.append(AlertMark(float(x), attempt.label + (f" ({name})" if several else ""),
                                           f"{name}: {attempt.label}", resume=True))
        chart.set_alert_marks(marks)

    def redraw(self) -> None:
        self.hint.setVisible(not self.shown)
        if self.charts and not self.shown:
            self.hint.setText("No chart matches the search." if self.search.text().strip()
                              else "Every chart is constant: tick \"show constant charts\" to see them.")
        else:
            self.hint.setText("Select runs on the left to chart them; select several to compare.")

    def _chart(self, metric: str) -> tuple[ChartWidget, bool]:
        """The metric's chart, made if new (True: the grid needs laying out again); a group of it
        drawn from its runs' tiers gets its curve with the chart."""
        chart = self.charts.get(metric)
        if chart is not None:
            return chart, False
        by_time = self.x_axis.currentText() == "wall time"
        chart = self.charts[metric] = ChartWidget(axisItems={"bottom": pg.DateAxisItem()} if by_time else None)
        if len(self.charts) > 1:  # zoom and pan one chart, all follow
            chart.setXLink(next(iter(self.charts.values())))
        chart.setMinimumHeight(CHART_HEIGHT)
        self._title(metric)
        menu = chart.getPlotItem().getViewBox().menu  # right-click on the chart
        action = menu.addAction("Pin to top / unpin")
        action.setData(metric)
        action.triggered.connect(self._toggle_pin)  # a bound method: a lambda holding the panel would leak it
        self._style(chart)
        self._mark(metric, chart)
        stored = {group: g for (m, group), g in self.tier_groups.items() if m == metric}
        for group, g in stored.items():
            self._add_group(chart, group, g)
        if stored:
            self._check_constant(metric, chart)
        return chart, True

    def _add_group(self, chart: ChartWidget, group: str, stored: StoredGroup | None = None) -> None:
        slot = self.group_slots[group]
        chart.add_group(group, color=color(slot), label=group[len(GROUP):], dashed=dashed(slot), stored=stored)
        chart.set_hidden(group, group in self.hidden)

    def _append(self, key: RunKey, metric: str, steps: np.ndarray, vals: np.ndarray, times: np.ndarray,
                faint: bool = False, stored: StoredSeries | RemoteSeries | None = None) -> bool:
        """Returns True when a new chart was made (the grid needs laying out again).  ``faint``: points
        a later attempt superseded (not in a group's band); ``stored`` makes the run's curve one read
        from the store's tiers."""
        chart, new = self._chart(metric)
        if self.groups:
            return (not faint and self._append_to_group(key, metric, chart, steps, vals)) or new
        name = key[1] + (OLD if faint else "")
        if name not in chart.curves:
            slot = self.slots[key]
            label = self.labels.get(key, key[1]) + (" (superseded)" if faint else "")
            chart.add_curve(name, color=color(slot), label=label, dashed=dashed(slot), faint=faint, series=stored)
            if key in self.hidden:
                chart.set_hidden(name, True)
            chart.set_emphasis(_curve(self.emphasis) if self.emphasis is not None else None)
        xs = times if self.x_axis.currentText() == "wall time" else steps.astype(float)
        chart.append(name, xs, vals)
        return self._check_constant(metric, chart) or new

    def _append_to_group(self, key: RunKey, metric: str, chart: ChartWidget, steps: np.ndarray,
                         vals: np.ndarray) -> bool:
        """A grouped run's points are kept by the panel; its group's band is marked for the timer."""
        group = self.member.get(key)
        if group is None:
            return False
        if (metric, group) in self.tier_groups:  # in the store already: the next frame reads it
            chart.append(group, steps.astype(float), vals)
            return False
        self.points.setdefault(metric, {}).setdefault(key, Series()).append(steps.astype(float), vals)
        if group not in chart.curves:
            self._add_group(chart, group)
        self._stale_bands.add((metric, group))
        return False

    def _update_bands(self) -> None:
        """Recompute the bands of groups whose runs got points (on the timer: O(points) each)."""
        stale, self._stale_bands = self._stale_bands, set()
        relayout = False
        for metric, group in stale:
            chart = self.charts.get(metric)
            if chart is None:
                continue
            members = [self.points[metric][k] for k in self.groups[group] if k in self.points.get(metric, {})]
            chart.set_group(group, *band([(s.x, s.y) for s in members]))
            self.varying.discard(metric)  # a band is drawn anew, not appended to
            relayout |= self._check_constant(metric, chart)
        if relayout:
            self._layout()

    def _toggle_pin(self) -> None:
        metric = self.sender().data()
        self.pin(metric, metric not in (self.pinned or []))

    def _check_constant(self, metric: str, chart: ChartWidget) -> bool:
        """Re-decide whether a chart is flat; True when that changed (the grid must change)."""
        if metric in self.varying:  # a live chart of many runs: not every curve's range on each append
            return False
        series = [c.series for c in chart.curves.values()]
        y_ranges, finite = [s.y_range() for s in series], all(s.all_finite for s in series)
        value = constant_value(y_ranges, (s.x_range() for s in series), finite)
        if value is None and varies(y_ranges, finite):
            self.varying.add(metric)
        was = self.constant.get(metric)
        if value is None:
            self.constant.pop(metric, None)
        else:
            self.constant[metric] = value
        return (was is None) != (value is None)

    def _title(self, metric: str) -> None:
        self.charts[metric].setTitle(f"{metric}  (pinned)" if metric in (self.pinned or []) else metric)

    def _reload(self, *_: object) -> None:
        """Another x axis: the charts are rebuilt from the store."""
        if self._store is not None:
            self.show_runs(self.keys, self._store)

    def _layout(self, *_: object) -> None:
        for chart in self.charts.values():
            self.grid.removeWidget(chart)
        grid = arrange(self.charts, self.pinned or [], self.search.text(), self.constant,
                       self.show_constant.isChecked())
        self.shown = grid.shown
        for i, metric in enumerate(grid.shown):
            self.grid.addWidget(self.charts[metric], i // COLUMNS, i % COLUMNS)
            self.charts[metric].show()
        for metric in set(self.charts) - set(grid.shown):
            self.charts[metric].hide()
        self.folded.setText(folded_text(grid.folded, self.constant))
        self.folded.setVisible(bool(grid.folded))
        self.redraw()

    def _highlight(self, key: RunKey | str | None) -> None:
        """A hovered legend entry: that run (or group) wide and on top of every chart, the others dimmed."""
        self.emphasis = key
        for chart in self.charts.values():
            chart.set_emphasis(_curve(key) if key is not None else None)

    def _hide(self, key: RunKey | str, hidden: bool) -> None:
        if hidden:
            self.hidden.add(key)
        else:
            self.hidden.discard(key)
        for chart in self.charts.values():
            for name in (_curve(key), _curve(key) + OLD):
                if name in chart.curves:
                    chart.set_hidden(name, hidden)

    def _restyle(self, *_: object) -> None:
        for chart in self.charts.values():
            self._style(chart)

    def _style(self, chart: ChartWidget) -> None:
        chart.set_smoothing(self.smoothing.value() / 100)
        chart.set_log_y(self.log_y.isChecked())



_NO_POINTS = (np.empty(0, np.int64), np.empty(0), np.empty(0))
LOWEST, HIGHEST = ALL_STEPS


def _curve(key: RunKey | str) -> str:
    """The curve a legend entry stands for: a run's is named by its id, a group's by its name."""
    return key if isinstance(key, str) else key[1]
