"""What steering costs: ``run.sync()`` with nothing pending, and how fast a command lands.

1. ``run.sync(step)`` on the training thread when no command is pending (the cost every
   step pays), against an empty Python call: median ns per call over several trials.
2. Pause-to-applied latency: a trainer process runs a loop of fixed step time calling
   ``run.sync``; this process sends ``pause`` then ``resume`` through the agent and times
   each from the client's call to the trainer's acknowledgement arriving back (the CLI's
   wait).  Half a step time is the expected wait for the next step boundary.
3. ``PilothouseCallback`` in a real TRL GRPOTrainer (examples/trl_grpo.py) with nothing pending:
   its per-step events (``on_step_end``, and ``on_log`` with the 25 numbers TRL logs each step)
   against transformers' own ``TensorBoardCallback`` doing the same logging, and against the
   median time of one step of that tiny GRPO run on this CPU.

    python benchmarks/bench_sync.py [--trials 7] [--commands 20]
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import textwrap
import time

from _common import ROOT, AgentProcess, closed_port_url, median, percentile, table, write_result

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


def callback_cost(trials: int, events: int = 2000) -> dict:
    """µs per training step of each callback's per-step events, and the tiny GRPO run's step time."""
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    sys.path.insert(0, str(ROOT / "examples"))
    from torch.utils.tensorboard import SummaryWriter
    from transformers import TrainerCallback
    from transformers.integrations import TensorBoardCallback
    from trl_grpo import make_trainer

    from pilothouse.hf import PilothouseCallback

    class StepTimes(TrainerCallback):
        def __init__(self) -> None:
            self.times: list[float] = []

        def on_step_begin(self, args, state, control, **kwargs):
            self.start = time.perf_counter()

        def on_step_end(self, args, state, control, **kwargs):
            self.times.append(time.perf_counter() - self.start)

    out = tempfile.mkdtemp(prefix="bench-sync-")
    timer = StepTimes()
    ours = PilothouseCallback(ph.init(project="bench", name="callback", agent=closed_port_url()))
    board = TensorBoardCallback(SummaryWriter(os.path.join(out, "tb")))
    trainer = make_trainer(30, out, callbacks=[timer, ours, board])
    trainer.train()  # attaches both callbacks for real
    logs = {k: float(v) for k, v in trainer.state.log_history[-2].items() if isinstance(v, (int, float))}
    args, state, control = trainer.args, trainer.state, trainer.control
    board.tb_writer = SummaryWriter(os.path.join(out, "tb-bench"))  # train() closed the first one

    def steps(callback) -> float:
        per_trial = []
        for _ in range(trials):
            t0 = time.perf_counter_ns()
            for _ in range(events):
                callback.on_step_end(args, state, control)
                callback.on_log(args, state, control, logs=logs)
            per_trial.append((time.perf_counter_ns() - t0) / events / 1000)
        return median(per_trial)

    result = {"PilothouseCallback": steps(ours), "TensorBoardCallback": steps(board),
              "grpo_step_ms": median(timer.times[5:]) * 1000, "metrics_per_log": len(logs)}
    board.tb_writer.close()
    ours.run.finish(timeout=0.1)
    return result


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
    try:
        import trl  # noqa: F401
    except ImportError:
        print("\ntrl is not installed (pip install -e '.[trl]'): the callback's cost is not measured")
    else:
        cb = callback_cost(args.trials)
        step_us = cb["grpo_step_ms"] * 1000
        print(f"\nper training step with nothing pending: on_step_end + on_log of {cb['metrics_per_log']} numbers, "
              f"median of {args.trials} trials; one step of the tiny GRPO run: {cb['grpo_step_ms']:.1f} ms\n")
        print(table(["callback", "us per step", "share of a tiny GRPO step"],
                    [[k, f"{cb[k]:.1f}", f"{cb[k] / step_us:.3%}"]
                     for k in ("PilothouseCallback", "TensorBoardCallback")]))
        ratio = cb["TensorBoardCallback"] / cb["PilothouseCallback"]
        print(f"\nTensorBoardCallback / PilothouseCallback: {ratio:.1f}x")
        data["callback"] = cb
    print(f"results: {write_result('bench_sync', data)}")
    return data


def passed(data: dict) -> bool:
    return data["sync_ns"]["run.sync(step), nothing pending"] <= 2000


if __name__ == "__main__":
    raise SystemExit(0 if passed(main()) else 1)
