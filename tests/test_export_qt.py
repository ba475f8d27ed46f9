"""Exports offscreen: a chart to a real PNG, a run from a real LocalStore to the CLI's CSV, bit-exact."""

from __future__ import annotations

import csv
import os

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")

import numpy as np
import pytest

pytest.importorskip("PySide6")
pytest.importorskip("pytestqt")

from PySide6.QtGui import QColor, QImage

from pilothouse.gui._qt.chart import ChartWidget
from pilothouse.gui._qt.export import export_chart_png, export_run_csv
from pilothouse.gui.local_store import LocalStore
from pilothouse.wire.entries import Entry

A = "tcp://127.0.0.1:7001"
SPECIAL = np.array([np.nan, np.inf, -np.inf, -0.0, 1e308, 5e-324, 0.1 + 0.2, -1.5])


def chunk(id: int, run: str, metric: str, steps, vals) -> Entry:
    """A metric entry as the agent journals it: int64 steps, float64 values and wall times."""
    steps = np.asarray(steps, np.int64)
    vals = np.asarray(vals, np.float64)
    times = 1.7e9 + steps.astype(np.float64) / 3  # wall times with full float digits
    return Entry(id, run, "m", metric, 0, len(steps), steps.tobytes(), vals.tobytes(), times.tobytes(), None)


def test_chart_png_is_a_real_image_of_the_chart(qtbot, tmp_path):
    chart = ChartWidget()
    qtbot.addWidget(chart)
    chart.resize(640, 400)
    chart.setTitle("reward/mean")
    chart.add_curve("run-a", color="#e15759")
    xs = np.arange(200, dtype=float)
    chart.append("run-a", xs, np.sin(xs / 10))
    path = tmp_path / "chart.png"
    export_chart_png(chart, path)

    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and path.stat().st_size > 2000
    image = QImage(str(path))
    assert not image.isNull() and image.width() > 100 and image.height() > 100
    colors = {image.pixel(x, y) for x in range(0, image.width(), 3) for y in range(0, image.height(), 3)}
    assert len(colors) > 3  # background, axes, text and the curve: not a blank frame


def test_chart_png_names_each_visible_run_in_its_color_above_the_chart(qtbot, tmp_path):
    chart = ChartWidget()
    qtbot.addWidget(chart)
    chart.resize(640, 400)
    xs = np.arange(50, dtype=float)
    for name, color in (("base", "#0072b2"), ("tuned", "#e69f00"), ("off", "#009e73")):
        chart.add_curve(name, color=color, label=name)
        chart.append(name, xs, np.cos(xs / 7))
    chart.set_hidden("off", True)
    path = tmp_path / "chart.png"
    export_chart_png(chart, path)

    image = QImage(str(path))
    grab_height = chart.grab().height()
    strip = image.height() - grab_height
    assert strip > 10  # a legend row above the plot
    legend = {QColor(image.pixel(x, y)).name() for x in range(image.width()) for y in range(strip)}
    assert {"#0072b2", "#e69f00"} <= legend and "#009e73" not in legend  # a hidden run is not named


def test_run_csv_has_every_point_bit_exact_in_the_cli_format(tmp_path):
    store = LocalStore(tmp_path / "s.sqlite")
    store.write_page(A, [chunk(1, "r1", "reward/mean", range(4), SPECIAL[:4]),
                         chunk(2, "r1", "loss", [0, 1], [3.0, 2.0]),
                         chunk(3, "r2", "loss", [0], [9.0]),  # another run: not exported
                         chunk(4, "r1", "reward/mean", range(4, 8), SPECIAL[4:])], 4)
    path = tmp_path / "r1.csv"
    assert export_run_csv(store, A, "r1", path) == 10

    with open(path, newline="") as f:
        rows = list(csv.reader(f))
    assert rows[0] == ["metric", "step", "value", "wall_time", "attempt", "superseded"]  # the CLI's, then two
    assert {tuple(row[4:]) for row in rows[1:]} == {("1", "0")}  # one attempt: nothing superseded
    by_metric: dict[str, list] = {}
    for metric, step, value, wall, _, _ in rows[1:]:
        by_metric.setdefault(metric, []).append((int(step), float(value), float(wall)))
    for metric in ("reward/mean", "loss"):
        steps, vals, times = store.series(A, "r1", metric)
        got = by_metric[metric]
        assert [s for s, _, _ in got] == steps.tolist()
        assert np.array([v for _, v, _ in got]).tobytes() == vals.tobytes()  # NaN, ±Inf, -0.0, denormal
        assert np.array([w for _, _, w in got]).tobytes() == times.tobytes()
    assert np.array([v for _, v, _ in by_metric["reward/mean"]]).tobytes() == SPECIAL.tobytes()
    store.close()
