"""Ingest under hostile frames: what a stream of frames just under the agent's bounds costs a trainer.

One real agent per trial; a trainer (this process) logs 10 scalars per step as fast as it can for
``--seconds`` and then flushes; in the ``hostile`` case a second socket with the owner's keys sends
``--frames`` frames/s meanwhile, cycling through 8 MiB-class frames of empty maps, nested lists,
two-character strings and 600-deep configs.  Reported: stored points/s (every step checked),
agent peak RSS (VmHWM) and agent CPU, quiet vs hostile, as medians and ratios.

    python benchmarks/bench_hostile.py [--seconds 10] [--trials 3] [--frames 10]
"""

from __future__ import annotations

import argparse
import threading
import time
from pathlib import Path
from typing import Any

import msgpack
import zmq
from _common import AgentProcess, median, table, write_result

import pilothouse as ph
from pilothouse.client import Client
from pilothouse.security import local_keyring, secure_client
from pilothouse.wire.messages import MAX_INBOUND_BYTES

METRICS = [f"m{i}" for i in range(10)]


def hostile_frames() -> list[bytes]:
    n = MAX_INBOUND_BYTES - 4096
    deep: Any = 1
    for _ in range(600):
        deep = [deep]
    return [msgpack.packb({"t": "hb", "x": [{}] * n}), msgpack.packb({"t": "rec", "x": [[[]] * 1000] * (n // 1003)}),
            msgpack.packb({"t": "rec", "x": ["ab"] * (n // 3)}),
            msgpack.packb({"t": "hello", "run": "deep", "rank": 0, "config": {"x": deep}})]


def peak_rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def attack(url: str, frames: list[bytes], per_s: float, stop: threading.Event) -> int:
    sock = zmq.Context.instance().socket(zmq.DEALER)
    sock.setsockopt(zmq.LINGER, 0)
    sock.setsockopt(zmq.SNDHWM, 4)
    ring = local_keyring()
    secure_client(sock, ring.keypair("client"), ring.public("agent"))
    sock.connect(url)
    sent = 0
    try:
        while not stop.wait(1 / per_s):
            try:
                sock.send(frames[sent % len(frames)], zmq.NOBLOCK)
                sent += 1
            except zmq.Again:
                pass  # the agent is not taking them as fast: its inbound queue is full
            while sock.poll(0):
                sock.recv()  # its errors
    finally:
        sock.close(linger=0)
    return sent


def trial(hostile: bool, seconds: float, per_s: float, frames: list[bytes]) -> dict[str, Any]:
    with AgentProcess() as agent:
        assert agent.proc is not None
        stop = threading.Event()
        result: dict[str, int] = {}
        attacker = threading.Thread(target=lambda: result.update(sent=attack(agent.url, frames, per_s, stop)))
        run = ph.init(project="bench", name="hostile" if hostile else "quiet", agent=agent.url)
        cpu0 = agent.cpu_seconds()
        if hostile:
            attacker.start()
        t0 = time.perf_counter()
        step = 0
        while time.perf_counter() - t0 < seconds:
            for _ in range(100):
                run.log({m: float(step) for m in METRICS}, step=step)
                step += 1
            time.sleep(0.001)  # the trainer's own work; lets the outbox thread run
        flushed = run.flush(120)
        elapsed = time.perf_counter() - t0
        stop.set()
        if hostile:
            attacker.join()
        run.finish(timeout=10)
        with Client(agent.url, timeout=30) as client:
            stored = client.series(run.id, "m9")[0]
        return {"hostile": hostile, "steps": step, "lossless": flushed and stored.tolist() == list(range(step)),
                "points_per_s": step * len(METRICS) / elapsed, "frames_sent": result.get("sent", 0),
                "peak_rss_mb": peak_rss_mb(agent.proc.pid), "agent_cpu_s": agent.cpu_seconds() - cpu0}


def main(argv: list[str] | None = None) -> dict[str, Any]:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--seconds", type=float, default=10)
    p.add_argument("--trials", type=int, default=3)
    p.add_argument("--frames", type=float, default=10, help="hostile frames per second")
    args = p.parse_args(argv)
    frames = hostile_frames()
    trials = [trial(hostile, args.seconds, args.frames, frames) for _ in range(args.trials) for hostile in (False, True)]
    for t in trials:
        print(f"{'hostile' if t['hostile'] else 'quiet'}: {t['points_per_s'] / 1e6:.2f} M points/s, "
              f"peak RSS {t['peak_rss_mb']:.0f} MB, {t['frames_sent']} frames, lossless={t['lossless']}", flush=True)
    summary = {}
    for hostile in (False, True):
        mine = [t for t in trials if t["hostile"] == hostile]
        summary["hostile" if hostile else "quiet"] = {k: median([t[k] for t in mine])
                                                      for k in ("points_per_s", "peak_rss_mb", "agent_cpu_s",
                                                                "frames_sent")}
    q, h = summary["quiet"], summary["hostile"]
    print(f"\nmedians of {args.trials} trials, {args.frames:g} hostile frames/s of up to "
          f"{MAX_INBOUND_BYTES >> 20} MiB\n")
    print(table(["case", "M points/s stored", "agent peak RSS MB", "agent CPU s", "frames sent"],
                [[name, f"{s['points_per_s'] / 1e6:.2f}", f"{s['peak_rss_mb']:.0f}", f"{s['agent_cpu_s']:.1f}",
                  f"{s['frames_sent']:.0f}"] for name, s in summary.items()]))
    print(f"\nhostile / quiet: ingest {h['points_per_s'] / q['points_per_s']:.2f}x, "
          f"peak RSS {h['peak_rss_mb'] / q['peak_rss_mb']:.2f}x")
    data = {"summary": summary, "trials": trials, "lossless": all(t["lossless"] for t in trials)}
    print(f"results: {write_result('bench_hostile', data)}")
    return data


def passed(data: dict[str, Any]) -> bool:
    return bool(data["lossless"])


if __name__ == "__main__":
    raise SystemExit(0 if passed(main()) else 1)
