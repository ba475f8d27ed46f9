"""What logging 10 scalars per step costs the training thread, pilothouse against its peers.

Every peer logs the same dicts in one run; each ``log`` call is timed alone with
``perf_counter_ns`` (the dict is built outside the timed region).  Per trial we keep the
median, p99 and mean of the per-step times and quote the median over trials: the
median is the price of a typical step, the mean also charges the stalls that a
background thread (pilothouse's outbox, TensorBoard's writer) causes by holding the GIL.

    python benchmarks/bench_log.py [--steps 20000] [--trials 7] [--budget 2.0]
"""

from __future__ import annotations

import argparse
import importlib.util
import multiprocessing
import multiprocessing.connection
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, Protocol

import msgpack
import zmq

import agent
from agent.client import Client

from _common import AgentProcess, closed_port_url, free_port, median, percentile, table, write_result

METRICS = ["loss", "lr", "grad_norm", "param_norm", "tokens_per_s", "accuracy", "kl", "entropy",
           "reward_mean", "reward_std"]
WARMUP_STEPS = 2_000
WARMUP_SECONDS = 0.5
MIN_STEPS = 500


def metrics_at(step: int) -> dict[str, float]:
    return {name: step * 1e-3 + j for j, name in enumerate(METRICS)}


class Peer(Protocol):
    name: str

    def log(self, metrics: dict[str, float], step: int) -> None: ...

    def close(self) -> dict[str, Any]:
        """Shut down and say what was delivered (the JSON 'delivery' field)."""


class Noop:
    """The timer's own floor: what an empty call costs with this measuring loop."""

    name = "(timer floor: empty call)"

    def log(self, metrics: dict[str, float], step: int) -> None:
        pass

    def close(self) -> dict[str, Any]:
        return {}


class Pilothouse:
    """``run.log`` with a real agent subprocess, and the proof that everything arrived."""

    name = "pilothouse run.log (agent running)"

    def __init__(self) -> None:
        self.agent = AgentProcess().__enter__()
        self.run = agent.init(project="bench", name="bench-log", agent=self.agent.url)
        self.log = self.run.log
        self.logged = 0

    def count(self, steps: int) -> None:
        self.logged += steps

    def close(self) -> dict[str, Any]:
        t0 = time.perf_counter()
        flushed = self.run.flush(timeout=60)
        flush_s = time.perf_counter() - t0
        stats = self.run.stats
        with Client(self.agent.url, timeout=30) as c:
            stored = sum(e.n for page in c.history(self.run.id, ["m"]) for e in page.entries)
        finished = self.run.finish(timeout=30)
        self.agent.__exit__()
        return {"logged_records": self.logged, "logged_points": self.logged * len(METRICS),
                "flush_returned": flushed, "flush_s": round(flush_s, 3), "acked_records": stats["acked_seq"],
                "stored_points": stored, "dropped_points": stats["dropped_points"], "finished": finished,
                "ok": stats["acked_seq"] == self.logged and stored == self.logged * len(METRICS)}


class PilothouseNoAgent:
    """``run.log`` while nothing listens: records pile up in the bounded buffer, log() must not care."""

    name = "pilothouse run.log (no agent)"

    def __init__(self) -> None:
        self.run = agent.init(project="bench", name="bench-log-noagent", agent=closed_port_url())
        self.log = self.run.log
        self.logged = 0

    def count(self, steps: int) -> None:
        self.logged += steps

    def close(self) -> dict[str, Any]:
        time.sleep(0.1)  # let the I/O thread take the last records into its buffer
        stats = self.run.stats
        self.run.finish(timeout=0.2)  # nobody will confirm; this is expected to be False
        return {"logged_records": self.logged, "buffered_records": stats["buffered_records"],
                "buffered_mb": round(stats["buffered_bytes"] / 2**20, 1), "acked_records": stats["acked_seq"],
                "ok": stats["buffered_records"] == self.logged}


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

    def __init__(self) -> None:
        url = f"tcp://127.0.0.1:{free_port()}"
        self.conn, child = multiprocessing.get_context("spawn").Pipe()
        self.proc = multiprocessing.get_context("spawn").Process(target=_pull_sink, args=(url, child), daemon=True)
        self.proc.start()
        if not self.conn.poll(30):
            raise RuntimeError("the PULL sink did not start")
        self.conn.recv()
        self.ctx = zmq.Context()
        self.sock = self.ctx.socket(zmq.PUSH)
        self.sock.connect(url)
        self.sent = 0

    def log(self, metrics: dict[str, float], step: int) -> None:
        self.sock.send(msgpack.packb((step, time.time(), metrics)))
        self.sent += 1

    def close(self) -> dict[str, Any]:
        self.sock.send(b"")
        received = self.conn.recv() if self.conn.poll(60) else -1
        self.proc.join(10)
        self.sock.close(linger=0)
        self.ctx.term()
        return {"sent": self.sent, "received": received, "ok": received == self.sent}


