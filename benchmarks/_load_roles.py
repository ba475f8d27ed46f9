"""The processes of ``bench_load.py``: trainers that log a fixed schedule, readers that follow
every agent with ``Client.follow``, and the app's own network and store path followed to its UI
thread.  Each reports over a multiprocessing pipe; they live apart from the driver so that each
module holds one side of the benchmark.
"""

from __future__ import annotations

import atexit
import multiprocessing.connection
import os
import shutil
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
from bench_throughput import Tally

import pilothouse as ph
from pilothouse.client import Client
from pilothouse.security import Keyring
from pilothouse.wire.entries import entry_points

STALL_SECONDS = 60.0  # a reader gives up on an agent (and reports loss) after this long without a new point
READY_SECONDS = 120.0  # for 32 agents + their trainers and readers to start on a busy 2-core machine
WARMUP_SECONDS = 1.0  # the app makes its charts and curves as the first points come: "steady" leaves that out


def metric_names(n: int) -> list[str]:
    return [f"train/m{j:02d}" for j in range(n)]


def make_client(url: str, keys_dir: str | None, timeout: float) -> Client:
    return Client(url, timeout=timeout, keys=Keyring(keys_dir) if keys_dir else None)


# --- trainers -----------------------------------------------------------------------------

def trainer_main(runs: list[tuple[str, str]], n_metrics: int, steps_per_s: float, steps: int,
                 conn: multiprocessing.connection.Connection) -> None:
    """One process hosting ``runs`` (agent URL, run id): each run has its own outbox thread.

    At tick i (a fixed schedule from the start time) every hosted run logs step i with
    value = step + metric index; a late tick is logged at once (no step is skipped)."""
    names = metric_names(n_metrics)
    offsets = [float(j) for j in range(n_metrics)]
    handles = [ph.init(project="bench-load", name=run_id, id=run_id, agent=url, heartbeat=1.0)
               for url, run_id in runs]
    conn.send("ready")
    msg = conn.recv()
    if msg == "quit":
        return
    t_start = msg[1]
    mono0 = time.monotonic() + (t_start - time.time())
    dt = 1.0 / steps_per_s
    late = 0
    max_lag = 0.0
    t_first = 0.0
    for i in range(steps):
        lag = time.monotonic() - (mono0 + i * dt)
        if lag < 0:
            time.sleep(-lag)
        else:
            max_lag = max(max_lag, lag)
            late += lag > dt
        if i == 0:
            t_first = time.time()
        for run in handles:
            run.log(dict(zip(names, [i + o for o in offsets])), step=i)
    t_logged = time.time()
    finished = [run.finish(timeout=120) for run in handles]
    conn.send({"t_first_log": t_first, "t_logged": t_logged, "late_ticks": late, "max_lag_s": max_lag,
               "runs": {run.id: {"finished": ok, "steps": steps, **run.stats}
                        for run, ok in zip(handles, finished)}})
    conn.recv()  # "quit": the parent reads our CPU and memory before we exit


# --- readers ------------------------------------------------------------------------------

