"""Reading cost independent of run length (issue 16 item 1): open, pan and zoom a stored run through
the app store's tiers, offscreen, at several run lengths.

For each size: a store of METRICS metrics x N points, generated straight into the app's store
(``write_page`` in pages of 1 M points, tiers folded in the same transactions; one point a second,
with an hour's pause halfway).  Then, each in a fresh process (so its memory is its own): open
(``ChartsPanel.show_runs`` to the first painted frame of every chart), pan and zoom repaints
(``setXRange`` on the linked charts, every chart redrawn and painted), and the resident memory after
them, for each of ``--views``: the step axis, the wall-time axis, smoothing on (0.6), and the run
drawn as a group (of one run: a group's mean and band read from the tiers).  Peers: the app today (every point in memory,
``stored_points`` out of reach) at the sizes up to ``--today-max``, and TensorBoard's
``EventAccumulator`` (size_guidance 0: keep every point) loading the points ``SummaryWriter``
wrote, measured at ``--tb-points`` in all and scaled linearly to each size (it reads every event).

``--never-seen N``: the case of an app that has never seen the run.  A finished run of METRICS x N
points is generated straight into an agent's journal (packed entries of 2,048 points as the
compactor leaves them, and the journal's tiers), a real agent is started on it, and a client asks
what the app asks first: the run list, then every metric's extent (the top level) in one request
and the buckets of the whole run folded per column of WIDTH by the agent in another, turned into
the curves a chart draws (``gui.tiers.drawn``), as the app's ``RemoteSeries`` does; then the same
pan and zoom moves as above, every metric in one request each.  The Qt paint itself is not in these
times; it is in the charts panel's, measured next in fresh processes (``remote_child``).

    python benchmarks/bench_tiers.py [--sizes 10e6,30e6,100e6] [--metrics 10] [--today-max 10e6]
                                     [--views step,time,smooth,group]
    python benchmarks/bench_tiers.py --never-seen 100e6 [--metrics 10]

``--old-journal N``: a journal from before the tiers (the same run, its tiers dropped).  The agent
must start at once and stay responsive while it builds them a bounded step at a time: the time to
answer, the ping round trips while building (median and worst), and how long the build took.

    python benchmarks/bench_tiers.py --old-journal 10e6 [--metrics 10]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import numpy as np
from _common import median, table, write_result

METRICS = 10
PAGE = 1_000_000  # points per written page
CHUNK = 10_000  # points per entry, as a busy trainer's journal sends them
URL = "tcp://127.0.0.1:1"
WIDTH, HEIGHT = 1400, 900
VIEWS = ("step", "time", "smooth", "group")
PAUSE = 3600.0  # seconds of wall time without a point, halfway through the run


def walks(points: int, metrics: int) -> Iterator[tuple[int, np.ndarray, np.ndarray]]:
    """(metric index, steps, values) pages of PAGE points: ``metrics`` random walks with a spike each."""
    rng = np.random.default_rng(0)
    for m in range(metrics):
        spike, level = int(rng.integers(0, points)), 0.0
        for lo in range(0, points, PAGE):
            steps = np.arange(lo, min(lo + PAGE, points), dtype=np.int64)
            vals = level + np.cumsum(rng.standard_normal(len(steps)))
            level = float(vals[-1])
            if lo <= spike < lo + len(steps):
                vals[spike - lo] = 1e6
            yield m, steps, vals


def fill_store(path: Path, points: int, metrics: int) -> float:
    """One finished run of ``metrics`` random walks with a spike each; returns the seconds taken."""
    from pilothouse.gui.local_store import LocalStore

    started = time.perf_counter()
    store = LocalStore(path)
    store.put_runs(URL, [{"id": "big", "project": "bench", "name": "big", "kind": "train", "status": "finished"}])
    entry_id = 0
    for m, steps, vals in walks(points, metrics):
        times = 1.7e9 + steps.astype(np.float64) + np.where(steps >= points // 2, PAUSE, 0.0)
        page = []
        for at in range(0, len(steps), CHUNK):
            entry_id += 1
            sl = slice(at, at + CHUNK)
            page.append((entry_id, "big", "m", f"metric/{m}", 0, len(steps[sl]), steps[sl].tobytes(),
                         vals[sl].tobytes(), times[sl].tobytes(), None))
        store.write_page(URL, page, entry_id)
    store.close()
    return time.perf_counter() - started


def fill_journal(path: Path, points: int, metrics: int) -> float:
    """One finished run of ``metrics`` random walks with a spike each, packed, with its tiers, straight
    into an agent's journal at ``path``; returns the seconds taken."""
    from pilothouse.node.journal import Store
    from pilothouse.store.packing import MAX_POINTS
    from pilothouse.wire import packed_chunks

    started = time.perf_counter()
    store = Store(path)
    store.begin()
    store.upsert_run({"run": "big", "project": "bench", "name": "big", "host": "h", "pid": 1, "config": {}}, 0.0)
    store.set_status("big", "finished", 0.0)
    store.commit()
    per = MAX_POINTS // 8  # each packed entry joins 8 entries of 256 points
    for m, steps, vals in walks(points, metrics):
        times = (1.7e9 + steps.astype(np.float64)).view(np.int64)
        rows = []
        for at in range(0, len(steps), MAX_POINTS):
            sl = slice(at, at + MAX_POINTS)
            n = len(steps[sl])
            counts = np.full(-(-n // per), per, np.uint32)
            counts[-1] = n - per * (len(counts) - 1)
            origins = np.arange(store.head + 1, store.head + 1 + len(counts), dtype=np.int64)
            store.head += len(counts)
            blob = packed_chunks.pack(origins, counts, packed_chunks.Points(
                steps[sl].tobytes(), vals[sl].tobytes(), times[sl].tobytes()))
            rows.append((int(origins[-1]), "big", "m", f"metric/{m}", 0, n, blob, int(origins[0])))
        store.begin()
        store.db.conn.executemany("INSERT INTO journal (id, run, kind, metric, rank, n, steps, first_id) "
                                  "VALUES (?,?,?,?,?,?,?,?)", rows)
        store.tiers.table.fold(("big", f"metric/{m}"), steps, vals, times.view(np.float64))
        store.db.execute("INSERT OR REPLACE INTO last_values VALUES (?, ?, ?)",
                         ["big", f"metric/{m}", vals[-1:].tobytes()])
        store.db.execute("UPDATE runs SET last_step=?, points=points+? WHERE id='big'", [points - 1, len(steps)])
        store.commit()
    store.db.close()
    return time.perf_counter() - started


def never_seen(points: int, metrics: int, trials: int) -> dict:
    """Fill a journal, start a real agent on it, and time what an app that never saw the run asks."""
    from _common import AgentProcess

    from pilothouse.client import Client
    from pilothouse.gui.tiers import drawn as drawn_columns
    from pilothouse.store.tiers import LEVELS

    none = np.empty(0, np.int64)
    agent = AgentProcess()
    filled = fill_journal(agent.data / "journal.sqlite", points, metrics)
    disk = sum(f.stat().st_size for f in agent.data.glob("journal.sqlite*")) / 2 ** 30
    t = time.perf_counter()
    agent.start()
    started = time.perf_counter() - t
    out: dict = {"points": points, "metrics": metrics, "fill_s": filled, "disk_gb": disk, "agent_start_s": started,
                 "open_s": [], "moves_s": {}, "answer_bytes": 0}
    try:
        with Client(agent.url, timeout=60) as client:
            for _ in range(trials):
                t = time.perf_counter()
                run = next(r for r in client.runs() if r["id"] == "big")
                names = sorted(run["summary"])
                tops = client.tiers("big", names, -2.0 ** 63, 2.0 ** 63, level=LEVELS - 1)
                x0 = min(float(top["xfirst"].min()) for top in tops.values())  # the linked charts' range
                x1 = max(float(top["xlast"].max()) for top in tops.values())
                answers = client.tiers("big", names, x0, x1, WIDTH, by_column=True)
                drawn = {name: drawn_columns(cols, _level(x0, x1), none, none) for name, cols in answers.items()}
                out["answer_bytes"] = max(out["answer_bytes"], *(cols.nbytes for cols in answers.values()))
                out["open_s"].append(time.perf_counter() - t)
                assert len(drawn) == metrics and max(v.maxs.max() for v in drawn.values()) == 1e6  # every spike
            for move, (a, b) in moves(x0, x1, "level 0").items():
                times = []
                for _ in range(trials):
                    t = time.perf_counter()
                    for cols in client.tiers("big", names, a, b, WIDTH, by_column=True).values():
                        drawn_columns(cols, _level(a, b), none, none)
                    times.append(time.perf_counter() - t)
                out["moves_s"][move] = times
        out["panel"] = [remote_trial(agent.url) for _ in range(trials)]
    finally:
        agent.stop()
    return out


def remote_child(url: str) -> dict:
    """In this process: the charts panel on an empty store, the run list from the agent, the run
    shown (``RemoteSeries``: its agent's tiers) until every chart is painted with an answer that
    serves its range and width (``RemoteSeries.answered``: what the app takes as final, an answer
    covering the range on about as many columns); then the pan/zoom moves: the repaint at once
    (with the columns at hand, the new range asked), and the time until every chart is painted
    with the new answers."""
    os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
    from PySide6.QtWidgets import QApplication

    from pilothouse.client import Client
    from pilothouse.gui._qt.charts import ChartsPanel
    from pilothouse.gui.local_store import LocalStore
    from pilothouse.gui.remote_tiers import RemoteTiers

    app = QApplication.instance() or QApplication([])
    with tempfile.TemporaryDirectory() as tmp:
        store = LocalStore(Path(tmp) / "app.sqlite")
        panel = ChartsPanel()
        panel.model.remote = RemoteTiers()
        panel.model.remote_gap = 1
        panel.resize(WIDTH, HEIGHT)
        panel.show()
        app.processEvents()

        def painted() -> float:
            """Seconds until every curve draws the answer for its chart's range and width."""
            started = time.perf_counter()
            while time.perf_counter() - started < 60:
                app.processEvents()
                panel.remote_answered(url)
                ready = True
                for chart in panel.charts.values():
                    chart.flush()
                    (x0, x1), _ = chart.getViewBox().viewRange()
                    pixels = max(int(chart.getViewBox().width() * chart.devicePixelRatioF()), 1)
                    for curve in chart.curves.values():
                        ready &= curve.series.answered(x0, x1, pixels)  # an answer that serves its range and width
                if ready:
                    panel.grab()
                    return time.perf_counter() - started
                time.sleep(0.002)
            raise RuntimeError("the agent's tiers never came")

        t = time.perf_counter()
        with Client(url) as client:
            store.put_runs(url, client.runs())  # what a link's first refresh writes
        panel.show_runs([(url, "big")], store)
        opened = time.perf_counter() - t + painted()
        first = next(iter(panel.charts.values()))
        (x0, x1), _ = first.getViewBox().viewRange()
        repaint, refined = {}, {}
        for name, (a, b) in moves(x0, x1, "level 0").items():
            repaint[name] = repainted(panel, first, a, b)
            refined[name] = repaint[name] + painted()
        panel.model.remote.close()
        store.close()
    return {"open_s": opened, "repaint_s": repaint, "refined_s": refined, "charts": len(panel.charts)}


def remote_trial(url: str) -> dict:
    out = subprocess.run([sys.executable, __file__, "--child-remote", url], capture_output=True, text=True,
                         timeout=600, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def old_journal(points: int, metrics: int) -> dict:
    """Fill a journal, drop its tiers, start a real agent on it and ping it until the tiers are built."""
    import sqlite3

    from _common import AgentProcess

    from pilothouse.client import Client

    agent = AgentProcess()
    path = agent.data / "journal.sqlite"
    fill_journal(path, points, metrics)
    con = sqlite3.connect(path)
    con.execute("DROP TABLE tiers")
    con.execute("DROP TABLE tier_marks")
    con.commit()
    con.execute("VACUUM")
    con.close()
    t = time.perf_counter()
    agent.start()
    out: dict = {"points": points, "metrics": metrics, "agent_start_s": time.perf_counter() - t, "pings_s": []}
    try:
        with Client(agent.url, timeout=60) as client:
            started = time.perf_counter()
            out["not_ready_answer"] = client.tiers("big", ["metric/0"], 0, points, level=0) is None
            while client.tiers("big", ["metric/0"], 0, points, 1000) is None:
                p = time.perf_counter()
                client.ping()
                out["pings_s"].append(time.perf_counter() - p)
                time.sleep(0.05)
            out["build_s"] = time.perf_counter() - started
    finally:
        agent.stop()
    return out


def report_old_journal(got: dict) -> dict:
    pings = got["pings_s"] or [0.0]
    print(table(["journal from before the tiers", "agent answers after", "first tiers query", "built in",
                 "build rate", "ping while building (median / worst)"],
                [[f"{got['metrics']} x {got['points'] / 1e6:g} M", f"{got['agent_start_s']:.2f} s",
                  "not ready" if got["not_ready_answer"] else "READY (wrong)", f"{got['build_s']:.0f} s",
                  f"{got['points'] * got['metrics'] / got['build_s'] / 1e6:.1f} M points/s",
                  f"{median(pings) * 1000:.1f} / {max(pings) * 1000:.1f} ms"]]))
    print(f"results: {write_result('bench_tiers_old_journal', got)}")
    return {"old_journal": got}


def _level(x0: float, x1: float) -> int:
    from pilothouse.store.tiers import level_for

    return max(level_for(x0, x1, WIDTH), 0)


def moves(x0: float, x1: float, finest: str) -> dict[str, tuple[float, float]]:
    """The pan and zoom moves measured, from the whole run's x range; ``finest``: what 1,000 steps read."""
    span = x1 - x0
    return {"zoom to the middle half": (x0 + span / 4, x1 - span / 4),
            "zoom to 1 %": (x0 + span * 0.50, x0 + span * 0.51),
            "pan by 0.5 %": (x0 + span * 0.505, x0 + span * 0.515),
            f"zoom to 1,000 steps ({finest})": (x0 + span * 0.3, x0 + span * 0.3 + 1000),
            "zoom out to the whole run": (x0, x1)}


def repainted(panel, first, x0: float, x1: float) -> float:
    """Seconds to set the linked charts' x range and repaint every chart."""
    t = time.perf_counter()
    first.setXRange(x0, x1, padding=0)
    for chart in panel.charts.values():
        chart.flush()
    panel.grab()
    return time.perf_counter() - t


def child(path: Path, mode: str, view: str) -> dict:
    """In this process: open the run as ``view`` shows it, pan and zoom, and report times and memory (as JSON)."""
    os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
    import psutil
    from PySide6.QtWidgets import QApplication

    from pilothouse.gui._qt.charts import ChartsPanel
    from pilothouse.gui.local_store import LocalStore

    QApplication.instance() or QApplication([])
    store = LocalStore(path)
    panel = ChartsPanel()
    if mode == "today":
        panel.model.stored_points = 2 ** 62  # every point in memory, as before the tiers
    panel.resize(WIDTH, HEIGHT)
    panel.show()
    if view == "time":
        panel.x_axis.setCurrentText("wall time")
    elif view == "smooth":
        panel.smoothing.setValue(60)
    elif view == "group":
        panel.group_by = "name:-seed\\d+"  # a group of this one run
    QApplication.processEvents()
    before = psutil.Process().memory_info().rss
    t0 = time.perf_counter()
    panel.show_runs([(URL, "big")], store)
    for chart in panel.charts.values():
        chart.flush()
    panel.grab()
    opened = time.perf_counter() - t0
    first = next(iter(panel.charts.values()))
    (x0, x1), _ = first.getViewBox().viewRange()
    repaint = {name: repainted(panel, first, a, b) for name, (a, b) in moves(x0, x1, "raw points").items()}
    tiered = sum(type(c.series).__name__ in ("StoredSeries", "StoredGroup") for ch in panel.charts.values()
                 for c in ch.curves.values())
    rss = psutil.Process().memory_info().rss
    return {"open_s": opened, "repaint_s": repaint, "rss_mb": rss / 2 ** 20, "rss_before_mb": before / 2 ** 20,
            "curves_from_tiers": tiered, "charts": len(panel.charts)}


def trial(path: Path, mode: str, view: str = "step") -> dict:
    out = subprocess.run([sys.executable, __file__, "--child", str(path), "--mode", mode, "--view", view],
                         capture_output=True, text=True, timeout=1800, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def tensorboard_load(total_points: int, metrics: int, tmp: Path) -> float | None:
    """Seconds per point for EventAccumulator (keep all) to load scalars SummaryWriter wrote."""
    try:
        from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
        from torch.utils.tensorboard import SummaryWriter
    except ImportError:
        return None
    logdir = tmp / "tb"
    writer = SummaryWriter(str(logdir))
    per_metric = total_points // metrics
    rng = np.random.default_rng(0)
    for m in range(metrics):
        for step, value in enumerate(np.cumsum(rng.standard_normal(per_metric)).tolist()):
            writer.add_scalar(f"metric/{m}", value, step)
    writer.close()
    t = time.perf_counter()
    acc = EventAccumulator(str(logdir), size_guidance={"scalars": 0})
    acc.Reload()
    loaded = sum(len(acc.Scalars(tag)) for tag in acc.Tags()["scalars"])
    seconds = time.perf_counter() - t
    assert loaded == per_metric * metrics, loaded
    return seconds / loaded


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="10e6,30e6,100e6", help="points per metric, comma-separated")
    parser.add_argument("--metrics", type=int, default=METRICS)
    parser.add_argument("--today-max", type=float, default=10e6, help="largest size the app today is opened at")
    parser.add_argument("--tb-points", type=float, default=1e6, help="points TensorBoard is measured at, in all")
    parser.add_argument("--trials", type=int, default=3)
    parser.add_argument("--views", default="step", help=f"comma-separated, of {', '.join(VIEWS)}")
    parser.add_argument("--never-seen", type=float, help="points per metric of the never-seen case (run alone)")
    parser.add_argument("--old-journal", type=float, help="points per metric of the old-journal case (run alone)")
    parser.add_argument("--child", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--child-remote", help=argparse.SUPPRESS)
    parser.add_argument("--mode", default="tiers", choices=("tiers", "today"), help=argparse.SUPPRESS)
    parser.add_argument("--view", default="step", choices=VIEWS, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        print(json.dumps(child(args.child, args.mode, args.view)))
        return {}
    if args.child_remote:
        print(json.dumps(remote_child(args.child_remote)))
        return {}
    if args.old_journal:
        return report_old_journal(old_journal(int(args.old_journal), args.metrics))
    if args.never_seen:
        return report_never_seen(never_seen(int(args.never_seen), args.metrics, args.trials))
    sizes = [int(float(s)) for s in args.sizes.split(",")]
    if not sizes or min(sizes) < 1 or args.metrics < 1:
        parser.error("--sizes and --metrics must be positive")
    views = args.views.split(",")
    if not views or set(views) - set(VIEWS):
        parser.error(f"--views lists some of {', '.join(VIEWS)}, not {args.views!r}")
    data: dict = {"metrics": args.metrics, "sizes": {}}
    with tempfile.TemporaryDirectory(prefix="pilothouse-tiers-") as tmp:
        tb = tensorboard_load(int(args.tb_points), args.metrics, Path(tmp))
        data["tensorboard_s_per_point"] = tb
        for size in sizes:
            path = Path(tmp) / f"store-{size}.sqlite"
            filled = fill_store(path, size, args.metrics)
            runs = {view: [trial(path, "tiers", view) for _ in range(args.trials)] for view in views}
            today = trial(path, "today") if size <= args.today_max else None
            data["sizes"][size] = {"fill_s": filled, "disk_gb": path.stat().st_size / 2 ** 30, "views": runs,
                                   "today": today}
            for file in Path(tmp).glob(f"store-{size}.sqlite*"):
                file.unlink()
        shutil.rmtree(Path(tmp) / "tb", ignore_errors=True)
    rows = []
    for size, got in data["sizes"].items():
        total = size * args.metrics
        for view, runs in got["views"].items():
            open_s = median([r["open_s"] for r in runs])
            worst = max(max(r["repaint_s"].values()) for r in runs)
            rss = max(r["rss_mb"] for r in runs)
            bare = max(r["rss_before_mb"] for r in runs)
            today = got["today"] if view == "step" else None
            tb_s = tb * total if tb and view == "step" else None
            rows.append([f"{args.metrics} x {size / 1e6:g} M", view, f"{got['fill_s']:.0f} s", f"{open_s:.2f} s",
                         f"{worst * 1000:.0f} ms", f"{rss:.0f} MB ({bare:.0f} before)",
                         f"{today['open_s']:.2f} s, {today['rss_mb']:.0f} MB" if today else "-",
                         f"{tb_s:.0f} s ({tb_s / open_s:.0f}x)" if tb_s else "-"])
    print()
    print(table(["run", "view", "fill", "open -> painted", "worst pan/zoom", "RSS", "app today (open, RSS)",
                 f"TensorBoard load (scaled from {args.tb_points / 1e6:g} M)"], rows))
    print("targets: open <= 1 s, pan/zoom <= 100 ms, RSS < 300 MB, all flat in the run's length")
    print(f"results: {write_result('bench_tiers', data)}")
    return data


def report_never_seen(got: dict) -> dict:
    worst = max(max(t) for t in got["moves_s"].values())
    panel = got["panel"]
    print(table(["the app's charts panel, offscreen (real RemoteSeries)", "open -> every chart painted (median)",
                 "pan/zoom -> repainted at once (median / worst)", "-> painted with the new answers (median / worst)"],
                [[f"{got['metrics']} x {got['points'] / 1e6:g} M", f"{median([p['open_s'] for p in panel]):.2f} s",
                  *(f"{median([v for p in panel for v in p[k].values()]) * 1000:.0f} / "
                    f"{max(v for p in panel for v in p[k].values()) * 1000:.0f} ms" for k in ("repaint_s", "refined_s"))]]))
    print(table(["run", "fill", "journal", "agent start", "first data for every chart (median)", "worst pan/zoom"],
                [[f"{got['metrics']} x {got['points'] / 1e6:g} M", f"{got['fill_s']:.0f} s", f"{got['disk_gb']:.1f} GB",
                  f"{got['agent_start_s']:.2f} s", f"{median(got['open_s']):.3f} s", f"{worst * 1000:.0f} ms"]]))
    print(table(["move (every metric)", "median", "max"],
                [[m, f"{median(t) * 1000:.0f} ms", f"{max(t) * 1000:.0f} ms"] for m, t in got["moves_s"].items()]))
    print("targets: first paint <= 2 s from an app that never saw the run, pan/zoom <= 100 ms (Qt paint not included)")
    print(f"results: {write_result('bench_tiers_never_seen', got)}")
    return {"never_seen": got}


def passed(data: dict) -> bool:
    if "old_journal" in data:
        return data["old_journal"]["not_ready_answer"] and data["old_journal"]["agent_start_s"] < 5
    if "never_seen" in data:
        got = data["never_seen"]
        panel = got["panel"]
        return median([p["open_s"] for p in panel]) <= 2.0 and max(max(p["repaint_s"].values()) for p in panel) <= 0.1
    return all(median([r["open_s"] for r in runs]) <= 1.0 and max(max(r["repaint_s"].values()) for r in runs) <= 0.1
               and max(r["rss_mb"] for r in runs) < 300 for got in data["sizes"].values() for runs in got["views"].values())


if __name__ == "__main__":
    result = main()
    raise SystemExit(0 if not result or passed(result) else 1)
