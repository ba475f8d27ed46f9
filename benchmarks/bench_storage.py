"""Bytes on disk per point: the journal as written, the journal once packed, and TensorBoard's event files.

Two kinds of series, each written into the agent's own Store one reading per ingest (as the
agent writes a paced trainer's step, or its sampler's once-a-second GPU reading: the case
where a row per point costs most):

- the demo's 10 metrics, with the values of a real run of the demo's GRPO trainer (run here
  against a real agent, then read back);
- one GPU's NVML readings at 1 Hz for ``--hours`` (util and temperature as integers, power in
  mW, memory in MiB, as NVML gives them; there is no GPU here, so they are generated).

A run's bytes are those of its rows copied into a fresh database with the journal's indexes,
counted page by page (``dbstat``), so other runs and free pages do not count.  TensorBoard:
the size of the event file ``SummaryWriter.add_scalar`` writes for the same points.

The app's store: the same rows as a followed run's pages bring them (``LocalStore.write_page``,
a row per metric per reading), its bytes per point as written and once its writer packed them
(``StorePacker``), tiers apart, points checked bit for bit.

The write cost of the journal's tiers (``pilothouse.node.journal_tiers``): the time spent folding
them, measured around the journal's own tier calls while the points are written, so stored
points/s with the tiers and without (the same writing less that time); the bytes of tier rows
written per point (the tail blocks rewritten at each fold included) and the bytes the finished
tiers take on disk per point.

    python benchmarks/bench_storage.py [--steps 1000] [--hours 6]
"""

from __future__ import annotations

import argparse
import sqlite3
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
from _common import ROOT, AgentProcess, median, table, write_result

from pilothouse.client import Client
from pilothouse.gui.local_store import LocalStore
from pilothouse.gui.store_packing import StorePacker
from pilothouse.node.compactor import Compactor
from pilothouse.node.journal import Store
from pilothouse.wire.entries import KIND_METRIC
from pilothouse.wire.messages import pack, unpack
from pilothouse.wire.records import REC_METRICS, encode_batch, metrics_packer

Series = dict[str, tuple[np.ndarray, np.ndarray, np.ndarray]]  # metric -> (steps, values, wall times)
APP_AGENT = "tcp://127.0.0.1:1"  # the agent the app's store holds the rows under


def demo_series(steps: int) -> Series:
    """Every metric of a real demo run: the demo trainer against a real agent."""
    with AgentProcess() as agent:
        subprocess.run([sys.executable, "-m", "pilothouse.demo.grpo", "--agent", agent.url, "--name", "bench",
                        "--steps", str(steps), "--checkpoint-dir", str(agent.data / "ckpt")],
                       check=True, cwd=ROOT, capture_output=True, timeout=900)
        with Client(agent.url, timeout=30) as client:
            run = next(r for r in client.runs() if r["name"] == "bench")
            metrics = {e.metric for page in client.history(run["id"], [KIND_METRIC]) for e in page.entries}
            return {m: client.series(run["id"], m) for m in sorted(metrics)}


