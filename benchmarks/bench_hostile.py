"""Ingest under hostile frames: what a stream of frames just under the agent's bounds costs a trainer.

One real agent per trial; a trainer (this process) logs 10 scalars per step as fast as it can for
``--seconds`` under attack, then flushes once the attack is over; in the ``hostile`` case a second socket with the owner's keys sends
``--frames`` frames/s meanwhile, cycling through 8 MiB-class frames of empty maps, nested lists,
two-character strings and 600-deep configs; in each ``N connections`` case one process of the owner
opens N connections that send those frames as fast as the agent takes them (ZeroMQ's queues are per
connection: this is what the agent's connection cap and short queues bound).  Reported: points/s
stored under attack (acknowledged within ``--seconds``; after the flush every step is checked),
agent peak RSS (VmHWM) and agent CPU under attack, as medians, each case against quiet; for the
connection cases, the bound on what ZeroMQ may hold of their frames, which their peak RSS may exceed
the hostile case's by (that case's growth over quiet is decoding one frame, and one connection).

    python benchmarks/bench_hostile.py [--seconds 10] [--trials 3] [--frames 10] [--connections 16,64]
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
from pilothouse.node.limits import CONNECTION_BYTES, LOCAL_CONNECTIONS
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
    """One socket of the owner sending ``per_s`` frames a second (0: as fast as the agent takes them)."""
    sock = zmq.Context.instance().socket(zmq.DEALER)
    sock.setsockopt(zmq.LINGER, 0)
    sock.setsockopt(zmq.SNDHWM, 4)
    ring = local_keyring()
    secure_client(sock, ring.keypair("client"), ring.public("agent"))
    sock.connect(url)
    sent = 0
    try:
        while not stop.wait(1 / per_s if per_s else 0):
            try:
                sock.send(frames[sent % len(frames)], zmq.NOBLOCK, copy=False)
                sent += 1
            except zmq.Again:
                stop.wait(0.002)  # the agent is not taking them as fast: its inbound queue is full
            while sock.poll(0):
                sock.recv()  # its errors
    finally:
        sock.close(linger=0)
    return sent


def trial(connections: int, seconds: float, per_s: float, frames: list[bytes]) -> dict[str, Any]:
    """``connections`` attacking sockets (0: quiet), each sending ``per_s`` frames/s (0: flat out)."""
    with AgentProcess() as agent:
        assert agent.proc is not None
        stop = threading.Event()
        sent: list[int] = []
        attackers = [threading.Thread(target=lambda: sent.append(attack(agent.url, frames, per_s, stop)))
                     for _ in range(connections)]
        run = ph.init(project="bench", name=case_name(connections, per_s), agent=agent.url)
        cpu0 = agent.cpu_seconds()
        for attacker in attackers:
            attacker.start()
        t0 = time.perf_counter()
        step = 0
        while time.perf_counter() - t0 < seconds:
            for _ in range(100):
                run.log({m: float(step) for m in METRICS}, step=step)
                step += 1
            time.sleep(0.001)  # the trainer's own work; lets the outbox thread run
        stored_meanwhile = run.stats["acked_seq"]  # records acknowledged (committed) under attack
        stop.set()
        for attacker in attackers:
            attacker.join()
        cpu = agent.cpu_seconds() - cpu0
        flushed = run.flush(120)  # the rest, once the attack is over: nothing may be lost
        run.finish(timeout=10)
        with Client(agent.url, timeout=30) as client:
            stored = client.series(run.id, "m9")[0]
        return {"case": case_name(connections, per_s), "connections": connections, "steps": step,
                "lossless": flushed and stored.tolist() == list(range(step)),
                "points_per_s": stored_meanwhile * len(METRICS) / seconds, "frames_sent": sum(sent),
                "peak_rss_mb": peak_rss_mb(agent.proc.pid), "agent_cpu_s": cpu}


def case_name(connections: int, per_s: float) -> str:
    if not connections:
        return "quiet"
    return "hostile" if per_s else f"{connections} connections"


def bound_mb(connections: int) -> float:
    """The most ZeroMQ may hold of these connections' frames: the agent admits LOCAL_CONNECTIONS of them."""
    return min(connections, LOCAL_CONNECTIONS) * CONNECTION_BYTES / (1 << 20)


def main(argv: list[str] | None = None) -> dict[str, Any]:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--seconds", type=float, default=10)
    p.add_argument("--trials", type=int, default=3)
    p.add_argument("--frames", type=float, default=10, help="hostile frames per second")
    p.add_argument("--connections", default="16,64",
                   help="comma-separated: connections of one process sending flat out, one case each")
    args = p.parse_args(argv)
    frames = [zmq.Frame(f) for f in hostile_frames()]
    cases = [(0, 0.0), (1, args.frames)] + [(int(n), 0.0) for n in args.connections.split(",") if n]
    trials = [trial(n, args.seconds, per_s, frames) for _ in range(args.trials) for n, per_s in cases]
    for t in trials:
        print(f"{t['case']}: {t['points_per_s'] / 1e6:.2f} M points/s, peak RSS {t['peak_rss_mb']:.0f} MB, "
              f"{t['frames_sent']} frames, lossless={t['lossless']}", flush=True)
    summary = {}
    for n, per_s in cases:
        mine = [t for t in trials if t["case"] == case_name(n, per_s)]
        summary[case_name(n, per_s)] = {k: median([t[k] for t in mine])
                                        for k in ("points_per_s", "peak_rss_mb", "agent_cpu_s", "frames_sent")}
        summary[case_name(n, per_s)]["inbound_bound_mb"] = bound_mb(n) if n and not per_s else None
    q = summary["quiet"]
    print(f"\nmedians of {args.trials} trials; hostile: {args.frames:g} frames/s of up to "
          f"{MAX_INBOUND_BYTES >> 20} MiB from one socket; N connections: one process, each connection flat out "
          f"(the agent admits {LOCAL_CONNECTIONS}, each holds at most {CONNECTION_BYTES >> 20} MiB)\n")
    print(table(["case", "M points/s stored", "vs quiet", "agent peak RSS MB", "over quiet MB", "inbound bound MB",
                 "agent CPU s", "frames sent"],
                [[name, f"{s['points_per_s'] / 1e6:.2f}", f"{s['points_per_s'] / q['points_per_s']:.2f}x",
                  f"{s['peak_rss_mb']:.0f}", f"{s['peak_rss_mb'] - q['peak_rss_mb']:.0f}",
                  "" if s["inbound_bound_mb"] is None else f"{s['inbound_bound_mb']:.0f}",
                  f"{s['agent_cpu_s']:.1f}", f"{s['frames_sent']:.0f}"] for name, s in summary.items()]))
    data = {"summary": summary, "trials": trials, "lossless": all(t["lossless"] for t in trials),
            "within_bound": all(s["peak_rss_mb"] - summary["hostile"]["peak_rss_mb"] <= s["inbound_bound_mb"]
                                for s in summary.values() if s["inbound_bound_mb"] is not None)}
    print(f"results: {write_result('bench_hostile', data)}")
    return data


def passed(data: dict[str, Any]) -> bool:
    return bool(data["lossless"] and data["within_bound"])


if __name__ == "__main__":
    raise SystemExit(0 if passed(main()) else 1)
