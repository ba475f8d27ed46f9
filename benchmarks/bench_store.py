"""The journal's storage design against the obvious one: a SQLite row per point.

Both sides get the same points (100 metrics per step, as per-layer statistics of a big
model) and write them in transactions of one trainer batch each; then one metric is
loaded back whole.  Reports median points/s for ingest, median ms to load a metric, and
checks that both stores return the same values, bit for bit.

    python benchmarks/bench_store.py [--steps 20000] [--trials 5]
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

import msgpack
import numpy as np
import sqlite_utils
from _common import median, write_result

from pilothouse.node.journal import Store
from pilothouse.wire.records import REC_METRICS, encode_batch, metrics_packer

METRICS = [f"layer{i:02d}/grad_norm" for i in range(100)]
BATCH = 1000  # records per trainer batch, as the outbox sends under load


def make_batches(steps: int) -> list[tuple[dict, list]]:
    """(batch, its (step, wall_time, values) records): the batch exactly as the agent receives it off the wire."""
    rng = np.random.default_rng(0)
    values = rng.standard_normal((steps, len(METRICS))).tolist()
    names = tuple(METRICS)
    pack_row = metrics_packer(len(names))
    batches = []
    for start in range(0, steps, BATCH):
        recs = [(s, 1.7e9 + s, values[s]) for s in range(start, min(start + BATCH, steps))]
        body = encode_batch([(REC_METRICS, names, pack_row(*r[:2], *r[2])) for r in recs])
        batches.append((msgpack.unpackb(msgpack.packb(body), raw=False), recs))
    return batches


def journal_trial(batches: list, folder: Path) -> tuple[float, float, np.ndarray]:
    store = Store(folder / "journal.sqlite")
    store.begin()
    store.upsert_run({"run": "r", "project": "p", "name": "n", "config": {}, "host": "h", "pid": 1}, 0.0)
    store.commit()
    seq = 1
    t0 = time.perf_counter()
    for body, recs in batches:
        store.begin()
        store.ingest(("r", 0, ""), seq, seq, body, 0.0)
        store.commit()
        seq += len(recs)
    ingest = time.perf_counter() - t0
    t0 = time.perf_counter()
    _, vals, _ = store.series("r", METRICS[7])
    load = time.perf_counter() - t0
    store.db.close()
    return ingest, load, vals


def rows_trial(batches: list, folder: Path) -> tuple[float, float, np.ndarray]:
    """One row per point: (run, metric, step, value, wall_time), indexed for loading a metric."""
    db = sqlite_utils.Database(folder / "rows.sqlite")
    db.execute("PRAGMA journal_mode=WAL")
    db.execute("PRAGMA synchronous=NORMAL")
    db["points"].create({"run": str, "metric": str, "step": int, "value": float, "wall_time": float})
    db["points"].create_index(["run", "metric", "step"])
    t0 = time.perf_counter()
    for _, recs in batches:
        rows = [("r", name, step, value, wall_time) for step, wall_time, vals in recs
                for name, value in zip(METRICS, vals)]
        with db.conn:
            db.conn.executemany("INSERT INTO points VALUES (?,?,?,?,?)", rows)
    ingest = time.perf_counter() - t0
    t0 = time.perf_counter()
    vals = np.array([r[0] for r in db.execute("SELECT value FROM points WHERE run=? AND metric=? ORDER BY step",
                                              ["r", METRICS[7]])], dtype=np.float64)
    load = time.perf_counter() - t0
    db.close()
    return ingest, load, vals


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=20_000)
    parser.add_argument("--trials", type=int, default=5)
    args = parser.parse_args(argv)
    batches = make_batches(args.steps)
    points = args.steps * len(METRICS)
    results: dict[str, dict[str, list[float]]] = {"journal (numpy chunks)": {"ingest": [], "load": []},
                                                  "row per point": {"ingest": [], "load": []}}
    same = True
    for _ in range(args.trials):
        with tempfile.TemporaryDirectory() as tmp:
            ji, jl, jv = journal_trial(batches, Path(tmp))
            ri, rl, rv = rows_trial(batches, Path(tmp))
        same &= bool(np.array_equal(jv.view(np.uint64), rv.view(np.uint64)))
        for name, (ingest, load) in (("journal (numpy chunks)", (ji, jl)), ("row per point", (ri, rl))):
            results[name]["ingest"].append(points / ingest)
            results[name]["load"].append(load * 1000)
    journal, rows = results["journal (numpy chunks)"], results["row per point"]
    print(f"\n{points / 1e6:g} M points ({args.steps} steps x {len(METRICS)} metrics), batches of {BATCH} "
          f"records, median of {args.trials} trials\n")
    print(f"{'store':<24} {'ingest M pts/s':>15} {'load 1 metric ms':>17}")
    for name, r in results.items():
        print(f"{name:<24} {median(r['ingest']) / 1e6:>15.2f} {median(r['load']):>17.2f}")
    ingest_ratio = median(journal["ingest"]) / median(rows["ingest"])
    load_ratio = median(rows["load"]) / median(journal["load"])
    print(f"\njournal vs row per point: ingest {ingest_ratio:.1f}x faster, load {load_ratio:.1f}x faster; "
          f"same values bit for bit: {same}")
    data = {"points": points, "batch_records": BATCH, "results": results,
            "ingest_ratio": ingest_ratio, "load_ratio": load_ratio, "bit_exact": same}
    write_result("bench_store", data)
    return data


def passed(data: dict) -> bool:
    return data["bit_exact"]


if __name__ == "__main__":
    raise SystemExit(0 if passed(main()) else 1)
