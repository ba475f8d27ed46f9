"""The app's ChartWidget against plain pyqtgraph: 16 live curves, 10M points, appending while drawing.

Each curve starts with points/curves points (a random walk with a few spikes and NaNs) and
every frame appends --append more points to every curve. A frame is counted when the new
points are appended, the chart has updated its curves, and the event loop has painted the
whole plot (viewport().update() marks all of it dirty) into the offscreen platform's backing
store, a QImage, exactly as the app's own event loop would; an event filter counts the
viewport's paint events and the run fails unless there was one per frame:

    append to all curves -> update the plot items -> viewport().update() -> processEvents()

fps = 1 / median frame time; p10 fps is the 10th percentile of per-frame fps (slow frames).

  (a) app     ChartWidget: Series.view() per curve from the min/max pyramid (flush() stands in
              for the 30 ms coalescing timer, which would otherwise cap the rate at ~33 fps)
  (b) peak    pyqtgraph PlotDataItem, setDownsampling(auto=True, method='peak') + setClipToView
  (c) plain   pyqtgraph PlotDataItem with no downsampling, at --small points (10M is too slow)

    QT_QPA_PLATFORM=offscreen python benchmarks/bench_chart.py [--points 10000000] [--frames 60]
"""

from __future__ import annotations

import argparse
import gc
import os
import time

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")

import numpy as np  # noqa: E402
import pyqtgraph as pg  # noqa: E402
from _common import median, percentile, table, write_result  # noqa: E402
from PySide6 import QtCore, QtWidgets  # noqa: E402

from pilothouse.gui._qt.chart import ChartWidget  # noqa: E402
from pilothouse.gui.palette import color  # noqa: E402

WARMUP = 3


def make_data(curves: int, total: int, rng: np.random.Generator) -> tuple[np.ndarray, list[np.ndarray]]:
    """One shared x (steps) and one y per curve, long enough for the prefill plus all appends."""
    x = np.arange(total, dtype=np.float64)
    ys = []
    for _ in range(curves):
        y = np.cumsum(rng.standard_normal(total))
        y[rng.integers(0, total, 5)] += 1000.0  # spikes that must stay visible
        y[rng.integers(0, total, 5)] = np.nan
        ys.append(y)
    return x, ys


class PaintCounter(QtCore.QObject):
    """Counts paint events, to prove every timed frame was really drawn."""

    def __init__(self) -> None:
        super().__init__()
        self.count = 0

    def eventFilter(self, watched: QtCore.QObject, event: QtCore.QEvent) -> bool:
        if event.type() == QtCore.QEvent.Type.Paint:
            self.count += 1
        return False


def run_frames(widget: pg.PlotWidget, frame, frames: int) -> list[float]:
    """Seconds per frame, after a few warm-up frames."""
    app = QtWidgets.QApplication.instance()
    app.processEvents()
    painted = PaintCounter()
    widget.viewport().installEventFilter(painted)
    times = []
    for i in range(WARMUP + frames):
        before = painted.count
        t0 = time.perf_counter()
        frame()
        widget.viewport().update()
        app.processEvents()
        elapsed = time.perf_counter() - t0
        if painted.count == before:
            raise RuntimeError("a frame was not painted: the numbers would be fiction")
        if i >= WARMUP:
            times.append(elapsed)
    widget.viewport().removeEventFilter(painted)
    return times


def bench_app(x, ys, prefill, step, frames, size) -> tuple[list[float], float]:
    chart = ChartWidget()
    chart.resize(*size)
    chart.show()
    names = [f"run{i}/reward" for i in range(len(ys))]
    for i, (name, y) in enumerate(zip(names, ys)):
        chart.add_curve(name, color=color(i))
        chart.append(name, x[:prefill], y[:prefill])
    chart.flush()
    n = prefill

    def frame():
        nonlocal n
        for name, y in zip(names, ys):
            chart.append(name, x[n:n + step], y[n:n + step])
        n += step
        chart.flush()

    times = run_frames(chart, frame, frames)
    stored = sum(len(c.series) for c in chart.curves.values())
    per_point = sum(c.series.nbytes for c in chart.curves.values()) / stored
    chart.close()
    chart.deleteLater()
    return times, per_point


