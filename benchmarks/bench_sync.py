"""What steering costs: ``run.sync()`` with nothing pending, and how fast a command lands.

1. ``run.sync(step)`` on the training thread when no command is pending (the cost every
   step pays), against an empty Python call: median ns per call over several trials.
2. Pause-to-applied latency: a trainer process runs a loop of fixed step time calling
   ``run.sync``; this process sends ``pause`` then ``resume`` through the agent and times
   each from the client's call to the trainer's acknowledgement arriving back (the CLI's
   wait).  Half a step time is the expected wait for the next step boundary.

    python benchmarks/bench_sync.py [--trials 7] [--commands 20]
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import textwrap
import time

from _common import AgentProcess, closed_port_url, median, percentile, table, write_result

import pilothouse as ph
from pilothouse.client import Client

CALLS = 200_000
TRAINER = textwrap.dedent("""
    import sys, time
    import pilothouse as ph
    run = ph.init(project="bench", name="sync", agent=sys.argv[1], config={"lr": 1e-3})
    print(run.id, flush=True)
    delay = float(sys.argv[2])
    step = 0
    while not run.sync(step).stop:
        run.log({"loss": 1.0}, step=step)
        time.sleep(delay)
        step += 1
    run.finish()
""")


def sync_cost(trials: int) -> dict:
    run = ph.init(project="bench", name="sync-idle", agent=closed_port_url())

    def empty(step: int) -> None:
        return None

    rows = {}
    for name, call in (("run.sync(step), nothing pending", run.sync), ("empty call (floor)", empty)):
        per_trial = []
        for _ in range(trials):
            t0 = time.perf_counter_ns()
            for step in range(CALLS):
                call(step)
            per_trial.append((time.perf_counter_ns() - t0) / CALLS)
        rows[name] = median(per_trial)
    run.finish(timeout=0.1)
    return rows


def command_latency(step_s: float, commands: int) -> list[float]:
    with AgentProcess() as ag:
        trainer = subprocess.Popen([sys.executable, "-c", TRAINER, ag.url, str(step_s)],
                                   stdout=subprocess.PIPE, text=True)
        try:
            run_id = trainer.stdout.readline().strip()
            latencies = []
            with Client(ag.url) as client:
                while not any(r["id"] == run_id and r["last_step"] for r in client.runs()):
                    time.sleep(0.05)
                for i in range(commands):
                    t0 = time.perf_counter()
                    row = client.command(run_id, "pause" if i % 2 == 0 else "resume")
                    latencies.append((time.perf_counter() - t0) * 1000)
                    assert row["state"] == "applied", row
                client.command(run_id, "stop")
            trainer.wait(timeout=30)
            return latencies
        finally:
            if trainer.poll() is None:
                trainer.kill()


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=7)
    parser.add_argument("--commands", type=int, default=20)
    args = parser.parse_args(argv)
    cost = sync_cost(args.trials)
    print(f"\nrun.sync() with nothing pending, median of {args.trials} trials x {CALLS} calls (target <= 2 us)\n")
    print(table(["call", "ns per call"], [[k, f"{v:.0f}"] for k, v in cost.items()]))
    latency = {}
    for step_ms in (0, 10, 100):
        ms = sorted(command_latency(step_ms / 1000, args.commands))
        latency[f"{step_ms} ms steps"] = {"median_ms": median(ms), "p90_ms": percentile(ms, 90), "all_ms": ms}
    print(f"\npause/resume: client call -> trainer's acknowledgement back, {args.commands} commands\n")
    print(table(["trainer step time", "median ms", "p90 ms"],
                [[k, f"{v['median_ms']:.1f}", f"{v['p90_ms']:.1f}"] for k, v in latency.items()]))
    data = {"sync_ns": cost, "command_latency": latency}
    print(f"results: {write_result('bench_sync', data)}")
    return data


def passed(data: dict) -> bool:
    return data["sync_ns"]["run.sync(step), nothing pending"] <= 2000


if __name__ == "__main__":
    raise SystemExit(0 if passed(main()) else 1)
