"""What logging 10 scalars per step costs the training thread, pilothouse against its peers.

Every peer logs the same dicts in one run; each ``log`` call is timed alone with
``perf_counter_ns`` (the dict is built outside the timed region).  Per trial we keep the
median, p99 and mean of the per-step times and quote the median over trials: the
median is the price of a typical step, the worst call and the mean also charge the stalls
that a background thread (pilothouse's outbox, TensorBoard's writer) causes by holding
the GIL, and "CPU" is the process's CPU time per step, all threads, until the trial's data
is delivered (pilothouse: acknowledged by the agent; TensorBoard: flushed).  Trials run
round robin over the peers and ratios to the raw pyzmq PUSH peer are taken per round, so
the shared machine's slow spells hit both sides of a ratio.

    python benchmarks/bench_log.py [--steps 20000] [--trials 7] [--budget 1.0]
"""

from __future__ import annotations

import argparse
import importlib.util
import logging
import multiprocessing
import multiprocessing.connection
import os
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, Protocol

import msgpack
import zmq
from _common import AgentProcess, closed_port_url, free_port, median, percentile, table, write_result

import pilothouse as ph
from pilothouse.client import Client

METRICS = ["loss", "lr", "grad_norm", "param_norm", "tokens_per_s", "accuracy", "kl", "entropy",
           "reward_mean", "reward_std"]
WARMUP_STEPS = 2_000
WARMUP_SECONDS = 0.5
MIN_STEPS = 500


def metrics_at(step: int) -> dict[str, float]:
    return {name: step * 1e-3 + j for j, name in enumerate(METRICS)}


class Peer(Protocol):
    name: str
    short: str

    def log(self, metrics: dict[str, float], step: int) -> None: ...

    def close(self, logged: int) -> dict[str, Any]:
        """Shut down and say what of the ``logged`` steps was delivered (the JSON 'delivery' field)."""


class Noop:
    """The timer's own floor: what an empty call costs with this measuring loop."""

    name = "(timer floor: empty call)"
    short = "floor"

    def log(self, metrics: dict[str, float], step: int) -> None:
        pass

    def close(self, logged: int) -> dict[str, Any]:
        return {}


class Pilothouse:
    """``run.log`` with a real agent subprocess, and the proof that everything arrived."""

    name = "pilothouse run.log (agent running)"
    short = "pilothouse"

    def __init__(self) -> None:
        self.agent = AgentProcess().start()
        self.run = ph.init(project="bench", name="bench-log", agent=self.agent.url)
        self.log = self.run.log
        self.flush_s: list[float] = []
        self.early_flushes = 0

    def settle(self, logged: int) -> None:
        """After a trial, wait for delivery (untimed) so the outbox does not tax the next peer's trial.

        Also checks ``Run.flush``: True must mean that everything logged so far is acknowledged.
        """
        t0 = time.perf_counter()
        flushed = self.run.flush(timeout=60)
        self.flush_s.append(time.perf_counter() - t0)
        if flushed and self.run.stats["acked_seq"] < logged:
            self.early_flushes += 1

    def close(self, logged: int) -> dict[str, Any]:
        deadline = time.monotonic() + 60
        while self.run.stats["acked_seq"] < logged and time.monotonic() < deadline:
            time.sleep(0.01)
        stats = self.run.stats
        with Client(self.agent.url, timeout=30) as c:
            stored = sum(e.n for page in c.history(self.run.id, ["m"]) for e in page.entries)
        finished = self.run.finish(timeout=30)
        self.agent.stop()
        return {"logged_records": logged, "logged_points": logged * len(METRICS),
                "acked_records": stats["acked_seq"], "stored_points": stored,
                "dropped_points": stats["dropped_points"], "finished": finished,
                "median_flush_after_trial_s": round(median(self.flush_s), 3),
                "flush_returned_early": self.early_flushes,
                "ok": stats["acked_seq"] == logged and stored == logged * len(METRICS)}


