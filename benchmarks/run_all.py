"""Run every benchmark with its defaults, one after the other (about twenty minutes in all).

    python benchmarks/run_all.py
"""

from __future__ import annotations

import bench_alerts
import bench_app
import bench_chart
import bench_gpu_grid
import bench_hostile
import bench_load
import bench_log
import bench_rollouts
import bench_storage
import bench_store
import bench_sync
import bench_throughput
import bench_watch


def main() -> bool:
    """True if every benchmark's own check (delivery, zero loss) passed."""
    ok = True
    for bench in (bench_log, bench_throughput, bench_store, bench_sync, bench_chart, bench_gpu_grid, bench_app,
                  bench_load, bench_alerts, bench_hostile, bench_rollouts, bench_storage, bench_watch):
        print(f"\n=== {bench.__name__} ===\n", flush=True)
        ok = bench.passed(bench.main([])) and ok
    return ok


if __name__ == "__main__":
    raise SystemExit(0 if main() else 1)