def gpu_series(hours: float, seed: int = 0) -> Series:
    """One GPU's readings once a second, as NVML reports them (integers, mW, MiB)."""
    rng = np.random.default_rng(seed)
    n = int(hours * 3600)
    steps = np.arange(n, dtype=np.int64)
    times = 1.76e9 + steps + rng.uniform(-0.02, 0.02, n)  # the sampler's tick, a little late or early
    busy = (np.arange(n) // 600) % 7 != 0  # an idle ten minutes now and then
    util = np.where(busy, np.clip(np.round(rng.normal(93, 4, n)), 0, 100), 0.0)
    power_mw = np.round(np.where(busy, rng.normal(620_000, 25_000, n), 85_000 + rng.normal(0, 500, n)))
    temp = np.round(55 + 20 * np.convolve(busy.astype(float), np.ones(300) / 300, "same") + rng.normal(0, 0.4, n))
    mem_mib = np.where(busy, 71_234 + np.round(rng.normal(0, 3, n)).cumsum() % 512, 1_024)
    return {name: (steps, values.astype(np.float64), times) for name, values in (
        ("gpu0/util", util), ("gpu0/power_w", power_mw / 1000.0), ("gpu0/temp_c", temp),
        ("gpu0/mem_used_gb", mem_mib / 1024.0), ("gpu0/mem_total_gb", np.full(n, 80.0)))}


def write_plain(path: Path, series: Series) -> tuple[int, float, float, int]:
    """The points into a journal, one reading (every metric at one step) per ingest; returns points,
    seconds writing, seconds of it folding tiers, bytes of tier rows written."""
    store = Store(path)
    folding = [0.0]
    for name in ("committed", "flush_all"):
        setattr(store.tiers, name, timed(getattr(store.tiers, name), folding))
    started = time.perf_counter()
    store.begin()
    store.upsert_run({"run": "bench", "project": "bench", "name": "bench", "host": "h", "pid": 1, "config": {}}, 0.0)
    names = tuple(series)
    pack_row = metrics_packer(len(names))
    length = min(len(s[0]) for s in series.values())
    for i in range(length):
        row = pack_row(int(series[names[0]][0][i]), float(series[names[0]][2][i]),
                       *(float(series[m][1][i]) for m in names))
        store.ingest(("bench", 0, ""), i + 1, i + 1, unpack(pack(encode_batch([(REC_METRICS, names, row)]))), 0.0)
        if i % 5000 == 4999:
            store.commit()
            store.begin()
    store.commit()
    store.begin()
    store.tiers.flush_all()  # what still waits in memory, as the agent does when it stops
    store.commit()
    took, written = time.perf_counter() - started, store.tiers.written
    store.db.close()
    return length * len(names), took, folding[0], written


def timed(call, total: list[float]):
    """``call``, adding the seconds it takes to ``total[0]`` (instruments the journal's tier work)."""
    def wrapper(*args):
        started = time.perf_counter()
        try:
            return call(*args)
        finally:
            total[0] += time.perf_counter() - started
    return wrapper


def run_bytes(path: Path, names: str = "'journal', 'j1', 'j2'") -> int:
    """Pages the run's metric rows (or with ``names`` its tiers: 'tiers', 't1') take, copied into a
    fresh database with the journal's indexes."""
    return _pages(path, names, ["CREATE TABLE journal AS SELECT * FROM src.journal WHERE kind='m' ORDER BY id",
                                "CREATE INDEX j1 ON journal (run, kind, metric, id)",
                                "CREATE INDEX j2 ON journal (first_id) WHERE first_id IS NOT NULL",
                                "CREATE TABLE tiers AS SELECT * FROM src.tiers ORDER BY run, metric, level, block",
                                "CREATE UNIQUE INDEX t1 ON tiers (run, metric, level, block)"])


def app_bytes(path: Path, names: str = "'entries', 'e0', 'e1'") -> int:
    """Pages the app store's metric rows (or with ``names`` its tiers: 'tiers', 't1') take, copied into a
    fresh database with the store's indexes."""
    return _pages(path, names, ["CREATE TABLE entries AS SELECT * FROM src.entries WHERE kind='m' ORDER BY agent, id",
                                "CREATE UNIQUE INDEX e0 ON entries (agent, id)",
                                "CREATE INDEX e1 ON entries (agent, run, kind, metric, id)",
                                "CREATE TABLE tiers AS SELECT * FROM src.tiers "
                                "ORDER BY agent, run, metric, level, block",
                                "CREATE UNIQUE INDEX t1 ON tiers (agent, run, metric, level, block)"])


def _pages(path: Path, names: str, copy_statements: list[str]) -> int:
    """Bytes of the pages of ``names`` once ``copy_statements`` copied them from ``path`` (attached as
    src) into a fresh database: the rows' own size, whatever else the file holds and frees."""
    with tempfile.TemporaryDirectory() as tmp:
        con = sqlite3.connect(Path(tmp) / "copy.sqlite")
        con.execute("ATTACH ? AS src", [str(path)])
        for statement in copy_statements:
            con.execute(statement)
        con.commit()
        used = con.execute(f"SELECT SUM(pgsize) FROM dbstat WHERE name IN ({names})").fetchone()[0]
        con.close()
    return used


def measure_app(journal: Path, path: Path, series: Series, points: int) -> dict:
    """The journal's plain rows into an app store as a link writes them, then packed by its writer's
    packer; bytes per point of its ``points``."""
    store = Store(journal)
    app = LocalStore(path)
    rows = store.db.execute("SELECT id, run, kind, metric, rank, n, steps, vals, times, body FROM journal "
                            "WHERE kind='m' ORDER BY id")
    while chunk := rows.fetchmany(2000):
        app.write_page(APP_AGENT, chunk, chunk[-1][0])
    store.db.close()
    written, tiers = app_bytes(path), app_bytes(path, "'tiers', 't1'")
    packer = StorePacker(app)
    held = []
    while packer.pending():
        started = time.perf_counter()
        if packer.step():
            held.append(time.perf_counter() - started)
    exact = all(np.array_equal(a.view(np.int64), b.view(np.int64)) for m, (s, v, t) in series.items()
                for a, b in zip(app.series(APP_AGENT, "bench", m), (s, v, t)))
    app.close()
    return {"app_written": written / points, "app_packed": app_bytes(path) / points, "app_tiers": tiers / points,
            "app_tiers_packed": app_bytes(path, "'tiers', 't1'") / points, "app_bit_exact": exact,
            "app_held_ms_median": 1e3 * median(held or [0.0]), "app_held_ms_max": 1e3 * max(held or [0.0])}


def pack_all(path: Path) -> list[float]:
    """Pack as the agent does, a step per transaction; returns how long each step that packed held it (s)."""
    store = Store(path)
    compactor = Compactor(store)
    held = []
    while compactor.pending():
        started = time.perf_counter()
        store.begin()
        packed = compactor.step()
        store.commit()
        if packed:
            held.append(time.perf_counter() - started)
    store.db.close()
    return held


def tensorboard_bytes(out: Path, series: Series) -> int | None:
    try:
        from torch.utils.tensorboard import SummaryWriter
    except ImportError:
        return None
    writer = SummaryWriter(str(out))
    for metric, (steps, values, times) in series.items():
        for s, v, t in zip(steps.tolist(), values.tolist(), times.tolist()):
            writer.add_scalar(metric, v, s, walltime=t)
    writer.close()
    return sum(f.stat().st_size for f in out.rglob("events.out.tfevents.*"))


def measure(name: str, series: Series, tmp: Path) -> dict:
    path = tmp / f"{name}.sqlite"
    points, took, folding, written = write_plain(path, series)
    plain = run_bytes(path)
    tiers = run_bytes(path, "'tiers', 't1'")
    app = measure_app(path, tmp / f"{name}-app.sqlite", series, points)
    held = sorted(pack_all(path))
    packed = run_bytes(path)
    tb = tensorboard_bytes(tmp / f"tb-{name}", series)
    store = Store(path)
    exact = all(np.array_equal(a.view(np.int64), b.view(np.int64)) for m, (s, v, t) in series.items()
                for a, b in zip(store.series("bench", m), (s, v, t)))
    store.db.close()
    return {"series": name, "points": points, "plain": plain / points, "packed": packed / points,
            "tensorboard": None if tb is None else tb / points, "bit_exact": exact,
            "held_ms_median": 1e3 * median(held), "held_ms_max": 1e3 * held[-1],
            "points_per_s": points / took, "points_per_s_without_tiers": points / (took - folding),
            "tier_share": folding / took, "tier_written": written / points, "tiers": tiers / points,
            **app}


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=1000, help="steps of the demo run")
    parser.add_argument("--hours", type=float, default=6.0, help="hours of 1 Hz GPU readings")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="pilothouse-bench-") as tmp:
        results = [measure("demo metrics", demo_series(args.steps), Path(tmp)),
                   measure("GPU at 1 Hz", gpu_series(args.hours), Path(tmp))]
    rows = [(r["series"], f"{r['points']:,}", f"{r['plain']:.1f}", f"{r['packed']:.2f}",
             "-" if r["tensorboard"] is None else f"{r['tensorboard']:.1f}",
             f"{r['plain'] / r['packed']:.1f}x",
             "-" if r["tensorboard"] is None else f"{r['tensorboard'] / r['packed']:.1f}x",
             "yes" if r["bit_exact"] else "NO", f"{r['held_ms_median']:.1f} / {r['held_ms_max']:.1f}")
            for r in results]
    print(table(["series", "points", "B/pt written", "B/pt packed", "B/pt TensorBoard", "written/packed",
                 "TensorBoard/packed", "bit-exact", "ms per pack step (median / max)"], rows))
    rows = [(r["series"], f"{r['points_per_s']:,.0f}", f"{r['points_per_s_without_tiers']:,.0f}",
             f"{100 * r['tier_share']:.1f} %", f"{r['tier_written']:.2f}", f"{r['tiers']:.2f}",
             f"{r['tiers'] / r['packed']:.2f}x") for r in results]
    print(table(["series", "stored pts/s with tiers", "without (tier work taken out)", "time in tiers",
                 "tier B/pt written", "tier B/pt on disk", "tiers / packed points"], rows))
    rows = [(r["series"], f"{r['app_written']:.1f}", f"{r['app_packed']:.2f}",
             f"{r['app_written'] / r['app_packed']:.1f}x",
             f"{r['app_tiers']:.2f} / {r['app_tiers_packed']:.2f}", "yes" if r["app_bit_exact"] else "NO",
             f"{r['app_held_ms_median']:.1f} / {r['app_held_ms_max']:.1f}") for r in results]
    print(table(["the app's store: series", "B/pt written", "B/pt packed", "written/packed",
                 "tier B/pt (written / packed)",
                 "bit-exact", "ms per pack step (median / max)"], rows))
    saved = write_result("bench_storage", {"results": results})
    print(f"written: a row per metric per reading, as the agent stores a paced step; packed: after the agent's "
          f"compactor; TensorBoard: SummaryWriter's event file. Result: {saved}")
    return {"results": results}


def passed(data: dict) -> bool:
    return all(r["bit_exact"] and r["app_bit_exact"] for r in data["results"])


if __name__ == "__main__":
    raise SystemExit(0 if passed(main()) else 1)