class PilothouseNoAgent:
    """``run.log`` while nothing listens: records pile up in the bounded buffer, log() must not care."""

    name = "pilothouse run.log (no agent)"
    short = "no-agent"

    def __init__(self) -> None:
        self.run = ph.init(project="bench", name="bench-log-noagent", agent=closed_port_url())
        self.log = self.run.log

    def close(self, logged: int) -> dict[str, Any]:
        deadline = time.monotonic() + 10  # let the I/O thread take the last records into its buffer
        while self.run.stats["buffered_records"] < logged and time.monotonic() < deadline:
            time.sleep(0.01)
        stats = self.run.stats
        quiet = logging.getLogger("pilothouse")
        level = quiet.level
        quiet.setLevel(logging.ERROR)  # "finished without the agent's confirmation" is the point here
        self.run.finish(timeout=0.2)
        quiet.setLevel(level)
        return {"logged_records": logged, "buffered_records": stats["buffered_records"],
                "buffered_mb": round(stats["buffered_bytes"] / 2**20, 1), "acked_records": stats["acked_seq"],
                "ok": stats["buffered_records"] == logged}


def _pull_sink(url: str, conn: multiprocessing.connection.Connection) -> None:
    """Receive until the empty end marker, then report how many messages came."""
    ctx = zmq.Context()
    sock = ctx.socket(zmq.PULL)
    sock.bind(url)
    conn.send("ready")
    count = 0
    while sock.recv() != b"":
        count += 1
    conn.send(count)
    sock.close(linger=0)
    ctx.term()


class RawZmq:
    """The floor for "ship it to another process": msgpack.packb + a PUSH socket, no buffering logic."""

    name = "raw pyzmq PUSH + msgpack"
    short = "zmq"

    def __init__(self) -> None:
        url = f"tcp://127.0.0.1:{free_port()}"
        spawn = multiprocessing.get_context("spawn")
        self.conn, child = spawn.Pipe()
        self.proc = spawn.Process(target=_pull_sink, args=(url, child), daemon=True)
        self.proc.start()
        if not self.conn.poll(30):
            raise RuntimeError("the PULL sink did not start")
        self.conn.recv()
        self.ctx = zmq.Context()
        self.sock = self.ctx.socket(zmq.PUSH)
        self.sock.connect(url)

    def log(self, metrics: dict[str, float], step: int) -> None:
        self.sock.send(msgpack.packb((step, time.time(), metrics)))

    def close(self, logged: int) -> dict[str, Any]:
        self.sock.send(b"")
        received = self.conn.recv() if self.conn.poll(60) else -1
        self.proc.join(10)
        self.sock.close(linger=0)
        self.ctx.term()
        return {"sent": logged, "received": received, "ok": received == logged}


class TensorBoard:
    """torch.utils.tensorboard: ten ``add_scalar`` calls per step.

    Events go through a queue of ``max_queue`` (10) to a writer thread; without TensorFlow
    installed that thread computes CRC32C in pure Python, so ``add_scalar`` mostly waits for it.
    """

    name = "TensorBoard SummaryWriter.add_scalar x10"
    short = "tensorboard"

    def __init__(self) -> None:
        from torch.utils.tensorboard import SummaryWriter

        self.tmp = tempfile.TemporaryDirectory(prefix="bench-tb-")
        self.writer = SummaryWriter(log_dir=self.tmp.name)

    def log(self, metrics: dict[str, float], step: int) -> None:
        add = self.writer.add_scalar
        for key, value in metrics.items():
            add(key, value, step)

    def settle(self, logged: int) -> None:
        self.writer.flush()

    def close(self, logged: int) -> dict[str, Any]:
        self.writer.close()
        self.tmp.cleanup()
        return {"closed": True}


class Wandb:
    """wandb in offline mode: what a user gets without a server (only if wandb is installed)."""

    name = "wandb offline run.log"
    short = "wandb"

    def __init__(self) -> None:
        import wandb

        self.tmp = tempfile.TemporaryDirectory(prefix="bench-wandb-")
        self.run = wandb.init(project="bench", mode="offline", dir=self.tmp.name)
        self.log = self.run.log

    def close(self, logged: int) -> dict[str, Any]:
        self.run.finish()
        self.tmp.cleanup()
        return {"finished": True}


