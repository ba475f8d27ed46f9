"""Sustained throughput trainer -> agent -> reading client, and proof that nothing was lost.

Per trial: a fresh agent subprocess; trainer processes that log as fast as they can; a
reader (this process) that follows the journal from cursor 0 like the app does.  The
clock runs from the first ``log`` call to the moment the reader holds every point.
Zero loss is checked per (run, metric): point count, sum of values, and steps strictly
increasing across chunks (so a duplicate or a reordering cannot hide).

    python benchmarks/bench_throughput.py [--points 6000000] [--trials 3] [--profile]
"""

from __future__ import annotations

import argparse
import io
import multiprocessing
import multiprocessing.connection
import multiprocessing.synchronize
import pstats
import time
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np
from _common import RESULTS, AgentProcess, median, table, write_result

import pilothouse as ph
from pilothouse.client import Client
from pilothouse.wire.entries import entry_points

TARGET = 1_000_000  # points/s per agent (the target; stretch 5M)
STALL_SECONDS = 60.0  # the reader gives up (and reports loss) after this long without a new point


@dataclass(frozen=True)
class Case:
    metrics: int  # per step, i.e. per log() call
    trainers: int

    @property
    def label(self) -> str:
        return f"{self.metrics} metrics/step x {self.trainers} trainer{'s' if self.trainers > 1 else ''}"


CASES = [Case(100, 1), Case(10, 1), Case(100, 2)]


def metric_names(n: int) -> list[str]:
    return [f"model.layers.{j // 4:02d}.{('grad_norm', 'param_norm', 'update_ratio', 'act_rms')[j % 4]}"
            for j in range(n)]


def trainer(url: str, run_id: str, n_metrics: int, steps: int, go: multiprocessing.synchronize.Event,
            conn: multiprocessing.connection.Connection) -> None:
    """Log ``steps`` steps of ``n_metrics`` values (value = step + metric index), then finish."""
    names = metric_names(n_metrics)
    offsets = np.arange(n_metrics, dtype=np.float64)
    run = ph.init(project="bench", name=run_id, id=run_id, agent=url)
    conn.send("ready")
    go.wait()
    t0, cpu0 = time.time(), time.process_time()
    for step in range(steps):
        run.log(dict(zip(names, (offsets + step).tolist())), step=step)
    t_logged = time.time()
    finished = run.finish(timeout=600)
    conn.send({"t_first_log": t0, "t_logged": t_logged, "t_finished": time.time(), "finished": finished,
               "cpu_s": time.process_time() - cpu0, "stats": run.stats})


@dataclass
class Tally:
    """What the reader saw of one (run, metric)."""

    count: int = 0
    total: float = 0.0
    last_step: int = -1
    disorder: int = 0  # chunks whose steps did not strictly continue the previous ones

    def add(self, steps: np.ndarray, vals: np.ndarray) -> None:
        if steps[0] <= self.last_step or np.any(steps[1:] <= steps[:-1]):
            self.disorder += 1
        self.last_step = int(steps[-1])
        self.count += len(steps)
        self.total += float(vals.sum())

    def problem(self, label: str, steps: int, j: int) -> str | None:
        """Unless it holds steps 0..steps-1 once each, valued step + j: what is wrong."""
        want = steps * (steps - 1) / 2 + j * steps
        if self.count == steps and not self.disorder and self.last_step == steps - 1 and self.total == want:
            return None
        return (f"{label}: {self.count}/{steps} points, {self.disorder} out-of-order chunks, "
                f"last step {self.last_step}, sum {self.total} (want {want})")


@dataclass
class ReadResult:
    points: int = 0
    t_last_point: float = 0.0
    cpu_s: float = 0.0
    tallies: dict[tuple[str, str], Tally] = field(default_factory=dict)


def read_until(url: str, runs: set[str], expected: int) -> ReadResult:
    """Follow the journal from cursor 0 until ``expected`` points of ``runs`` arrived (or it stalls)."""
    result = ReadResult()
    cpu0 = time.process_time()
    last_progress = time.monotonic()
    with Client(url, timeout=30) as client:
        for page in client.follow(after=0, kinds=["m"], idle=0.2):
            for e in page.entries:
                if e.run not in runs:
                    continue  # the agent's own host sampling run
                steps, vals, _ = entry_points(e)
                result.tallies.setdefault((e.run, e.metric), Tally()).add(steps, vals)
                result.points += len(steps)
                last_progress = time.monotonic()
            if result.points >= expected or time.monotonic() - last_progress > STALL_SECONDS:
                break
    result.t_last_point = time.time()
    result.cpu_s = time.process_time() - cpu0
    return result


def check(result: ReadResult, runs: set[str], n_metrics: int, steps: int) -> list[str]:
    """Every (run, metric) holds steps 0..steps-1 once each with the right values; else what is wrong."""
    problems = [result.tallies.get((run, name), Tally()).problem(f"{run}/{name}", steps, j)
                for run in sorted(runs) for j, name in enumerate(metric_names(n_metrics))]
    return [p for p in problems if p is not None]