@dataclass
class Follower:
    """What one reader thread saw of one agent's run."""

    url: str
    run: str
    n_metrics: int
    tallies: list[Tally] = field(default_factory=list)
    latencies: list[np.ndarray] = field(default_factory=list)
    points: int = 0
    t_first_point: float = 0.0
    t_last_point: float = 0.0
    expected: int | None = None  # steps; set once the trainer reported
    error: str = ""
    ready: threading.Event = field(default_factory=threading.Event)

    def complete(self) -> bool:
        return self.expected is not None and all(t.count >= self.expected for t in self.tallies)

    def follow(self, keys_dir: str | None, stop: threading.Event) -> None:
        names = {name: j for j, name in enumerate(metric_names(self.n_metrics))}
        self.tallies = [Tally() for _ in names]
        try:
            with make_client(self.url, keys_dir, timeout=30) as client:
                client.ping()  # the connection works, and with it the CURVE handshake
                self.ready.set()
                last_progress = time.monotonic()
                for page in client.follow(after=0, run=self.run, kinds=["m"], idle=0.2):
                    now = time.time()
                    for e in page.entries:
                        steps, vals, times = entry_points(e)
                        j = names[e.metric]
                        self.tallies[j].add(steps, vals)
                        self.points += len(steps)
                        if j == 0:  # one latency sample per step
                            self.latencies.append((now - times).astype(np.float32))
                    if page.entries:
                        self.t_first_point = self.t_first_point or now
                        self.t_last_point = now
                        last_progress = time.monotonic()
                    if self.complete() or stop.is_set():
                        break
                    if self.expected is not None and time.monotonic() - last_progress > STALL_SECONDS:
                        self.error = f"stalled: no new point for {STALL_SECONDS:g} s"
                        break
        except Exception as exc:  # reported as loss, never hangs the benchmark
            self.error = f"{type(exc).__name__}: {exc}"
            self.ready.set()

    def problems(self) -> list[str]:
        out = [f"{self.run}: {self.error}"] if self.error else []
        problems = [t.problem(f"{self.run}/m{j:02d}", self.expected or 0, j) for j, t in enumerate(self.tallies)]
        return out + [p for p in problems if p is not None]


def reader_main(targets: list[tuple[str, str]], n_metrics: int, keys_dir: str | None,
                conn: multiprocessing.connection.Connection) -> None:
    """One process, one thread (and one Client) per followed agent."""
    stop = threading.Event()
    followers = [Follower(url, run, n_metrics) for url, run in targets]
    threads = [threading.Thread(target=f.follow, args=(keys_dir, stop), daemon=True) for f in followers]
    for th in threads:
        th.start()
    for f in followers:
        f.ready.wait(READY_SECONDS)
    errors = [f"{f.url}: {f.error or 'no answer'}" for f in followers if f.error or not f.ready.is_set()]
    conn.send({"ready": not errors, "errors": errors})
    msg = conn.recv()  # {run: steps} once the trainers are done, or "quit"
    if msg == "quit":
        stop.set()
        return
    for f in followers:
        f.expected = msg[f.run]
    for th in threads:
        th.join()
    lat = np.concatenate([a for f in followers for a in f.latencies]) if any(f.latencies for f in followers) \
        else np.empty(0, np.float32)
    conn.send({"points": sum(f.points for f in followers),
               "t_first_point": min((f.t_first_point for f in followers if f.t_first_point), default=0.0),
               "t_last_point": max(f.t_last_point for f in followers),
               "latencies": lat.tobytes(),
               "problems": [p for f in followers for p in f.problems()]})
    conn.recv()  # "quit"


