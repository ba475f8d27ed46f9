"""The GPU/host panel: per node, charts over wall time of what the agent's sampler reads.

Why wall time: system samples have no training step, and a node's load is read against the
clock (and across runs).  Data comes from the agents' ``sys-HOST`` runs (kind "system"):
history from the local store, then live entries above the cursor read in the same snapshot,
so no sample is drawn twice or skipped at the seam (as in the Charts tab).
"""

from __future__ import annotations

import time
from collections.abc import Callable

import pyqtgraph as pg
from PySide6.QtCore import Qt
from PySide6.QtWidgets import (
    QComboBox,
    QGridLayout,
    QGroupBox,
    QHBoxLayout,
    QLabel,
    QScrollArea,
    QSplitter,
    QVBoxLayout,
    QWidget,
)

from pilothouse.wire.checks import SYSTEM_RUN_PREFIX
from pilothouse.wire.entries import KIND_METRIC, Entry, entry_points

from ..gpu_grid import GpuGrid, gpu_reading, natural
from ..local_store import LocalStore
from ..models import RunKey
from ..palette import PALETTE
from .chart import ChartWidget
from .gpu_grid import GpuGridPanel

COLUMNS = 2
CHART_HEIGHT = 200
NO_GPU = "No GPU on this node: host readings only."
HINT = "No system readings yet: each agent samples its node's GPUs, CPU and RAM once a second."

# Chart titles in display order; GPU charts first, the host's last.
GPU_UTIL, GPU_MEM, GPU_POWER, GPU_TEMP = ("GPU utilization (%)", "GPU memory used (GB)", "GPU power (W)",
                                          "GPU temperature (°C)")
CPU, RAM = "CPU (%)", "RAM used (GB)"
ORDER = (GPU_UTIL, GPU_MEM, GPU_POWER, GPU_TEMP, CPU, RAM)
_GPU_READINGS = {"util": GPU_UTIL, "mem_used_gb": GPU_MEM, "mem_total_gb": GPU_MEM, "power_w": GPU_POWER,
                 "temp_c": GPU_TEMP}
_HOST_READINGS = {"cpu/util": (CPU, "cpu"), "ram/used_gb": (RAM, "used"), "ram/total_gb": (RAM, "total")}
TOTAL_SUFFIX = " total"  # a capacity drawn dashed, as the reference for the "used" curve


def placement(metric: str) -> tuple[str, str] | None:
    """(chart title, curve name) of a sampler metric; None for readings not charted (ram/util)."""
    if metric in _HOST_READINGS:
        return _HOST_READINGS[metric]
    device, _, reading = metric.partition("/")
    if device.startswith("gpu") and reading in _GPU_READINGS:
        return _GPU_READINGS[reading], device + (TOTAL_SUFFIX if reading == "mem_total_gb" else "")
    return None


