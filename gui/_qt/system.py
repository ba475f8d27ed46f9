"""The GPU/host panel: per node, charts over wall time of what the agent's sampler reads.

Why wall time: system samples have no training step, and a node's load is read against the
clock (and across runs).  Data comes from the agents' ``sys-HOST`` runs (kind "system"):
history from the local store, then live entries above the cursor read in the same snapshot,
so no sample is drawn twice or skipped at the seam (as in the Charts tab).
"""

from __future__ import annotations

import pyqtgraph as pg
from PySide6.QtCore import Qt
from PySide6.QtWidgets import (
    QGridLayout,
    QGroupBox,
    QLabel,
    QScrollArea,
    QVBoxLayout,
    QWidget,
)

from pilothouse.wire.checks import SYSTEM_RUN_PREFIX
from pilothouse.wire.entries import KIND_METRIC, Entry, entry_points

from ..local_store import LocalStore
from ..models import RunKey
from ..palette import PALETTE
from .chart import ChartWidget

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
    """Every node's system charts, one section per agent's system run."""

    def __init__(self) -> None:
        super().__init__()
        self.nodes: dict[RunKey, NodeSection] = {}
        self.seen: dict[str, int] = {}  # agent url -> journal id up to which history was loaded
        self.hint = QLabel(HINT, alignment=Qt.AlignCenter, wordWrap=True)
        host = QWidget()
        self.column = QVBoxLayout(host)
        self.column.addWidget(self.hint)
        self.column.addStretch()
        scroll = QScrollArea(widgetResizable=True)
        scroll.setWidget(host)
        QVBoxLayout(self).addWidget(scroll)

    def show_agents(self, store: LocalStore) -> None:
        """Rebuild from the store: every system run's history, then live appends above the cursor."""
        for node in self.nodes.values():
            node.setParent(None)
            node.deleteLater()
        self.nodes = {}
        with store.snapshot():
            runs = [r for r in store.runs() if r.get("kind") == "system"]
            self.seen = {agent: store.cursor(agent) for agent in {r["agent"] for r in runs}}
            for run in runs:
                key = (run["agent"], run["id"])
                node = self._node(key, run.get("host") or run["id"])
                for metric in store.metrics(*key):
                    _, vals, times = store.series(*key, metric)
                    node.append(metric, times, vals)
        self.hint.setVisible(not self.nodes)

    def add_entries(self, agent: str, entries: list[Entry]) -> None:
        """Live samples; a node first seen here (its run not yet in the store) gets a section too.
        The floor moves up with each entry, so a re-delivered page adds nothing."""
        for e in entries:
            if e.id <= self.seen.get(agent, 0):
                continue
            self.seen[agent] = e.id
            if e.kind != KIND_METRIC or not e.run.startswith(SYSTEM_RUN_PREFIX):
                continue
            _, vals, times = entry_points(e)
            self._node((agent, e.run), e.run.removeprefix(SYSTEM_RUN_PREFIX)).append(e.metric, times, vals)
        self.hint.setVisible(not self.nodes)

    def _node(self, key: RunKey, host: str) -> NodeSection:
        node = self.nodes.get(key)
        if node is None:
            node = self.nodes[key] = NodeSection(key, host)
            self.column.insertWidget(self.column.count() - 1, node)  # above the stretch
        return node