def app_main(targets: list[tuple[str, str]], n_metrics: int, keys_dir: str | None,
             conn: multiprocessing.connection.Connection) -> None:
    """The real app (``MainWindow``, shown on the offscreen platform) following every agent: what reaches its UI thread.

    Its links write every page to a fresh local store, then hand it to the UI thread; a slot on
    the window's own batch signal tallies each (run, metric) and samples log() -> UI-thread latency,
    while the window redraws (run table, status line) as it does for a user.  Every run is
    selected, so its charts are live too."""
    os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
    import platformdirs  # the owner's local keys stay where the agents found them; the app's settings do not
    os.environ.setdefault("PILOTHOUSE_LOCAL_KEYS", str(Path(platformdirs.user_config_dir("pilothouse")) / "local"))
    os.environ["XDG_CONFIG_HOME"] = config = tempfile.mkdtemp(prefix="pilothouse-load-app-")
    atexit.register(shutil.rmtree, config, True)  # the app's store of this run: tens of MB each time
    if keys_dir:
        os.environ["PILOTHOUSE_KEYS"] = keys_dir
    from PySide6.QtWidgets import QApplication

    from pilothouse.gui._qt.app import MainWindow

    app = QApplication.instance() or QApplication([])
    names = {name: j for j, name in enumerate(metric_names(n_metrics))}
    runs = {run for _, run in targets}
    tallies = {(run, m): Tally() for run in runs for m in names}
    latencies: list[np.ndarray] = []
    steady: list[np.ndarray] = []  # those of points logged WARMUP_SECONDS after the first: the charts are made
    seen = {"points": 0, "first": 0.0, "last": 0.0, "first_log": 0.0, "tally_s": 0.0}  # tally_s: this slot's own CPU
    window = MainWindow(Path(os.environ["XDG_CONFIG_HOME"]) / "store.sqlite", [url for url, _ in targets])

    def on_batch(url: str, entries: list, _runs: object) -> None:
        now, cpu = time.time(), time.thread_time()
        for e in entries:
            if e.kind != "m" or e.run not in runs or e.metric not in names:
                continue
            steps, vals, times = entry_points(e)
            tallies[e.run, e.metric].add(steps, vals)
            seen["points"] += len(steps)
            seen["first"] = seen["first"] or now
            seen["last"] = now
            if names[e.metric] == 0:
                latencies.append((now - times).astype(np.float32))
                seen["first_log"] = seen["first_log"] or float(times.min())
                steady.append(latencies[-1][times >= seen["first_log"] + WARMUP_SECONDS])
        seen["tally_s"] += time.thread_time() - cpu

    window.resize(1400, 900)
    window.show()  # as a user's: the charts in sight are drawn, the others when scrolled to
    shown = window._on_batch  # each agent's batch of a take, as the window takes it; timed once it did

    def taken(url: str, entries: list, runs: object) -> None:
        shown(url, entries, runs)
        on_batch(url, entries, runs)

    window._on_batch = taken
    cpu0 = thread_cpu()
    stages = {"received": [], "written": []}  # log() -> the link took the page / the store wrote it
    for link in window.links.links.values():
        watch_stages(link, names, stages)
    deadline = time.monotonic() + READY_SECONDS
    while time.monotonic() < deadline and not all(h.state == "connected" for h in window.health.values()) \
            or len(window.health) < len(targets):
        app.processEvents()
        time.sleep(0.02)
        if time.monotonic() > deadline:
            break
    errors = [f"{url}: {h.state} {h.error}" for url, h in window.health.items() if h.state != "connected"]
    conn.send({"ready": not errors and len(window.health) == len(targets), "errors": errors or ["no health"]})
    expected: dict[str, int] | None = None
    selected = False
    last_progress = time.monotonic()
    problems: list[str] = []
    pans = Pans(window)
    while True:
        app.processEvents()
        time.sleep(0.005)
        if seen["points"]:
            pans.maybe()
        if not selected and window.runs.rows():
            window.table.selectAll()  # every run charted, as a user comparing them all
            selected = len(window.runs.rows()) >= len(runs)
        if expected is None and conn.poll():
            msg = conn.recv()
            if msg == "quit":
                window.close()
                return
            expected = msg
            last_progress = time.monotonic()
        if seen["last"] and time.monotonic() - last_progress > STALL_SECONDS and expected is not None:
            problems.append(f"app: stalled, no new point for {STALL_SECONDS:g} s")
            break
        if seen["points"]:
            last_progress = max(last_progress, time.monotonic() - (time.time() - seen["last"]))
        if expected is not None and all(tallies[run, m].count >= expected[run] for run in runs for m in names):
            break
    problems += [p for (run, m), t in tallies.items()
                 if (p := t.problem(f"app {run}/{m}", (expected or {}).get(run, 0), names[m])) is not None]
    lat = np.concatenate(latencies) if latencies else np.empty(0, np.float32)
    conn.send({"points": seen["points"], "t_first_point": seen["first"], "t_last_point": seen["last"],
               "latencies": lat.tobytes(), "problems": problems, "thread_cpu_s": thread_cpu(cpu0),
               "tally_cpu_s": seen["tally_s"],
               "steady": np.concatenate(steady or [np.empty(0, np.float32)]).tobytes(),
               "pans": np.array(pans.took, np.float32).tobytes(),
               **{stage: np.concatenate(got or [np.empty(0, np.float32)]).tobytes() for stage, got in stages.items()}})
    conn.recv()  # "quit"
    window.close()


