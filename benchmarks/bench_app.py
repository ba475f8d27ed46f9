"""The app's own promises, offscreen: open a 10 M-point run fast, and draw a logged point soon.

1. Open: a local store holding one run of 10 metrics x 1 M points; time from selecting the
   run (``ChartsPanel.show_runs``) to the first painted frame of all its charts (history read
   from SQLite, level-of-detail pyramids built, every chart painted).  Target <= 1 s.  Also
   the app's memory per stored point (target <= 24 bytes).
2. Latency: a real agent and a trainer process logging ``sent = time.time()`` as a metric at
   ~200 steps/s; the real window follows the agent with the run selected; each time the chart
   redraws, the newest drawn point's ``now - sent`` is a sample.  Target p99 <= 100 ms.

    python benchmarks/bench_app.py [--points 1000000] [--seconds 10]
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
os.environ["XDG_CONFIG_HOME"] = tempfile.mkdtemp(prefix="pilothouse-bench-config-")

import numpy as np  # noqa: E402
from _common import AgentProcess, median, percentile, table, write_result  # noqa: E402
from PySide6.QtWidgets import QApplication  # noqa: E402

from pilothouse.gui._qt.app import MainWindow  # noqa: E402
from pilothouse.gui._qt.charts import ChartsPanel  # noqa: E402
from pilothouse.gui.local_store import LocalStore  # noqa: E402

METRICS = 10
CHUNK = 10_000
URL = "tcp://127.0.0.1:1"
TRAINER = textwrap.dedent("""
    import sys, time
    import pilothouse as ph
    run = ph.init(project="bench", name="latency", agent=sys.argv[1])
    print(run.id, flush=True)
    end = time.time() + float(sys.argv[2])
    step = 0
    while time.time() < end:
        run.log({"sent": time.time()}, step=step)
        step += 1
        time.sleep(0.005)
    run.finish()
""")


def fill_store(path: Path, points: int) -> None:
    """One run, METRICS metrics of ``points`` points each, stored as the link would."""
    store = LocalStore(path)
    store.put_runs(URL, [{"id": "big", "project": "bench", "name": "big", "kind": "train", "status": "finished"}])
    steps = np.arange(points, dtype=np.int64)
    times = 1.7e9 + steps.astype(np.float64)
    rng = np.random.default_rng(0)
    entry_id = 0
    for m in range(METRICS):
        vals = np.cumsum(rng.standard_normal(points))
        page = []
        for lo in range(0, points, CHUNK):
            entry_id += 1
            sl = slice(lo, lo + CHUNK)
            page.append((entry_id, "big", "m", f"metric/{m}", 0, len(steps[sl]), steps[sl].tobytes(),
                         vals[sl].tobytes(), times[sl].tobytes(), None))
        store.write_page(URL, page, entry_id)
    store.close()


def open_trial(path: Path) -> tuple[float, float]:
    store = LocalStore(path)
    panel = ChartsPanel()
    panel.resize(1400, 900)
    panel.show()
    QApplication.processEvents()
    t0 = time.perf_counter()
    panel.show_runs([(URL, "big")], store)
    for chart in panel.charts.values():
        chart.flush()
    panel.grab()  # paint every chart once
    seconds = time.perf_counter() - t0
    stored = sum(c.series.nbytes for chart in panel.charts.values() for c in chart.curves.values())
    per_point = stored / sum(len(c.series.x) for chart in panel.charts.values() for c in chart.curves.values())
    panel.close()
    store.close()
    return seconds, per_point


def latency(seconds: float) -> list[float]:
    samples: list[float] = []
    with AgentProcess() as ag, tempfile.TemporaryDirectory() as tmp:
        trainer = subprocess.Popen([sys.executable, "-c", TRAINER, ag.url, str(seconds + 3)],
                                   stdout=subprocess.PIPE, text=True)
        run_id = trainer.stdout.readline().strip()
        window = MainWindow(Path(tmp) / "store.sqlite", [ag.url])
        window.resize(1400, 900)
        window.show()
        deadline = time.time() + 15
        while window.table_model.rowCount() == 0 and time.time() < deadline:
            QApplication.processEvents()
            time.sleep(0.01)
        window.table.selectRow(0)
        while "sent" not in window.charts.charts and time.time() < deadline:
            QApplication.processEvents()
            time.sleep(0.01)
        chart = window.charts.charts["sent"]
        redraw = chart.redraw

        def timed_redraw() -> None:
            redraw()
            chart.repaint()  # the frame is on screen when this returns
            ys = chart.curves[run_id].series.y
            if len(ys):
                samples.append((time.time() - ys[-1]) * 1000)

        chart.redraw = timed_redraw  # what the chart's own redraw timer calls (ChartWidget._timed_redraw)
        end = time.time() + seconds
        while time.time() < end:
            QApplication.processEvents()
            time.sleep(0.002)
        window.close()
        trainer.wait(timeout=30)
    return samples


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--points", type=int, default=1_000_000, help="points per metric (10 metrics)")
    parser.add_argument("--trials", type=int, default=3)
    parser.add_argument("--seconds", type=float, default=10.0)
    args = parser.parse_args(argv)
    QApplication.instance() or QApplication([])
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "store.sqlite"
        fill_store(path, args.points)
        trials = [open_trial(path) for _ in range(args.trials)]
    open_s = median([t[0] for t in trials])
    per_point = trials[0][1]
    lat = sorted(latency(args.seconds))
    rows = [[f"open a {METRICS * args.points / 1e6:g} M-point run to the first painted frame", f"{open_s:.2f} s",
             "<= 1 s"],
            ["app memory per stored point", f"{per_point:.1f} B", "<= 24 B"],
            [f"log() -> drawn, p50 ({len(lat)} frames)", f"{percentile(lat, 50):.0f} ms", ""],
            ["log() -> drawn, p99", f"{percentile(lat, 99):.0f} ms", "<= 100 ms"]]
    print()
    print(table(["what", "measured", "target"], rows))
    data = {"open_s": [t[0] for t in trials], "bytes_per_point": per_point,
            "latency_ms": {"p50": percentile(lat, 50), "p99": percentile(lat, 99), "n": len(lat)}}
    print(f"results: {write_result('bench_app', data)}")
    return data


def passed(data: dict) -> bool:
    return (median(data["open_s"]) <= 1.0 and data["bytes_per_point"] <= 24
            and data["latency_ms"]["p99"] <= 100)


if __name__ == "__main__":
    raise SystemExit(0 if passed(main()) else 1)