class Mlflow:
    """MLflow's default synchronous ``log_metrics`` into a local file store (only if installed)."""

    name = "MLflow log_metrics (local file store)"
    short = "mlflow"

    def __init__(self) -> None:
        import mlflow

        os.environ.setdefault("MLFLOW_ALLOW_FILE_STORE", "true")  # MLflow 3 keeps the file store behind this opt-in
        self.tmp = tempfile.TemporaryDirectory(prefix="bench-mlflow-")
        mlflow.set_tracking_uri(Path(self.tmp.name).as_uri())
        mlflow.set_experiment("bench")  # a new file store has no default experiment
        self.mlflow = mlflow
        mlflow.start_run()

    def log(self, metrics: dict[str, float], step: int) -> None:
        self.mlflow.log_metrics(metrics, step=step)

    def close(self, logged: int) -> dict[str, Any]:
        self.mlflow.end_run()
        self.tmp.cleanup()
        return {"ended": True}


PEERS: list[tuple[type, str | None]] = [  # (peer, module that must be importable)
    (Pilothouse, None), (PilothouseNoAgent, None), (RawZmq, None), (TensorBoard, "torch.utils.tensorboard"),
    (Wandb, "wandb"), (Mlflow, "mlflow"), (Noop, None),
]


def time_steps(log: Callable[[dict[str, float], int], None], first: int, steps: int) -> list[int]:
    """Nanoseconds of each ``log`` call, steps first .. first+steps-1."""
    perf = time.perf_counter_ns
    samples = [0] * steps
    for i in range(steps):
        metrics = metrics_at(first + i)
        t0 = perf()
        log(metrics, first + i)
        samples[i] = perf() - t0
    return samples


def warm_up(peer: Peer) -> int:
    """Run up to WARMUP_STEPS steps (WARMUP_SECONDS at most); returns the steps done."""
    t0 = time.perf_counter()
    step = 0
    while step < WARMUP_STEPS and time.perf_counter() - t0 < WARMUP_SECONDS:
        time_steps(peer.log, step, 100)
        step += 100
    return step


class Bench:
    """One peer under test: its warm-up, trial size and per-trial statistics."""

    def __init__(self, peer: Peer, steps: int, budget_s: float):
        t0 = time.perf_counter()
        self.peer = peer
        self.step = warm_up(peer)
        per_step = (time.perf_counter() - t0) / self.step
        self.n = max(MIN_STEPS, min(steps, int(budget_s / per_step)))
        self.medians: list[float] = []
        self.p99s: list[float] = []
        self.means: list[float] = []
        self.cpus: list[float] = []
        self.worsts: list[float] = []

    def trial(self) -> None:
        cpu0 = time.process_time_ns()
        samples = sorted(time_steps(self.peer.log, self.step, self.n))
        self.step += self.n
        settle = getattr(self.peer, "settle", None)
        if settle is not None:
            settle(self.step)
        self.cpus.append((time.process_time_ns() - cpu0) / self.n / 1e3)
        self.medians.append(percentile(samples, 50) / 1e3)
        self.p99s.append(percentile(samples, 99) / 1e3)
        self.means.append(sum(samples) / self.n / 1e3)
        self.worsts.append(samples[-1] / 1e3)

    def summary(self) -> dict[str, Any]:
        return {"steps_per_trial": self.n, "trials": len(self.medians), "logged_steps": self.step,
                "trial_medians_us": [round(m, 3) for m in self.medians], "median_us": median(self.medians),
                "p99_us": median(self.p99s), "mean_us": median(self.means), "cpu_us": median(self.cpus),
                "worst_us": median(self.worsts), "trial_worsts_us": [round(w, 1) for w in self.worsts]}


