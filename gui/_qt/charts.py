"""The Charts tab: one chart per metric of the selected runs, grouped by prefix, runs overlaid,
each run in its color (``pilothouse.gui.palette``) and named in the legend above the charts.
Pinned charts come first, a search narrows the grid, flat charts fold into one line
(``pilothouse.gui.chart_layout``).  Grouped (by a config key or a name pattern), each group is
drawn as its mean with a min/max band instead of its runs.  A run's reward quantiles are one chart
of bands (``pilothouse.gui._qt.distribution``).  Alerts, resumes and the commands a run applied are
marked on its charts (hover a line for what and who); the "steering" box hides the commands' marks.

Every decision (which curves, from where, on which axis, in which groups) is the Charts model's
(``pilothouse.gui.charts_model``); this panel holds the widgets, forwards what the user does to the
model and draws what it holds.
"""

from __future__ import annotations

import html
from collections import deque

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

from pilothouse.wire.entries import Entry

from .. import distribution
from ..alerts import Marker
from ..chart_layout import arrange, folded_text
from ..charts_model import NAME_PATTERN, OLD, Change, ChartsModel, curve_name
from ..curves import Axis, Curve
from ..local_store import LocalStore
from ..models import RunKey
from ..palette import RunColors, color, dashed
from .chart import ChartWidget
from .distribution import DistributionChart
from .legend import RunLegend

COLUMNS = 2
CHART_HEIGHT = 240
SEARCH_ROOM = "rollouts/reward/mean"  # the search box is never narrower than this text
BAND_MS = 1000  # a group's band is recomputed from its runs' points at most this often
TURN_CURVES = 48  # live curves drawn in one turn of the event loop at most (about 35 ms here), a curve making its
NEW_CHART = 48  # chart counting as a turn's (a chart takes 11 ms): 32 runs' first points made 10 charts and 320
# curves in a 330 ms turn; three charts a turn kept the first second's points 20-40 ms longer (4 x 2,000 p99)