class NodeSection(QGroupBox):
    """One node's charts; the GPU ones appear with the first gpu* reading."""

    def __init__(self, key: RunKey, host: str) -> None:
        super().__init__(f"{host}  ({key[0]})")
        self.charts: dict[str, ChartWidget] = {}
        self.floor = 0  # journal id up to which its history was read from the store: live entries start above
        self.no_gpu = QLabel(NO_GPU)
        self.grid = QGridLayout()
        layout = QVBoxLayout(self)
        layout.addWidget(self.no_gpu)
        layout.addLayout(self.grid)

    def append(self, metric: str, times, vals) -> None:
        place = placement(metric)
        if place is None:
            return
        title, name = place
        chart = self.charts.get(title) or self._add_chart(title)
        if name not in chart.curves:
            base = name.removesuffix(TOTAL_SUFFIX)
            color = PALETTE[int(base[3:]) % len(PALETTE)] if base.startswith("gpu") else PALETTE[0]
            chart.add_curve(name, color=color)
            if name.endswith(TOTAL_SUFFIX) or name == "total":
                chart.curves[name].raw.setPen(pg.mkPen(color, style=Qt.PenStyle.DashLine))
        chart.append(name, times, vals)

    def has_gpu(self) -> bool:
        return any(title in self.charts for title in ORDER[:4])

    def _add_chart(self, title: str) -> ChartWidget:
        chart = self.charts[title] = ChartWidget()
        chart.setMinimumHeight(CHART_HEIGHT)
        chart.setTitle(title)
        chart.getPlotItem().setAxisItems({"bottom": pg.DateAxisItem()})
        for widget in self.charts.values():
            self.grid.removeWidget(widget)
        for i, name in enumerate(t for t in ORDER if t in self.charts):
            self.grid.addWidget(self.charts[name], i // COLUMNS, i % COLUMNS)
        self.no_gpu.setVisible(not self.has_gpu())
        return chart


class SystemPanel(QWidget):
    """Every node's system charts, one section per agent's system run; with more than one node,
    the grid of every GPU on top (``GpuGridPanel``) and the charts of one chosen node below it.

    Why only one node's charts then: six charts per node are 384 plot widgets at 64 nodes, each
    redrawing on its own timer; the grid carries the whole job, a click opens a node's charts."""

    def __init__(self) -> None:
        super().__init__()
        self.nodes: dict[RunKey, NodeSection] = {}  # the sections built: every node's, or the chosen one's
        self.hosts: dict[RunKey, str] = {}  # every node with a system run
        self.seen: dict[str, tuple[int, Entry | None]] = {}  # agent url -> the last journal id shown, its entry
        self.store: LocalStore | None = None
        self.grid = GpuGrid()
        self.grid_panel = GpuGridPanel(self.grid)
        self.grid_panel.view.selected.connect(lambda node, _gpu: self.open_node(node))
        self.grid_dirty = False
        self._painted = 0.0  # monotonic time of the grid's last repaint
        self.chosen: RunKey | None = None  # with several nodes: the one whose charts are shown
        self.choice = QComboBox()
        self.choice_keys: list[RunKey] = []  # the chooser's nodes, in its order
        self.choice.activated.connect(lambda i: self.open_node(self.choice_keys[i]))
        self.choice_row = QWidget()
        row = QHBoxLayout(self.choice_row)
        row.setContentsMargins(0, 0, 0, 0)
        row.addWidget(QLabel("Charts of node"))
        row.addWidget(self.choice)
        row.addStretch()
        self.hint = QLabel(HINT, alignment=Qt.AlignCenter, wordWrap=True)
        host = QWidget()
        self.column = QVBoxLayout(host)
        self.column.addWidget(self.hint)
        self.column.addStretch()
        scroll = QScrollArea(widgetResizable=True)
        scroll.setWidget(host)
        below = QWidget()
        lower = QVBoxLayout(below)
        lower.setContentsMargins(0, 0, 0, 0)
        lower.addWidget(self.choice_row)
        lower.addWidget(scroll)
        self.split = QSplitter(Qt.Orientation.Vertical)
        self.split.addWidget(self.grid_panel)
        self.split.addWidget(below)
        QVBoxLayout(self).addWidget(self.split)
        self._layout_nodes()

    @property
    def many(self) -> bool:
        return len(self.hosts) > 1

    def show_agents(self, store: LocalStore) -> None:
        """Rebuild from the store: every system run's history, then live appends above the cursor."""
        self.store = store
        self._drop_sections(lambda _: True)
        self.grid.clear()
        with store.snapshot():
            runs = [r for r in store.runs() if r.get("kind") == "system"]
            self.seen = {agent: (store.cursor(agent), None) for agent in {r["agent"] for r in runs}}
            self.hosts = {(r["agent"], r["id"]): r.get("host") or r["id"] for r in runs}
            for agent in self.seen:
                self.grid.note_runs(agent, store.runs(agent))
            if self.chosen not in self.hosts:
                self.chosen = min(self.hosts, key=self._order, default=None)
            for key, host in self.hosts.items():
                node = self._section(key) if not self.many or key == self.chosen else None
                for metric in store.metrics(*key):
                    if node is not None:  # its charts: every point
                        _, vals, times = store.series(*key, metric)
                        node.append(metric, times, vals)
                    elif gpu_reading(metric) is None:
                        continue
                    else:  # the grid's history only: the last readings, whatever the run's length
                        _, vals, times = store.series_tail(*key, metric, self.grid.history)
                    self.grid.add(key, metric, times, vals, host=host)
        self.grid_dirty = True
        self._layout_nodes()

    def add_entries(self, agent: str, entries: list[Entry]) -> None:
        """Live samples; a node first seen here (its run not yet in the store) gets a section too.
        The floor moves up with each entry, so a re-delivered page adds nothing, but a packed entry's
        rest (its part came under the same id, above the cursor: ``pilothouse.wire.entries``) does."""
        heard = time.time()
        count = len(self.hosts)
        for e in entries:
            last_id, last = self.seen.get(agent, (0, None))
            if e.id < last_id or e.id == last_id and not _rest_of(e, last):
                continue  # a repeat; a packed entry's rest comes under its part's id, later in time
            self.seen[agent] = (e.id, e)
            if e.kind != KIND_METRIC or not e.run.startswith(SYSTEM_RUN_PREFIX):
                continue
            _, vals, times = entry_points(e)  # decoded only for the node's own samples
            key = (agent, e.run)
            host = self.hosts.setdefault(key, e.run.removeprefix(SYSTEM_RUN_PREFIX))
            self.grid_dirty |= self.grid.add(key, e.metric, times, vals, host=host, heard=heard)
            node = self.nodes.get(key)
            if node is None and not self.many:
                node = self._section(key)
            if node is not None and e.id > node.floor:
                node.append(e.metric, times, vals)
        if len(self.hosts) != count:
            self._layout_nodes()

    def note_runs(self, agent: str, runs: list[dict]) -> None:
        """An agent's run list: a GPU of its node is idle only while one of its runs is running."""
        self.grid.note_runs(agent, runs)
        self.grid_dirty = True

    def forget(self, agent: str) -> None:
        """The app stopped following this agent: its node leaves the grid, the chooser and the charts."""
        self.grid.forget(agent)
        self.hosts = {k: h for k, h in self.hosts.items() if k[0] != agent}
        self._drop_sections(lambda k: k[0] == agent)
        if len(self.hosts) == 1 and not self.nodes:  # one node left: its charts, as with one node from the start
            self.open_node(next(iter(self.hosts)))
        self._layout_nodes()

    def redraw(self) -> None:
        """The app's coalescing timer: repaint the grid once for every reading since the last time, and
        at least once a second (a node that went silent turns missing without a new reading)."""
        if self.many and (self.grid_dirty or time.monotonic() - self._painted >= 1.0):
            self.grid_dirty = False
            self._painted = time.monotonic()
            self.grid_panel.refresh()

    def open_node(self, key: RunKey) -> None:
        """Show this node's charts below the grid (built from the store), in place of the last one's."""
        if key not in self.hosts or key in self.nodes:
            return
        self.chosen = key
        self._drop_sections(lambda k: k != key)
        node = self._section(key)
        if self.store is not None:
            with self.store.snapshot():
                node.floor = self.store.cursor(key[0])
                for metric in self.store.metrics(*key):
                    _, vals, times = self.store.series(*key, metric)
                    node.append(metric, times, vals)
        self._layout_nodes()

    def _drop_sections(self, which: Callable[[RunKey], bool]) -> None:
        for key in [k for k in self.nodes if which(k)]:
            section = self.nodes.pop(key)
            section.setParent(None)  # gone from the column now, not at the event loop's next turn
            section.deleteLater()

    def _order(self, key: RunKey) -> tuple:
        return natural(self.hosts[key]), key

    def _section(self, key: RunKey) -> NodeSection:
        node = self.nodes.get(key)
        if node is None:
            node = self.nodes[key] = NodeSection(key, self.hosts[key])
            self.column.insertWidget(self.column.count() - 1, node)  # above the stretch
        return node

    def _layout_nodes(self) -> None:
        """The grid and the node chooser only with several nodes; the hint only with none."""
        self.hint.setVisible(not self.hosts)
        self.grid_panel.setVisible(self.many)
        self.choice_row.setVisible(self.many)
        if self.many:
            if self.chosen is None or self.chosen not in self.nodes:
                self.chosen = next(iter(self.nodes), None)
            self.choice.clear()
            self.choice_keys = sorted(self.hosts, key=self._order)
            self.choice.addItems([f"{self.hosts[key]}  ({key[0]})" for key in self.choice_keys])
            if self.chosen is not None:
                self.choice.setCurrentIndex(self.choice_keys.index(self.chosen))
            self.grid_dirty = True


def _rest_of(e: Entry, last: Entry | None) -> bool:
    """Whether ``e``, under the id of ``last``, is the rest of that packed entry's part (its points come
    later in time) rather than a repeat.  Decoded only here, on this rare path."""
    if last is None:  # the floor from the store: at or below it, a repeat
        return False
    if e.kind != KIND_METRIC or last.kind != KIND_METRIC or not e.n or not last.n:
        return False
    return entry_points(e)[2][0] > entry_points(last)[2][-1]