def paired_ratio(mine: list[float], reference: list[float]) -> float:
    """Median of the per-round ratios: a slow spell of the shared machine slows both sides of one."""
    return round(median([m / ref for m, ref in zip(mine, reference)]), 2)


def main(argv: list[str] | None = None) -> dict[str, Any]:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--steps", type=int, default=20_000, help="steps per trial (fewer for slow peers)")
    p.add_argument("--trials", type=int, default=7)
    p.add_argument("--budget", type=float, default=1.0, help="seconds one trial may take; caps slow peers' steps")
    args = p.parse_args(argv)

    benches: list[Bench] = []
    skipped: list[str] = []
    for cls, module in PEERS:
        if module is not None and importlib.util.find_spec(module.split(".")[0]) is None:
            skipped.append(cls.name)
            print(f"{cls.name}: skipped (not installed)", flush=True)
            continue
        benches.append(Bench(cls(), args.steps, args.budget))
    for trial in range(args.trials):  # round robin, so a noisy spell on the machine hits every peer
        for bench in benches:
            bench.trial()
        print(f"trial {trial + 1}/{args.trials}: " + ", ".join(
            f"{b.peer.short} {b.medians[-1]:.2f}" for b in benches) + " us", flush=True)

    results = [{"peer": b.peer.name, "status": "ok", **b.summary(), "delivery": b.peer.close(b.step)}
               for b in benches]
    push = next(b for b in benches if isinstance(b.peer, RawZmq))
    rows = []
    for bench, r in zip(benches, results):
        ratios = {"median": (bench.medians, push.medians), "cpu": (bench.cpus, push.cpus),
                  "worst": (bench.worsts, push.worsts)}
        r["vs_raw_push"] = {what: paired_ratio(mine, ref) for what, (mine, ref) in ratios.items()}
        ok = r["delivery"].get("ok")
        shown = ["-"] * 3 if bench is push or isinstance(bench.peer, Noop) else \
            [f"{r['vs_raw_push'][what]:.2f}x" for what in ratios]
        rows.append([r["peer"], f"{r['median_us']:.2f}", f"{r['p99_us']:.2f}", f"{r['worst_us']:.0f}",
                     f"{r['mean_us']:.2f}", f"{r['cpu_us']:.2f}", r["steps_per_trial"], *shown,
                     "" if ok is None else "yes" if ok else "NO"])
    rows += [[name, *[""] * 9, "skipped (not installed)"] for name in skipped]
    results += [{"peer": name, "status": "skipped (not installed)"} for name in skipped]

    print(f"\nLogging {len(METRICS)} scalars per step on the training thread: microseconds per step, "
          f"median over {args.trials} trials of the per-trial statistic.  worst call: the slowest single "
          f"call of a trial.  CPU us/step: the whole process's CPU time (all threads, dict building "
          f"included, see the floor row) per step until delivered.  'vs PUSH': median of the per-round "
          f"ratios to the raw pyzmq PUSH peer (below 1: cheaper).\n")
    print(table(["peer", "median us", "p99 us", "worst call us", "mean us", "CPU us/step", "steps/trial",
                 "median vs PUSH", "CPU vs PUSH", "worst vs PUSH", "delivered"], rows))
    d = results[0]["delivery"]
    print(f"\npilothouse delivery: {d['logged_records']} records logged, {d['acked_records']} acked, "
          f"{d['stored_points']}/{d['logged_points']} points stored by the agent; after each trial "
          f"flush() took {d['median_flush_after_trial_s']} s (median) and returned True before everything "
          f"was acknowledged {d['flush_returned_early']} time(s) of {args.trials}")
    path = write_result("bench_log", {"metrics_per_step": len(METRICS), "trials": args.trials, "results": results})
    print(f"results: {path}")
    return {"results": results}


def passed(data: dict[str, Any]) -> bool:
    """Every peer that can tell delivered everything it logged."""
    return all(r["delivery"].get("ok", True) for r in data["results"] if "delivery" in r)


if __name__ == "__main__":
    raise SystemExit(0 if passed(main()) else 1)