def watch_stages(link: object, names: dict[str, int], stages: dict[str, list[np.ndarray]]) -> None:
    """Sample log() -> each stage of the app's path for the first metric: the link thread taking a
    page (``received``) and the store writer's thread having written it (``written``), so the UI
    thread's share and the store's are told apart.  Wraps this link's own hand-over points."""
    def lags(entries: list) -> list[np.ndarray]:
        now = time.time()
        return [(now - entry_points(e)[2]).astype(np.float32) for e in entries
                if e.kind == "m" and names.get(e.metric) == 0 and e.n]

    queue, on_batch = link._queue, link.on_batch

    def queued(job: object) -> None:
        stages["received"] += lags(job.entries)
        queue(job)

    def written(url: str, entries: list, cursor: int, runs: object) -> None:
        stages["written"] += lags(entries)
        on_batch(url, entries, cursor, runs)

    link._queue, link.on_batch = queued, written


def thread_cpu(since: dict[str, float] | None = None) -> dict[str, float]:
    """CPU seconds of this process's threads by role (``ui``, ``writer``: the store's, ``links``: all
    of them, ``other``), minus ``since``: where the app's time goes, whatever the profiler sees."""
    import psutil

    names = {t.native_id: t.name for t in threading.enumerate()}
    out = {"ui": 0.0, "writer": 0.0, "links": 0.0, "other": 0.0}
    for t in psutil.Process().threads():
        name = names.get(t.id, "")
        role = ("ui" if name == "MainThread" else "writer" if name.startswith("store writer")
                else "links" if name.startswith("link ") else "other")
        out[role] += t.user_time + t.system_time
    return {k: v - (since or {}).get(k, 0.0) for k, v in out.items()}


class Pans:
    """A user panning the first chart of the grid once a second while the load runs: seconds from
    the pan to the start of the chart's first paint after the redraw that serves its range (what the
    user sees; the redraw alone came a paint pass and a batch earlier on a busy thread)."""

    def __init__(self, window: object) -> None:
        self.window, self.took, self.asked, self.next = window, [], None, time.monotonic() + 1.0
        self.chart, self.served, self.watcher = None, False, None

    def maybe(self) -> None:
        if self.asked is not None or time.monotonic() < self.next or not self.window.charts.shown:
            return
        if self.chart is None:
            self.chart = self.window.charts.charts[self.window.charts.shown[0]]
            redraw = self.chart.redraw

            def timed() -> None:
                redraw()
                self.served = self.asked is not None
            self.chart.redraw = timed
            self.watcher = paint_watcher(self.painted)
            self.chart.viewport().installEventFilter(self.watcher)
        (x0, x1), _ = self.chart.getViewBox().viewRange()
        self.asked, self.next, self.served = time.monotonic(), time.monotonic() + 1.0, False
        self.chart.setXRange(x0 + (x1 - x0) / 10, x1 + (x1 - x0) / 10, padding=0)  # a drag to the right

    def painted(self) -> None:
        if self.served:
            self.took.append(time.monotonic() - self.asked)
            self.asked, self.served = None, False


def paint_watcher(on_paint: Callable[[], None]) -> object:
    """A Qt event filter calling ``on_paint`` as a paint event reaches the object it watches (made here:
    this module is imported by the load's processes too, which have no Qt)."""
    from PySide6.QtCore import QEvent, QObject

    class Watcher(QObject):
        def eventFilter(self, watched: QObject, event: QEvent) -> bool:  # noqa: N802 (Qt's name)
            if event.type() == QEvent.Type.Paint:
                on_paint()
            return False

    return Watcher()