def trial(case: Case, points: int, index: int, profile: bool) -> dict[str, Any]:
    steps = points // (case.metrics * case.trainers)
    expected = steps * case.metrics * case.trainers
    ctx = multiprocessing.get_context("spawn")
    prof_path = RESULTS / "agent.prof" if profile else None
    if prof_path:
        RESULTS.mkdir(exist_ok=True)
    with AgentProcess(profile=prof_path) as ap:
        go = ctx.Event()
        runs = {f"bench-{case.metrics}m-{index}-{k}" for k in range(case.trainers)}
        pipes, procs = [], []
        for run_id in sorted(runs):
            parent, child = ctx.Pipe()
            proc = ctx.Process(target=trainer, args=(ap.url, run_id, case.metrics, steps, go, child), daemon=True)
            proc.start()
            pipes.append(parent)
            procs.append(proc)
        for parent in pipes:
            if not parent.poll(60) or parent.recv() != "ready":
                raise RuntimeError("a trainer did not start")
        agent_cpu0 = ap.cpu_seconds()
        go.set()
        result = read_until(ap.url, runs, expected)
        agent_cpu = ap.cpu_seconds() - agent_cpu0
        reports = [parent.recv() if parent.poll(120) else {} for parent in pipes]
        for proc in procs:
            proc.join(30)
    if any(not r for r in reports):
        raise RuntimeError("a trainer did not report back")
    t0 = min(r["t_first_log"] for r in reports)
    seconds = result.t_last_point - t0
    problems = check(result, runs, case.metrics, steps)
    return {"points": expected, "received": result.points, "seconds": round(seconds, 3),
            "points_per_s": expected / seconds,
            "trainer_log_points_per_s": expected / (max(r["t_logged"] for r in reports) - t0),
            "agent_cpu_s": round(agent_cpu, 2), "agent_cpu_ns_per_point": agent_cpu / expected * 1e9,
            "reader_cpu_s": round(result.cpu_s, 2), "trainer_cpu_s": [round(r["cpu_s"], 2) for r in reports],
            "trainers_finished": all(r["finished"] for r in reports),
            "trainer_dropped_points": sum(r["stats"]["dropped_points"] for r in reports),
            "lossless": not problems and result.points == expected, "problems": problems[:10]}


def profile_report(path: str, top: int = 15) -> str:
    """The agent's top functions by own time, and how many record messages were resends.

    ``Store.ingest`` runs once per record message; ``Store._entries`` only when the
    message carried records the agent did not have yet.
    """
    out = io.StringIO()
    stats = pstats.Stats(path, stream=out).strip_dirs().sort_stats("tottime")
    stats.print_stats(top)
    calls = {func: nc for (file, _, func), (_, nc, *_) in stats.stats.items()  # type: ignore[attr-defined]
             if file == "store.py" and func in ("ingest", "_entries")}
    received, fresh = calls.get("ingest", 0), calls.get("_entries", 0)
    return (f"record messages received by the agent: {received}, carrying new records: {fresh}, "
            f"pure duplicates (trainer resends): {received - fresh}\n" + out.getvalue())


def main(argv: list[str] | None = None) -> dict[str, Any]:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--points", type=int, default=6_000_000, help="points per trial (all trainers together)")
    p.add_argument("--trials", type=int, default=3)
    p.add_argument("--profile", action="store_true",
                   help="one extra trial of the first case with the agent under cProfile (slows it down)")
    args = p.parse_args(argv)

    summary = []
    for case in CASES:
        trials = []
        for i in range(args.trials):
            t = trial(case, args.points, i, profile=False)
            trials.append(t)
            print(f"{case.label}, trial {i + 1}/{args.trials}: {t['points_per_s'] / 1e6:.2f} M points/s, "
                  f"lossless={t['lossless']}", flush=True)
            for problem in t["problems"]:
                print("  LOSS:", problem)
        rate = median([t["points_per_s"] for t in trials])
        summary.append({"case": asdict(case), "label": case.label, "median_points_per_s": rate,
                        "median_trainer_log_points_per_s": median([t["trainer_log_points_per_s"] for t in trials]),
                        "median_agent_cpu_ns_per_point": median([t["agent_cpu_ns_per_point"] for t in trials]),
                        "median_agent_cpu_share": median([t["agent_cpu_s"] / t["seconds"] for t in trials]),
                        "lossless": all(t["lossless"] for t in trials), "trials": trials})

    rows = [[s["label"], f"{s['trials'][0]['points'] / 1e6:g} M", f"{s['median_points_per_s'] / 1e6:.2f}",
             f"{s['median_trainer_log_points_per_s'] / 1e6:.2f}", f"{s['median_agent_cpu_ns_per_point']:.0f}",
             f"{s['median_agent_cpu_share'] * 100:.0f}%", f"{s['median_points_per_s'] / TARGET:.2f}x",
             "yes" if s["lossless"] else "NO"] for s in summary]
    print(f"\nTrainer -> agent -> reader, end to end (median of {args.trials} trials; "
          f"target {TARGET / 1e6:g} M points/s per agent)\n")
    print(table(["case", "points", "M points/s", "trainer-side M pts/s", "agent CPU ns/pt", "agent CPU",
                 "vs target", "lossless"], rows))
    data: dict[str, Any] = {"target_points_per_s": TARGET, "cases": summary}
    if args.profile:
        t = trial(CASES[0], args.points, args.trials, profile=True)
        data["profiled_trial"] = t
        data["agent_profile"] = profile_report(str(RESULTS / "agent.prof"))
        print(f"\nagent under cProfile ({CASES[0].label}, {t['points_per_s'] / 1e6:.2f} M points/s with "
              f"profiling overhead), top functions by own time:\n{data['agent_profile']}")
    path = write_result("bench_throughput", data)
    print(f"results: {path}")
    return data


def passed(data: dict[str, Any]) -> bool:
    return all(c["lossless"] for c in data["cases"])


if __name__ == "__main__":
    raise SystemExit(0 if passed(main()) else 1)