def bench_pyqtgraph(x, ys, prefill, step, frames, size, peak: bool) -> list[float]:
    widget = pg.PlotWidget()
    widget.resize(*size)
    widget.show()
    items = []
    for i, y in enumerate(ys):
        item = widget.plot(x[:prefill], y[:prefill], pen=color(i), connect="finite")
        if peak:
            item.setDownsampling(auto=True, method="peak")
            item.setClipToView(True)
        items.append(item)
    n = prefill

    def frame():
        nonlocal n
        n += step
        for item, y in zip(items, ys):  # the arrays are the growing buffers: views, no copies
            item.setData(x[:n], y[:n], connect="finite")

    times = run_frames(widget, frame, frames)
    widget.close()
    widget.deleteLater()
    return times


def summary(times: list[float]) -> dict[str, float]:
    fps = sorted(1.0 / t for t in times)
    return {"fps_median": 1.0 / median(times), "fps_p10": percentile(fps, 10),
            "ms_median": 1000 * median(times), "frames": len(times)}


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--points", type=int, default=10_000_000, help="points in all at the start")
    parser.add_argument("--curves", type=int, default=16)
    parser.add_argument("--append", type=int, default=1000, help="points per curve per frame")
    parser.add_argument("--frames", type=int, default=60)
    parser.add_argument("--small", type=int, default=1_000_000, help="points in all for (c)")
    parser.add_argument("--small-frames", type=int, default=15)
    parser.add_argument("--size", type=int, nargs=2, default=(1200, 600), metavar=("W", "H"))
    args = parser.parse_args(argv)
    QtWidgets.QApplication.instance() or QtWidgets.QApplication([])
    rng = np.random.default_rng(0)
    prefill = args.points // args.curves
    x, ys = make_data(args.curves, prefill + (WARMUP + args.frames) * args.append, rng)
    small = args.small // args.curves
    results = {}
    cases = [
        ("(a) app ChartWidget", args.points, lambda: bench_app(x, ys, prefill, args.append, args.frames, args.size)),
        ("(b) pyqtgraph peak + clipToView", args.points,
         lambda: (bench_pyqtgraph(x, ys, prefill, args.append, args.frames, args.size, peak=True), None)),
        ("(a) app ChartWidget, small", args.small,
         lambda: bench_app(x, ys, small, args.append, args.small_frames, args.size)),
        ("(c) pyqtgraph no downsampling, small", args.small,
         lambda: (bench_pyqtgraph(x, ys, small, args.append, args.small_frames, args.size, peak=False), None)),
    ]
    for label, points, run in cases:
        times, per_point = run()
        gc.collect()
        results[label] = {"points_at_start": points, **summary(times)}
        if per_point is not None:
            results[label]["bytes_per_point"] = per_point
        print(f"{label}: {results[label]['fps_median']:.1f} fps", flush=True)
    rows = [[label, f"{r['points_at_start']:,}", f"{r['fps_median']:.1f}", f"{r['fps_p10']:.1f}",
             f"{r['ms_median']:.1f}"] for label, r in results.items()]
    print()
    print(table(["case", "points", "fps median", "fps p10", "ms/frame"], rows))
    app, peak = results["(a) app ChartWidget"], results["(b) pyqtgraph peak + clipToView"]
    app_small, plain = results["(a) app ChartWidget, small"], results["(c) pyqtgraph no downsampling, small"]
    ratios = {"app_vs_peak_at_full": app["fps_median"] / peak["fps_median"],
              "app_vs_plain_at_small": app_small["fps_median"] / plain["fps_median"]}
    print(f"\napp / pyqtgraph peak at {args.points:,} points: {ratios['app_vs_peak_at_full']:.1f}x")
    print(f"app / pyqtgraph plain at {args.small:,} points: {ratios['app_vs_plain_at_small']:.1f}x")
    print(f"app memory: {app['bytes_per_point']:.1f} B per stored point (budget 24)")
    print(f"frame = append {args.append} points to each of {args.curves} curves + update the items + paint"
          f" all of a {args.size[0]}x{args.size[1]} plot (offscreen); {WARMUP} warm-up frames not counted")
    result = {"args": vars(args), "results": results, "ratios": ratios}
    path = write_result("bench_chart", result)
    print(f"results: {path}")
    return result


def passed(data: dict) -> bool:
    """The memory budget holds (every frame painted is checked while measuring)."""
    return data["results"]["(a) app ChartWidget"]["bytes_per_point"] <= 24


if __name__ == "__main__":
    raise SystemExit(0 if passed(main()) else 1)