class ChartsPanel(QWidget):
    def __init__(self, colors: RunColors | None = None) -> None:
        super().__init__()
        self.model = ChartsModel(colors)
        self.charts: dict[str, ChartWidget] = {}
        self.emphasis: RunKey | str | None = None  # hovered in the legend
        self.shown: list[str] = []  # the grid, in order
        self.band_timer = QTimer(self, singleShot=True, interval=BAND_MS, timeout=self._update_bands)
        self._to_draw: deque[tuple[str, Curve]] = deque()  # live curves of the model not on their charts yet
        self._draw_timer = QTimer(self, singleShot=True, interval=0, timeout=self._draw_later)
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
        self.search.textChanged.connect(self._searched)
        # a crowded row of controls must not squeeze the box to a letter: a metric name stays readable
        self.search.setMinimumWidth(self.search.fontMetrics().horizontalAdvance(SEARCH_ROOM))
        self.show_constant = QCheckBox("show constant charts")
        self.show_constant.toggled.connect(self._layout)
        self.steering = QCheckBox("steering", checked=True, toolTip="mark where each run applied a command "
                                  "(set, pause, resume, checkpoint, stop): hover a mark for what changed and who asked")
        self.steering.toggled.connect(self._steering_toggled)
        self.folded = QLabel(wordWrap=True)
        self.smoothing = QSlider(Qt.Horizontal, minimum=0, maximum=99, value=0, toolTip="EMA smoothing")
        self.smoothing.valueChanged.connect(self._restyle)
        self.smoothing_value = QLabel(toolTip="EMA smoothing")  # a slider alone hides what it is set to
        self.smoothing_value.setMinimumWidth(self.smoothing_value.fontMetrics().horizontalAdvance("0.00 "))
        self.smoothing.valueChanged.connect(self._show_smoothing)
        self._show_smoothing()
        self.log_y = QCheckBox("log y")
        self.log_y.toggled.connect(self._restyle)
        self.x_axis = QComboBox()
        for axis in Axis:
            self.x_axis.addItem(axis.value, axis)
        self.x_axis.currentIndexChanged.connect(self._axis_changed)
        controls = QHBoxLayout()
        for widget in (QLabel("smoothing"), self.smoothing, self.smoothing_value, self.log_y, QLabel("x:"), self.x_axis, QLabel("group:"),
                       self.group_box, self.name_pattern):
            controls.addWidget(widget)
        controls.addWidget(self.search, 1)
        controls.addWidget(self.steering)
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
        self.model.show_runs(keys, store)
        self._rebuild()

    def add_entries(self, agent: str, entries: list[Entry]) -> None:
        """Live entries (the model keeps those of the charted runs); the charts follow."""
        self._apply(self.model.add_entries(agent, entries))

    def pin(self, metric: str, on: bool = True) -> None:
        """Pin a chart to the top of the grid (or unpin it); remembered in the app's store."""
        self.model.pin(metric, on)
        if metric in self.charts:
            self._title(metric)
        self._layout()

    def show_alerts(self, markers: dict[RunKey, list[Marker]]) -> None:
        """Alert markers of the charted runs: on the chart of the alert's metric, or on every
        chart of the run for an alert without one (a stale run)."""
        self.model.alert_markers = markers
        self._mark()

    def _mark(self) -> None:
        for metric, chart in self.charts.items():
            chart.set_alert_marks(self.model.marks(metric))

    def _steering_toggled(self, on: bool) -> None:
        """The applied commands' marks on every chart, or on none."""
        self.model.show_steering = on
        self._mark()

    def remote_answered(self, agent: str) -> None:
        """An agent answered tiers: the charts drawing them redraw (and may turn out flat)."""
        relayout = False
        for metric in self.model.remote_answered(agent):
            if metric in self.charts:  # else drawn when made
                self.charts[metric].redraw_soon()  # what a pan or zoom asked for: not a live frame to space out
            relayout |= self.model.check_constant(metric)
        if relayout:
            self._layout()

    def redraw(self) -> None:
        self.hint.setVisible(not self.shown)
        if self.charts and not self.shown:
            self.hint.setText("No chart matches the search." if self.search.text().strip()
                              else "Every chart is constant: tick \"show constant charts\" to see them.")
        else:
            self.hint.setText("Select runs on the left to chart them; select several to compare.")

    def _rebuild(self) -> None:
        """Every chart made anew from the model (new runs, axis or grouping, a resume)."""
        for chart in self.charts.values():
            chart.setParent(None)
            chart.deleteLater()
        self.charts = {}
        self.emphasis = None
        self._to_draw.clear()  # every curve of the model is drawn below
        self._fill_group_box()
        for metric, curves in self.model.curves.items():
            for curve in curves.values():
                self._draw_curve(metric, curve)
        self._update_bands()
        self.legend.set_runs(self.model.legend(), self.model.hidden)
        self._layout()

    def _apply(self, change: Change) -> None:
        if change.reload:
            self._rebuild()
            return
        backlog = bool(self._to_draw)  # its timer is due: what comes meanwhile waits its turn behind it
        self._to_draw += change.added
        made = not backlog and self._draw_some()
        for metric in change.grew & set(self.charts):  # a chart still to be made draws its points when made
            self.charts[metric].schedule_redraw()
        if self.model.stale_bands and not self.band_timer.isActive():
            self.band_timer.start()
        if change.marks:
            self._mark()
        if change.relayout or made:
            self._layout()

    def _draw_some(self) -> bool:
        """Draw the live curves waiting, TURN_CURVES' worth, the rest in the next turns of the event loop
        (the batches of points in between are not held up); whether a chart was made."""
        made, budget = False, TURN_CURVES
        while self._to_draw and budget > 0:
            metric, curve = self._to_draw.popleft()
            new = metric not in self.charts
            self._draw_curve(metric, curve)
            made |= new
            budget -= NEW_CHART if new else 1
        if self._to_draw:
            self._draw_timer.start()
        return made

    def _draw_later(self) -> None:
        if self._draw_some():
            self._layout()

    def _fill_group_box(self) -> None:
        """Offer the config keys that tell the runs apart; say why the runs are not grouped."""
        choice = self.group_box.currentData()
        self.group_box.clear()
        self.group_box.addItem("no groups", None)
        self.group_box.addItem("name pattern", "name")
        for key in self.model.group_keys:
            self.group_box.addItem(f"config {key}", f"config:{key}")
        self.group_box.setCurrentIndex(max(self.group_box.findData(choice), 0))
        self.group_note.setText(self.model.group_note)
        self.group_note.setVisible(bool(self.model.group_note))

    def _group_changed(self, *_: object) -> None:
        """Another grouping: the charts are rebuilt from the store; groups align runs by step."""
        data = self.group_box.currentData()
        self.name_pattern.setVisible(data == "name")
        if not self.model.set_group_by(f"name:{self.name_pattern.text()}" if data == "name" else data):
            return
        self.x_axis.blockSignals(True)
        self.x_axis.setCurrentIndex(self.x_axis.findData(self.model.axis))
        self.x_axis.blockSignals(False)
        self.x_axis.setEnabled(self.model.group_by is None)
        self._rebuild()

    def _axis_changed(self, *_: object) -> None:
        self.model.set_axis(self.x_axis.currentData())
        self._rebuild()

    def _chart(self, metric: str) -> ChartWidget:
        """The metric's chart widget, made if new."""
        chart = self.charts.get(metric)
        if chart is not None:
            return chart
        by_time = self.model.axis is Axis.TIME
        kind = DistributionChart if metric == distribution.CHART else ChartWidget
        chart = self.charts[metric] = kind(axisItems={"bottom": pg.DateAxisItem()} if by_time else None)
        chart.setMinimumHeight(CHART_HEIGHT)
        chart.setLabel("bottom", self.model.axis.value)  # "step" or "wall time": what x is, said on the chart
        chart.setLabel("left", html.escape(metric))  # pyqtgraph reads labels as rich text
        self._title(metric)
        menu = chart.getPlotItem().getViewBox().menu  # right-click on the chart
        action = menu.addAction("Pin to top / unpin")
        action.setData(metric)
        action.triggered.connect(self._toggle_pin)  # a bound method: a lambda holding the panel would leak it
        self._style(chart)
        chart.set_alert_marks(self.model.marks(metric))
        return chart

    def _draw_curve(self, metric: str, curve: Curve) -> None:
        """A curve of the model on its chart (made if new), hidden or dimmed as the legend says; a
        reward quantile is a part of its run's bands."""
        chart = self._chart(metric)
        style = {"color": color(curve.slot), "label": curve.label, "dashed": dashed(curve.slot)}
        name, part = distribution.split(curve.name)
        if curve.group:
            chart.add_group(name, series=curve.source, **style)
        elif part is not None and isinstance(chart, DistributionChart):
            chart.add_quantile(name, part, curve.source, faint=curve.faint, **style)
        else:
            chart.add_curve(name, faint=curve.faint, series=curve.source, **style)
        if curve.owner in self.model.hidden and name in chart.curves:
            chart.set_hidden(name, True)
        chart.set_emphasis(curve_name(self.emphasis) if self.emphasis is not None else None)
        chart.schedule_redraw()

    def _update_bands(self) -> None:
        """Recompute the bands of groups whose runs got points (on the timer: O(points) each)."""
        if self._to_draw:  # a group's curve may not be on its chart yet
            self.band_timer.start()
            return
        bands, relayout = self.model.update_bands()
        for metric, curve, lo, hi, count in bands:
            self.charts[metric].set_group(curve.name, curve.source, lo, hi, count)
        if relayout:
            self._layout()

    def _toggle_pin(self) -> None:
        metric = self.sender().data()
        self.pin(metric, metric not in (self.model.pinned or []))

    def _title(self, metric: str) -> None:
        self.charts[metric].setTitle(f"{metric}  (pinned)" if metric in (self.model.pinned or []) else metric)

    def _searched(self, *_: object) -> None:
        """Another set of charts: each fits its x range to its own data again (a chart searched alone
        fills its plot instead of keeping the range a longer, now hidden chart set through the link)."""
        self._layout()
        for metric in self.shown:
            self.charts[metric].set_follow(True)

    def _layout(self, *_: object) -> None:
        """Place the shown charts in the grid and link their x.  Only a chart whose place changed is
        moved, and only a changed link is set: moving every chart and relinking them all resized and
        re-ranged each one per layout, 100-200 ms a turn while a job's charts were being made."""
        grid = arrange(self.charts, self.model.pinned or [], self.search.text(), self.model.constant,
                       self.show_constant.isChecked())
        self.shown = grid.shown
        places = {metric: divmod(i, COLUMNS) for i, metric in enumerate(grid.shown)}
        for metric, chart in self.charts.items():
            index = self.grid.indexOf(chart)
            place = places.get(metric)
            if (self.grid.getItemPosition(index)[:2] if index >= 0 else None) != place:
                if index >= 0:
                    self.grid.removeWidget(chart)
                if place is not None:
                    self.grid.addWidget(chart, *place)
            chart.setVisible(place is not None)
        lead = self.charts[grid.shown[0]] if grid.shown else None
        for metric, chart in self.charts.items():  # zoom and pan one shown chart, the others follow; a hidden
            _link(chart, lead if metric in places and chart is not lead else None)  # chart's run sets no range
        self.folded.setText(folded_text(grid.folded, self.model.constant))
        self.folded.setVisible(bool(grid.folded))
        self.redraw()

    def _highlight(self, owner: RunKey | str | None) -> None:
        """A hovered legend entry: that run (or group) wide and on top of every chart, the others dimmed."""
        self.emphasis = owner
        for chart in self.charts.values():
            chart.set_emphasis(curve_name(owner) if owner is not None else None)

    def _hide(self, owner: RunKey | str, hidden: bool) -> None:
        self.model.hide(owner, hidden)
        for chart in self.charts.values():
            for name in (curve_name(owner), curve_name(owner) + OLD):
                if name in chart.curves:
                    chart.set_hidden(name, hidden)

    def _restyle(self, *_: object) -> None:
        for chart in self.charts.values():
            self._style(chart)

    def _show_smoothing(self, *_: object) -> None:
        self.smoothing_value.setText(f"{self.smoothing.value() / 100:.2f}")

    def _style(self, chart: ChartWidget) -> None:
        chart.set_smoothing(self.smoothing.value() / 100)
        chart.set_log_y(self.log_y.isChecked())


def _link(chart: ChartWidget, lead: ChartWidget | None) -> None:
    """Link the chart's x to the lead chart's (None: unlink), unless it is so already."""
    want = None if lead is None else lead.getViewBox()
    if chart.getViewBox().linkedView(pg.ViewBox.XAxis) is not want:
        chart.setXLink(lead)
