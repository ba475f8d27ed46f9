"""The System tab's GPU grid at 64 nodes x 8 GPUs, readings arriving at 1 Hz per GPU, offscreen.

Time is simulated in frames of the app's 30 ms coalescing timer.  Each node's agent samples its
8 GPUs once a second at its own phase (an agent's batch carries all of its GPUs: 6 readings each,
one journal entry per reading), so a frame receives the batches of the ~2 nodes whose sample
fell into those 30 ms.  Nodes 3, 7 and 11 hold an idle, a hot and a missing GPU.  A frame is:

    model.add() for every entry that arrived -> the view reads the model -> paint, processEvents()

and is counted only when the view really painted (an event filter counts its paint events).
Every peer is fed through the same plain model (``pilothouse.gui.gpu_grid.GpuGrid``):

  (a) app      GpuGridView: the whole grid (all 64 rows, no scrolling) in one paintEvent, marks included
  (b) widgets  a QLabel per GPU (512) and per host, the cells of nodes that reported restyled
               (style sheet color + tooltip) each frame: the naive widget-per-GPU grid

Like the app (``SystemPanel.redraw``), each peer repaints in a frame where readings arrived; (a)
also once a second without any (a silent node turns missing by the clock).  "switch metric": the
median time to recolor all 512 cells for another metric and paint them, (a) and (b).
  (c) image    a pyqtgraph ImageItem heat map of the 64 x 8 values (no labels, no marks): a floor

    QT_QPA_PLATFORM=offscreen python benchmarks/bench_gpu_grid.py [--nodes 64] [--gpus 8] [--seconds 20]
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
from bench_chart import PaintCounter  # noqa: E402
from PySide6 import QtWidgets  # noqa: E402

from pilothouse.gui._qt.gpu_grid import GpuGridView  # noqa: E402
from pilothouse.gui.gpu_grid import SHOWN, UTILIZATION, GpuGrid  # noqa: E402
from pilothouse.wire.checks import SYSTEM_RUN_PREFIX  # noqa: E402

FRAME = 0.030  # s of simulated time per frame: the app's redraw timer
WARMUP = 40  # frames: every node has reported (and the grid has its size) before timing starts
T0 = 1_000_000.0
IDLE_NODE, HOT_NODE, MISSING_NODE = 3, 7, 11


class Feed:
    """The readings of ``nodes`` agents sampling ``gpus`` GPUs at 1 Hz, each at its own phase."""

    def __init__(self, nodes: int, gpus: int, seed: int = 0) -> None:
        rng = np.random.default_rng(seed)
        self.keys = [(f"tcp://10.0.{i // 256}.{i % 256}:7766", f"{SYSTEM_RUN_PREFIX}node{i:03d}") for i in range(nodes)]
        self.gpus = gpus
        self.phase = rng.random(nodes)  # s into each second at which the node samples
        self.util = rng.uniform(60, 100, (nodes, gpus))
        self.rng = rng
        self.entries = 0

    def frame(self, grid: GpuGrid, t: float) -> list[int]:
        """Add the readings of every node whose sample falls in (t - FRAME, t]; the nodes that reported."""
        due = [i for i in range(len(self.keys)) if (i != MISSING_NODE or t < T0 + 2)  # node 11 goes silent
               and np.floor(t - self.phase[i]) != np.floor(t - FRAME - self.phase[i])]
        for i in due:
            sample_t = np.array([np.floor(t - self.phase[i]) + self.phase[i]])
            self.util[i] = np.clip(self.util[i] + self.rng.normal(0, 3, self.gpus), 0, 100)
            for g in range(self.gpus):
                idle = i == IDLE_NODE and g == 5
                readings = {"util": 0.0 if idle else self.util[i, g], "mem_used_gb": 40.0 + g, "mem_total_gb": 80.0,
                            "power_w": 300.0 + self.util[i, g], "temp_c": 93.0 if i == HOT_NODE and g == 2 else 65.0,
                            "throttle": 0.0}
                for name, value in readings.items():
                    grid.add(self.keys[i], f"gpu{g}/{name}", sample_t, np.array([value]), heard=t)
                    self.entries += 1
        return due


def run_frames(widgets: list[QtWidgets.QWidget], frame, frames: int) -> list[float]:
    """Seconds per frame after WARMUP frames; ``frame(t)`` says whether it changed what is shown, and
    the run fails unless every such frame painted one of ``widgets``."""
    app = QtWidgets.QApplication.instance()
    app.processEvents()
    painted = PaintCounter()
    for widget in widgets:
        widget.installEventFilter(painted)
    times = []
    for i in range(WARMUP + frames):
        before = painted.count
        t0 = time.perf_counter()
        changed = frame(T0 + (i + 1) * FRAME)
        app.processEvents()
        elapsed = time.perf_counter() - t0
        if changed and painted.count == before:
            raise RuntimeError("a frame was not painted: the numbers would be fiction")
        if i >= WARMUP:
            times.append(elapsed)
    for widget in widgets:
        widget.removeEventFilter(painted)
    return times


def time_switches(widgets: list[QtWidgets.QWidget], switch, rounds: int = 5) -> float:
    """Median ms to recolor every cell for another metric and paint (the selector's change)."""
    app = QtWidgets.QApplication.instance()
    painted = PaintCounter()
    for widget in widgets:
        widget.installEventFilter(painted)
    times = []
    for _ in range(rounds):
        for shown in SHOWN[1:] + SHOWN[:1]:
            before = painted.count
            t0 = time.perf_counter()
            switch(shown)
            app.processEvents()
            times.append(time.perf_counter() - t0)
            if painted.count == before:
                raise RuntimeError("a switch was not painted")
    for widget in widgets:
        widget.removeEventFilter(painted)
    return 1000 * median(times)


def busy_grid(feed: Feed) -> GpuGrid:
    grid = GpuGrid()
    for url, _ in feed.keys:
        grid.set_busy(url, True)
    return grid


def bench_app(nodes: int, gpus: int, frames: int) -> tuple[list[float], dict]:
    feed = Feed(nodes, gpus)
    grid = busy_grid(feed)
    view = GpuGridView(grid)
    view.show()

    painted = [T0]

    def frame(t: float) -> bool:  # as SystemPanel.redraw: on new readings, else once a second
        if feed.frame(grid, t) or t - painted[0] >= 1.0:
            painted[0] = t
            view.refresh(now=t)
            return True
        return False

    times = run_frames([view], frame, frames)
    switches = time_switches([view], lambda shown: view.set_shown(shown))
    flags = {}
    for _, _, cells in view.rows:
        for c in cells:
            for flag in c.flags:
                flags[flag] = flags.get(flag, 0) + 1
    size = (view.width(), view.height())
    view.close()
    view.deleteLater()
    return times, {"flags": flags, "size": size, "entries": feed.entries, "switch_ms": switches}


def bench_widgets(nodes: int, gpus: int, frames: int) -> tuple[list[float], dict]:
    feed = Feed(nodes, gpus)
    grid = busy_grid(feed)
    host = QtWidgets.QWidget()
    layout = QtWidgets.QGridLayout(host)
    layout.setSpacing(2)
    cells: dict[tuple[int, int], QtWidgets.QLabel] = {}
    for i, (_, run) in enumerate(feed.keys):
        layout.addWidget(QtWidgets.QLabel(run.removeprefix(SYSTEM_RUN_PREFIX)), i, 0)
        for g in range(gpus):
            label = cells[i, g] = QtWidgets.QLabel()
            label.setFixedSize(26, 18)
            layout.addWidget(label, i, g + 1)
    host.show()
    view = GpuGridView(grid)  # only for its color scale

    def frame(t: float) -> bool:
        due = feed.frame(grid, t)
        for i in due:
            for g in range(gpus):
                cell = grid.cell(feed.keys[i], g, now=t)
                color = view.color(cell.value(UTILIZATION)).name()
                cells[i, g].setStyleSheet(f"background: {color}; border: {'2px solid white' if cell.flags else 'none'}")
                cells[i, g].setToolTip(cell.tooltip())
        return bool(due)

    times = run_frames(list(cells.values()), frame, frames)
    now = T0 + (WARMUP + frames) * FRAME

    def switch(shown: str) -> None:
        view.set_shown(shown)  # its color scale
        for (i, g), label in cells.items():
            cell = grid.cell(feed.keys[i], g, now=now)
            label.setStyleSheet(f"background: {view.color(cell.value(shown)).name()}; "
                                f"border: {'2px solid white' if cell.flags else 'none'}")

    switches = time_switches(list(cells.values()), switch)
    host.close()
    host.deleteLater()
    return times, {"widgets": len(cells) + nodes, "switch_ms": switches}


def bench_image(nodes: int, gpus: int, frames: int) -> tuple[list[float], dict]:
    feed = Feed(nodes, gpus)
    grid = busy_grid(feed)
    widget = pg.PlotWidget()
    widget.resize(700, 1300)
    image = pg.ImageItem(axisOrder="row-major")
    image.setLookupTable(pg.colormap.get("viridis").getLookupTable(nPts=256))
    widget.addItem(image)
    widget.show()
    values = np.full((nodes, gpus), np.nan)

    def frame(t: float) -> bool:
        due = feed.frame(grid, t)
        for i in due:
            for g in range(gpus):
                values[i, g] = grid.cell(feed.keys[i], g, now=t).value(UTILIZATION)
        if due:
            image.setImage(np.nan_to_num(values), levels=(0, 100), autoLevels=False)
        return bool(due)

    times = run_frames([widget.viewport()], frame, frames)
    widget.close()
    widget.deleteLater()
    return times, {}


def summary(times: list[float]) -> dict[str, float]:
    ordered = sorted(times)
    return {"ms_median": 1000 * median(times), "ms_p99": 1000 * percentile(ordered, 99),
            "ms_max": 1000 * ordered[-1], "frames": len(times)}


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--nodes", type=int, default=64)
    parser.add_argument("--gpus", type=int, default=8)
    parser.add_argument("--seconds", type=float, default=20.0, help="simulated seconds of readings per peer")
    args = parser.parse_args(argv)
    if args.nodes <= MISSING_NODE or args.gpus < 6 or args.seconds <= 0:
        parser.error("--nodes must be over 11, --gpus at least 6 (the idle, hot and missing cells), --seconds > 0")
    QtWidgets.QApplication.instance() or QtWidgets.QApplication([])
    frames = int(args.seconds / FRAME)
    results = {}
    for label, run in (("(a) app GpuGridView, one paint", bench_app),
                       ("(b) a QLabel per GPU", bench_widgets),
                       ("(c) pyqtgraph ImageItem, no marks", bench_image)):
        times, extra = run(args.nodes, args.gpus, frames)
        gc.collect()
        results[label] = {**summary(times), **extra}
        print(f"{label}: median {results[label]['ms_median']:.2f} ms, p99 {results[label]['ms_p99']:.2f} ms",
              flush=True)
    rows = [[label, f"{r['ms_median']:.2f}", f"{r['ms_p99']:.2f}", f"{r['ms_max']:.1f}", r["frames"],
             f"{r['switch_ms']:.1f}" if "switch_ms" in r else "-"] for label, r in results.items()]
    print()
    print(table(["case", "ms median", "ms p99", "ms max", "frames", "switch metric ms"], rows))
    app = results["(a) app GpuGridView, one paint"]
    ratios = {"widgets_vs_app_switch": results["(b) a QLabel per GPU"]["switch_ms"] / app["switch_ms"],
              "widgets_vs_app_median": results["(b) a QLabel per GPU"]["ms_median"] / app["ms_median"],
              "widgets_vs_app_p99": results["(b) a QLabel per GPU"]["ms_p99"] / app["ms_p99"],
              "image_vs_app_median": results["(c) pyqtgraph ImageItem, no marks"]["ms_median"] / app["ms_median"]}
    print(f"\nQLabel per GPU / app: {ratios['widgets_vs_app_median']:.1f}x median, "
          f"{ratios['widgets_vs_app_p99']:.1f}x p99, {ratios['widgets_vs_app_switch']:.1f}x to switch the metric; "
          f"ImageItem / app: {ratios['image_vs_app_median']:.2f}x median")
    print(f"{args.nodes} nodes x {args.gpus} GPUs, {app['entries']:,} entries fed to (a) over {frames} frames of "
          f"{FRAME * 1000:.0f} ms simulated time; (a) grid {app['size'][0]}x{app['size'][1]} px; "
          f"flags at the end: {app['flags']}")
    result = {"args": vars(args), "results": results, "ratios": ratios}
    path = write_result("bench_gpu_grid", result)
    print(f"results: {path}")
    return result


def passed(data: dict) -> bool:
    """Fluent: the app's grid frame stays well inside the 30 ms redraw interval at p99, and the idle,
    hot and missing GPUs stood out."""
    app = data["results"]["(a) app GpuGridView, one paint"]
    return app["ms_p99"] < FRAME * 1000 and {"idle", "hot", "missing"} <= set(app["flags"])


if __name__ == "__main__":
    raise SystemExit(0 if passed(main()) else 1)
