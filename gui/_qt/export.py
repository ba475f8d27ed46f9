"""Exports from the app: a chart as PNG, a run's metrics as the CLI's CSV.

The CSV is written by ``pilothouse.text.write_points`` itself, so a file saved from the app and one
from ``pilothouse export`` have the same columns and the same bit-exact float text; the app's adds
``attempt`` and ``superseded`` (1 where a later attempt of the run logged the step again: see
``pilothouse.gui.attempts``), and holds every member's points of a run resumed on another node.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

from PySide6.QtCore import Qt
from PySide6.QtGui import QColor, QFont, QFontMetrics, QImage, QPainter, QPen

from pilothouse.text import write_points
from pilothouse.wire.entries import KIND_METRIC, Entry, Page

from ..attempts import Points, member_lists, read_run
from ..local_store import LocalStore
from .chart import ChartWidget
from .theme import current

SWATCH = 22  # px of line drawn before a legend label
PAD = 6


def export_chart_png(chart: ChartWidget, path: str | Path) -> None:
    """Save the chart as the user sees it (title, axes, curves, zoom), with a legend above it
    naming each visible curve in its color: a saved picture must say which run is which.
    A widget grab, not pyqtgraph's ImageExporter: that one re-lays the plot out at its own size
    and clips the title.  The curves are brought up to date first, since a chart only redraws
    on its coalescing timer."""
    chart.redraw()
    plot = chart.grab().toImage()
    entries = [(c.label, c.color, c.dashed) for name, c in chart.curves.items() if not chart.hidden(name)]
    font = QFont(chart.font())
    metrics = QFontMetrics(font)
    rows = _legend_rows(entries, metrics, plot.width())
    line = metrics.height() + 2 * PAD
    image = QImage(plot.width(), plot.height() + line * len(rows), QImage.Format.Format_RGB32)
    theme = current()
    image.fill(QColor(theme.chart_bg))
    painter = QPainter(image)
    try:
        painter.setFont(font)
        for r, row in enumerate(rows):
            y = r * line + line // 2
            for x, (label, color, dashed) in row:
                style = Qt.PenStyle.DashLine if dashed else Qt.PenStyle.SolidLine
                painter.setPen(QPen(QColor(color), 3, style))
                painter.drawLine(x, y, x + SWATCH, y)
                painter.setPen(QColor(theme.chart_fg))
                painter.drawText(x + SWATCH + PAD, y + metrics.ascent() // 2 - 1, label)
        painter.drawImage(0, line * len(rows), plot)
    finally:
        painter.end()
    if not image.save(str(path), "PNG"):
        raise OSError(f"could not write a PNG to {path}")


def _legend_rows(entries: list[tuple[str, str, bool]], metrics: QFontMetrics,
                 width: int) -> list[list[tuple[int, tuple[str, str, bool]]]]:
    """Legend entries placed left to right, wrapping to a new row where the width ends."""
    rows: list[list[tuple[int, tuple[str, str, bool]]]] = []
    x = width  # forces a first row
    for entry in entries:
        size = SWATCH + PAD + metrics.horizontalAdvance(entry[0]) + 3 * PAD
        if x + size > width and (not rows or rows[-1]):
            rows.append([])
            x = PAD
        rows[-1].append((x, entry))
        x += size
    return rows


def export_run_csv(store: LocalStore, agent: str, run: str, path: str | Path) -> int:
    """Every point of every metric of the run, every attempt's, in the long format of ``pilothouse
    export`` with ``attempt`` and ``superseded`` after it.  Returns the number of points written.
    A page per part of a member's metric, read as it is written: memory stays one part's."""
    with store.snapshot(), open(path, "w", newline="") as out:
        runs = {(r["agent"], r["id"]): r for r in store.runs()}
        timeline, points = read_run(store, member_lists(runs).get((agent, run), [(agent, run)]), runs)
        shown: list[Points] = []  # the metric being written: its page's entry is made from it

        def pages() -> Iterator[Page]:
            for p in points:
                shown[:] = [p]
                yield Page([Entry(0, run, KIND_METRIC, p.metric, 0, len(p.steps), p.steps.tobytes(),
                                  p.vals.tobytes(), p.times.tobytes(), None)], 0)
        return write_points(pages(), out, "csv", {
            "attempt": lambda _: shown[0].numbers,
            "superseded": lambda _: timeline.superseded(shown[0].numbers, shown[0].steps).astype(int)})
