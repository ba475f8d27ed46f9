"""Exports from the app: a chart as PNG, a run's metrics as the CLI's CSV.

The CSV is written by ``pilothouse.text.write_points`` itself, so a file saved from the app and one
from ``pilothouse export`` have the same columns and the same bit-exact float text.
"""

from __future__ import annotations

from pathlib import Path

from pilothouse.text import write_points
from pilothouse.wire.entries import KIND_METRIC, Entry, Page

from ..local_store import LocalStore
from .chart import ChartWidget


def export_chart_png(chart: ChartWidget, path: str | Path) -> None:
    """Save the chart as the user sees it (title, axes, curves, zoom).  A widget grab, not
    pyqtgraph's ImageExporter: that one re-lays the plot out at its own size and clips the title.
    The curves are brought up to date first, since a chart only redraws on its coalescing timer."""
    chart.redraw()
    if not chart.grab().save(str(path), "PNG"):
        raise OSError(f"could not write a PNG to {path}")


def export_run_csv(store: LocalStore, agent: str, run: str, path: str | Path) -> int:
    """Every point of every metric of the run, in the long format of ``pilothouse export``.
    Returns the number of points written."""
    entries = []
    for metric in store.metrics(agent, run):
        steps, vals, times = store.series(agent, run, metric)
        entries.append(Entry(0, run, KIND_METRIC, metric, 0, len(steps), steps.tobytes(), vals.tobytes(),
                             times.tobytes(), None))
    with open(path, "w", newline="") as out:
        return write_points(iter([Page(entries, 0)]), out, "csv")