class TensorBoard:
    """torch.utils.tensorboard: ten ``add_scalar`` calls per step, events written by its own thread."""

    name = "TensorBoard SummaryWriter.add_scalar x10"

    def __init__(self) -> None:
        from torch.utils.tensorboard import SummaryWriter

        self.tmp = tempfile.TemporaryDirectory(prefix="bench-tb-")
        self.writer = SummaryWriter(log_dir=self.tmp.name)

    def log(self, metrics: dict[str, float], step: int) -> None:
        add = self.writer.add_scalar
        for key, value in metrics.items():
            add(key, value, step)

    def close(self) -> dict[str, Any]:
        self.writer.close()
        self.tmp.cleanup()
        return {"closed": True}


class Wandb:
    name = "wandb offline run.log"

    def __init__(self) -> None:
        import wandb

        self.tmp = tempfile.TemporaryDirectory(prefix="bench-wandb-")
        self.run = wandb.init(project="bench", mode="offline", dir=self.tmp.name)
        self.log = self.run.log

    def close(self) -> dict[str, Any]:
        self.run.finish()
        self.tmp.cleanup()
        return {"finished": True}


class Mlflow:
    name = "MLflow log_metrics (local file store)"

    def __init__(self) -> None:
        import mlflow

        self.tmp = tempfile.TemporaryDirectory(prefix="bench-mlflow-")
        mlflow.set_tracking_uri(Path(self.tmp.name).as_uri())
        self.mlflow = mlflow
        mlflow.start_run()

    def log(self, metrics: dict[str, float], step: int) -> None:
        self.mlflow.log_metrics(metrics, step=step)

    def close(self) -> dict[str, Any]:
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


def measure(peer: Peer, steps: int, trials: int, budget_s: float) -> dict[str, Any]:
    """Warm up, size the trials to the time budget, then time ``trials`` trials."""
    counted = getattr(peer, "count", lambda n: None)
    t0 = time.perf_counter()
    step = 0
    while step < WARMUP_STEPS and time.perf_counter() - t0 < WARMUP_SECONDS:
        time_steps(peer.log, step, 100)
        step += 100
    counted(step)
    per_step = (time.perf_counter() - t0) / step
    n = max(MIN_STEPS, min(steps, int(budget_s / per_step)))
    medians, p99s, means = [], [], []
    for _ in range(trials):
        samples = sorted(time_steps(peer.log, step, n))
        counted(n)
        step += n
        medians.append(percentile(samples, 50) / 1e3)
        p99s.append(percentile(samples, 99) / 1e3)
        means.append(sum(samples) / n / 1e3)
    return {"steps_per_trial": n, "trials": trials, "trial_medians_us": [round(m, 3) for m in medians],
            "median_us": median(medians), "p99_us": median(p99s), "mean_us": median(means)}


def ratio_text(value: float, reference: float) -> str:
    r = value / reference
    return f"{r:.1f}x slower" if r >= 1.05 else f"{1 / r:.1f}x faster" if r <= 0.95 else "same"


def main(argv: list[str] | None = None) -> dict[str, Any]:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--steps", type=int, default=20_000, help="steps per trial (fewer for slow peers)")
    p.add_argument("--trials", type=int, default=7)
    p.add_argument("--budget", type=float, default=2.0, help="seconds one trial may take; caps slow peers' steps")
    args = p.parse_args(argv)

    results: list[dict[str, Any]] = []
    for cls, module in PEERS:
        if module is not None and importlib.util.find_spec(module.split(".")[0]) is None:
            results.append({"peer": cls.name, "status": "skipped (not installed)"})
            print(f"{cls.name}: skipped (not installed)", flush=True)
            continue
        peer = cls()
        row = {"peer": cls.name, "status": "ok", **measure(peer, args.steps, args.trials, args.budget)}
        row["delivery"] = peer.close()
        results.append(row)
        print(f"{cls.name}: median {row['median_us']:.2f} us/step  delivery {row['delivery']}", flush=True)

    reference = results[0]["median_us"]
    rows = []
    for r in results:
        if r["status"] != "ok":
            rows.append([r["peer"], "", "", "", "", r["status"], ""])
            continue
        r["ratio_vs_pilothouse"] = round(r["median_us"] / reference, 2)
        ok = r["delivery"].get("ok")
        rows.append([r["peer"], f"{r['median_us']:.2f}", f"{r['p99_us']:.2f}", f"{r['mean_us']:.2f}",
                     r["steps_per_trial"], "reference" if r is results[0] else ratio_text(r["median_us"], reference),
                     "" if ok is None else "yes" if ok else "NO"])
    print(f"\nLogging {len(METRICS)} scalars per step on the training thread "
          f"(median of {args.trials} trials; us = microseconds per step)\n")
    print(table(["peer", "median us", "p99 us", "mean us", "steps/trial", "vs pilothouse", "delivered"], rows))
    delivery = results[0]["delivery"]
    print(f"\npilothouse delivery: {delivery['logged_records']} records logged, {delivery['acked_records']} acked, "
          f"{delivery['stored_points']}/{delivery['logged_points']} points stored by the agent; "
          f"flush() took {delivery['flush_s']} s and returned {delivery['flush_returned']}")
    path = write_result("bench_log", {"metrics_per_step": len(METRICS), "results": results})
    print(f"results: {path}")
    return {"results": results}


if __name__ == "__main__":
    main()
