"""Many agents at once on loopback: points/s, end-to-end latency, CPU, memory, zero loss; the loopback
port vs the network listener.

N real agent subprocesses (``python -m pilothouse agent``), each fed by one trainer run logging a
fixed schedule (``--rate`` points/s as ``--metrics`` scalars per step); reader processes
follow every agent with ``Client.follow`` (credit flow, like the app).  Latency is the
reader's receive time minus the record's own ``log()`` wall time (one sample per step).
psutil samples every process once a second.  Each mode gets fresh agents; in ``loopback`` mode the
readers connect to the agent's loopback port (CurveZMQ with the owner's local keys, like trainers),
in ``listener`` mode to its network listener (CurveZMQ, clients from an allow-list); trainers
always use the loopback port, so the difference is the listener's cost on the reading path.  Every step of every run must arrive exactly once, else the exit status is 1.

    python benchmarks/bench_load.py [--agents 32] [--rate 2000] [--seconds 45] [--rounds 2] [--modes loopback,listener] [--quick]
"""

from __future__ import annotations

import argparse
import math
import multiprocessing
import multiprocessing.connection
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import numpy as np
import psutil
from _common import ROOT, free_ports, median, percentile, table, write_result
from _load_roles import READY_SECONDS, STALL_SECONDS, app_main, reader_main, trainer_main

from pilothouse.client import reachable
from pilothouse.security import Keyring

MODES = ("loopback", "listener")


# --- CURVE (agent/security.py) ------------------------------------------------------------

def curve_setup(keys_dir: Path, listen_urls: list[str]) -> None:
    """Agent and client keypairs; the client allowed by the agents; the agents' key trusted per URL."""
    ring = Keyring(keys_dir)
    ring.init()
    ring.allow(ring.public("client"), "bench")
    for url in listen_urls:
        ring.trust(url, ring.public("agent"))


# --- agents -------------------------------------------------------------------------------

class Agents:
    """N ``pilothouse agent`` subprocesses, started together, each with its own port and data dir."""

    def __init__(self, n: int, root: Path, keys_dir: Path | None):
        ports = [f"tcp://127.0.0.1:{port}" for port in free_ports(2 * n if keys_dir else n)]
        self.bind, self.listen = ports[:n], ports[n:]
        self.root = root
        self.keys_dir = keys_dir
        self.procs: list[subprocess.Popen] = []
        self._logs: list[Any] = []

    def start(self) -> None:
        for i, url in enumerate(self.bind):
            data = self.root / f"agent-{i:02d}"
            data.mkdir()
            cmd = [sys.executable, "-m", "pilothouse", "agent", "--bind", url, "--data", str(data), "--log-level", "WARNING"]
            if self.keys_dir is not None:
                cmd += ["--listen", self.listen[i], "--keys", str(self.keys_dir)]
            log = open(data / "agent.log", "wb")
            self._logs.append(log)
            self.procs.append(subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, cwd=ROOT,
                                               stdin=subprocess.DEVNULL))
        deadline = time.monotonic() + READY_SECONDS
        for i, url in enumerate(self.bind):
            while not reachable(url, timeout=0.5):
                if self.procs[i].poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(f"agent {i} did not answer on {url}: {self.log_text(i)}")

    def log_text(self, i: int) -> str:
        return (self.root / f"agent-{i:02d}" / "agent.log").read_text(errors="replace")[-3000:]

    def stop(self) -> None:
        for p in self.procs:
            if p.poll() is None:
                p.terminate()  # SIGTERM: the agent stops cleanly
        for p in self.procs:
            try:
                p.wait(timeout=30)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()
        for log in self._logs:
            log.close()


# --- CPU and memory -----------------------------------------------------------------------

class Sampler:
    """psutil once a second: per process, the last CPU time and the peak RSS seen."""

    def __init__(self, roles: dict[str, list[int]], interval: float = 1.0):
        self.procs = {role: [psutil.Process(pid) for pid in pids] for role, pids in roles.items()}
        self.interval = interval
        self.cpu: dict[int, float] = {}
        self.peak_rss: dict[int, int] = {}
        self.machine_busy: list[float] = []  # share of all cores busy, per interval (everything on the box)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True)

    def sample(self) -> dict[int, float]:
        for procs in self.procs.values():
            for p in procs:
                try:
                    with p.oneshot():
                        t = p.cpu_times()
                        rss = p.memory_info().rss
                except psutil.Error:
                    continue  # exited: keep its last values
                self.cpu[p.pid] = t.user + t.system
                self.peak_rss[p.pid] = max(self.peak_rss.get(p.pid, 0), rss)
        return dict(self.cpu)

    def _loop(self) -> None:
        psutil.cpu_percent()
        while not self._stop.wait(self.interval):
            self.sample()
            self.machine_busy.append(psutil.cpu_percent() / 100)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()


# --- one mode -----------------------------------------------------------------------------

def split(items: list, parts: int) -> list[list]:
    parts = max(1, min(parts, len(items)))
    return [items[k::parts] for k in range(parts)]


def run_mode(mode: str, args: argparse.Namespace) -> dict[str, Any]:
    ctx = multiprocessing.get_context("spawn")
    n_metrics = args.metrics
    steps_per_s = args.rate / n_metrics
    steps = round(args.seconds * steps_per_s)
    children: list[multiprocessing.process.BaseProcess] = []
    pipes: dict[str, list[multiprocessing.connection.Connection]] = {"trainer": [], "reader": [], "app": []}
    with tempfile.TemporaryDirectory(prefix="pilothouse-load-") as tmp:
        root = Path(tmp)
        keys_dir = root / "keys" if mode == "listener" else None
        agents = Agents(args.agents, root, keys_dir)
        try:
            if keys_dir is not None:
                keys_dir.mkdir()
                curve_setup(keys_dir, agents.listen)
            t_setup = time.monotonic()
            agents.start()
            run_ids = [f"load-{mode}-{i:02d}" for i in range(args.agents)]
            read_urls = agents.listen if mode == "listener" else agents.bind

            def spawn(role: str, target: Any, *a: Any) -> None:
                parent, child = ctx.Pipe()
                proc = ctx.Process(target=target, args=(*a, child), daemon=True, name=f"bench-load-{role}")
                proc.start()
                children.append(proc)
                pipes[role].append(parent)

            for group in split(list(zip(read_urls, run_ids)), args.readers):
                spawn("reader", reader_main, group, n_metrics, str(keys_dir) if keys_dir else None)
            if args.app:
                spawn("app", app_main, list(zip(read_urls, run_ids)), n_metrics, str(keys_dir) if keys_dir else None)
            for group in split(list(zip(agents.bind, run_ids)), math.ceil(args.agents / args.runs_per_trainer)):
                spawn("trainer", trainer_main, group, n_metrics, steps_per_s, steps)
            for conn in pipes["reader"] + pipes["app"]:
                msg = conn.recv() if conn.poll(READY_SECONDS + 10) else {"ready": False, "errors": ["timeout"]}
                if not msg["ready"]:
                    raise RuntimeError(f"a reader could not connect: {msg['errors'][:3]}")
            for conn in pipes["trainer"]:
                if not conn.poll(READY_SECONDS) or conn.recv() != "ready":
                    raise RuntimeError("a trainer did not start")
            setup_s = time.monotonic() - t_setup
            roles = {"agent": [p.pid for p in agents.procs],
                     "trainer": [p.pid for p in children if p.name.endswith("trainer")],
                     "reader": [p.pid for p in children if p.name.endswith("reader")],
                     **({"app": [p.pid for p in children if p.name.endswith("app")]} if args.app else {})}
            if args.nice_load:
                lower(args.nice_load, roles["agent"] + roles["trainer"] + roles["reader"])
            sampler = Sampler(roles)
            idle0 = sampler.sample()
            time.sleep(args.idle)
            idle1 = sampler.sample()  # the agents' own cost with nothing to do (host sampler, timers)
            cpu0 = sampler.sample()
            sampler.start()
            spy = profile(args.profile, mode, roles.get("app", []))
            t_go = time.time() + 0.2
            for conn in pipes["trainer"]:
                conn.send(("go", t_go))
            reports = []
            for conn in pipes["trainer"]:
                if not conn.poll(args.seconds + 300):
                    raise RuntimeError("a trainer did not report back")
                reports.append(conn.recv())
            logged = {run: r["steps"] for rep in reports for run, r in rep["runs"].items()}
            for conn in pipes["reader"] + pipes["app"]:
                conn.send(logged)
            reads, app_reads = [], []
            for role, out in (("reader", reads), ("app", app_reads)):
                for conn in pipes[role]:
                    if not conn.poll(STALL_SECONDS + 300):
                        raise RuntimeError(f"a {role} did not report back")
                    out.append(conn.recv())
            sampler.stop()
            cpu1 = sampler.sample()
            if spy is not None:
                spy.send_signal(signal.SIGINT)  # py-spy writes what it sampled and ends
                spy.wait(60)
            for conn in pipes["trainer"] + pipes["reader"] + pipes["app"]:
                conn.send("quit")
            for proc in children:
                proc.join(30)
        finally:
            for conn in pipes["trainer"] + pipes["reader"] + pipes["app"]:
                try:
                    conn.send("quit")
                except (OSError, ValueError):
                    pass
            for proc in children:
                proc.join(5)
                if proc.is_alive():
                    proc.terminate()
                    proc.join(5)
                if proc.is_alive():
                    proc.kill()
                    proc.join()
            agents.stop()
    summary = summarize(mode, args, steps, setup_s, t_go, reports, reads, sampler, roles, idle0, idle1, cpu0, cpu1)
    if app_reads:
        summary["app"] = summarize_app(app_reads[0], args, steps, t_go, reports, summary["roles"]["app"])
        summary["lossless"] = summary["lossless"] and summary["app"]["lossless"]
        summary["problems"] += summary["app"]["problems"]
    return summary


def lower(niceness: int, pids: list[int]) -> None:
    """Run these processes at a lower priority (``--nice-load``), every thread of each (Linux nices
    threads, not processes; threads started later inherit it): the app then gets a core whenever it
    asks, as on a desk whose agents run on other nodes, and what is left of its latency is its own."""
    for pid in pids:
        for thread in psutil.Process(pid).threads():
            os.setpriority(os.PRIO_PROCESS, thread.id, niceness)


def profile(out: str | None, mode: str, pids: list[int]) -> subprocess.Popen | None:
    """py-spy sampling the app's every thread while the load runs (``--profile``), as collapsed stacks
    (one line per stack and its sample count: grep them, or load them in speedscope)."""
    if not out or not pids:
        return None
    Path(out).mkdir(parents=True, exist_ok=True)
    path = Path(out) / f"app-{mode}-{time.strftime('%H%M%S')}.txt"
    print(f"profiling the app (pid {pids[0]}) into {path}", flush=True)
    return subprocess.Popen(["py-spy", "record", "--pid", str(pids[0]), "--format", "raw", "--threads", "--gil",
                             "--rate", "200", "--output", str(path)], stdout=subprocess.DEVNULL)


def summarize_app(read: dict, args: argparse.Namespace, steps: int, t_go: float, reports: list[dict],
                  role: dict[str, Any]) -> dict[str, Any]:
    """The app's share: what reached its UI thread, how late, and its CPU and memory per agent."""
    expected = steps * args.metrics * args.agents
    lat = np.sort(np.frombuffer(read["latencies"], np.float32))
    t0 = min(t_go, *(r["t_first_log"] for r in reports))
    window = max(read["t_last_point"] - t0, 1e-9)
    pct = (lambda q: float(percentile(lat, q)) * 1e3) if len(lat) else (lambda q: float("nan"))
    stages = {}
    pans = np.sort(np.frombuffer(read["pans"], np.float32))
    stages["pans"] = len(pans)
    stages["pan_p50_ms"], stages["pan_p99_ms"] = ((float(percentile(pans, q)) * 1e3 for q in (50, 99))
                                                  if len(pans) else (float("nan"),) * 2)
    for stage in ("received", "written", "steady"):
        got = np.sort(np.frombuffer(read[stage], np.float32))
        stages[f"{stage}_p50_ms"], stages[f"{stage}_p99_ms"] = ((float(percentile(got, q)) * 1e3 for q in (50, 99))
                                                                if len(got) else (float("nan"),) * 2)
    return {"expected_points": expected, "received_points": read["points"], "points_per_s": read["points"] / window,
            "latency_p50_ms": pct(50), "latency_p99_ms": pct(99), **stages,
            "latency_max_ms": float(lat[-1]) * 1e3 if len(lat) else float("nan"),
            "cores": role["cores"], "cores_per_agent": role["cores"] / args.agents,
            "cpu_ns_per_point": role["cpu_s"] / max(read["points"], 1) * 1e9,
            "tally_ns_per_point": read["tally_cpu_s"] / max(read["points"], 1) * 1e9,
            **{f"{part}_ns_per_point": s / max(read["points"], 1) * 1e9 for part, s in read["thread_cpu_s"].items()},
            "peak_rss_mb": role["peak_rss_mb_sum"], "peak_rss_mb_per_agent": role["peak_rss_mb_sum"] / args.agents,
            "lossless": not read["problems"] and read["points"] == expected, "problems": read["problems"][:20]}


def summarize(mode: str, args: argparse.Namespace, steps: int, setup_s: float, t_go: float, reports: list[dict],
              reads: list[dict], sampler: Sampler, roles: dict[str, list[int]], idle0: dict[int, float],
              idle1: dict[int, float], cpu0: dict[int, float], cpu1: dict[int, float]) -> dict[str, Any]:
    expected_points = steps * args.metrics * args.agents
    received = sum(r["points"] for r in reads)
    t0 = min(t_go, *(r["t_first_log"] for r in reports))  # the schedule's start: a late trainer catches up
    t_end = max(r["t_last_point"] for r in reads)
    window = t_end - t0
    lat = np.sort(np.concatenate([np.frombuffer(r["latencies"], np.float32) for r in reads]))
    problems = [p for r in reads for p in r["problems"]]
    run_stats = [s for rep in reports for s in rep["runs"].values()]
    dropped = sum(s["dropped_points"] for s in run_stats)
    lossless = not problems and received == expected_points and dropped == 0 and all(s["finished"] for s in run_stats)

    roles_out: dict[str, Any] = {}
    for role, pids in roles.items():
        cpu = [cpu1.get(pid, 0.0) - cpu0.get(pid, 0.0) for pid in pids]
        rss = [sampler.peak_rss.get(pid, 0) for pid in pids]
        roles_out[role] = {"processes": len(pids), "cpu_s": sum(cpu), "cores": sum(cpu) / window,
                           "cpu_ns_per_point": sum(cpu) / max(received, 1) * 1e9,
                           "median_process_cores": median(cpu) / window,
                           "peak_rss_mb_sum": sum(rss) / 2**20, "peak_rss_mb_median": median(rss) / 2**20}
    idle_rate = sum(idle1.get(pid, 0.0) - idle0.get(pid, 0.0) for pid in roles["agent"]) / max(args.idle, 1e-9)
    agent = roles_out["agent"]
    agent["idle_cores"] = idle_rate
    agent["net_cpu_ns_per_point"] = max(0.0, agent["cpu_s"] - idle_rate * window) / max(received, 1) * 1e9
    total_cpu = sum(r["cpu_s"] for r in roles_out.values())
    lat_ms = (lambda q: float(percentile(lat, q)) * 1e3) if len(lat) else (lambda q: float("nan"))
    return {
        "mode": mode, "agents": args.agents, "metrics_per_step": args.metrics,
        "offered_points_per_s": args.rate * args.agents, "steps_per_run": steps,
        "setup_s": round(setup_s, 1), "window_s": round(window, 2),
        "expected_points": expected_points, "received_points": received,
        "points_per_s": received / window,
        "trainer_points_per_s": expected_points / (max(r["t_logged"] for r in reports) - t0),
        "late_ticks": sum(r["late_ticks"] for r in reports), "max_tick_lag_ms": max(r["max_lag_s"] for r in reports) * 1e3,
        "latency_samples": int(len(lat)), "latency_p50_ms": lat_ms(50), "latency_p99_ms": lat_ms(99),
        "latency_max_ms": float(lat[-1]) * 1e3 if len(lat) else float("nan"),
        "cpu_ns_per_point": total_cpu / max(received, 1) * 1e9, "cpu_cores": total_cpu / window,
        "machine_busy_median": median(sampler.machine_busy) if sampler.machine_busy else float("nan"),
        "roles": roles_out, "trainer_dropped_points": dropped,
        "trainers_finished": all(s["finished"] for s in run_stats),
        "lossless": lossless, "problems": problems[:20],
    }


# --- report -------------------------------------------------------------------------------

RATIOS = {  # listener / loopback, per round
    "points_per_s": lambda m: m["points_per_s"],
    "latency_p50_ms": lambda m: m["latency_p50_ms"],
    "latency_p99_ms": lambda m: m["latency_p99_ms"],
    "latency_max_ms": lambda m: m["latency_max_ms"],
    "cpu_ns_per_point": lambda m: m["cpu_ns_per_point"],
    "agent_cpu_ns_per_point": lambda m: m["roles"]["agent"]["cpu_ns_per_point"],
    "agent_net_cpu_ns_per_point": lambda m: m["roles"]["agent"]["net_cpu_ns_per_point"],
    "trainer_cpu_ns_per_point": lambda m: m["roles"]["trainer"]["cpu_ns_per_point"],
    "reader_cpu_ns_per_point": lambda m: m["roles"]["reader"]["cpu_ns_per_point"],
    "agent_median_process_cores": lambda m: m["roles"]["agent"]["median_process_cores"],
    "agent_peak_rss_mb_median": lambda m: m["roles"]["agent"]["peak_rss_mb_median"],
}
SUMMED = {"expected_points", "received_points", "trainer_dropped_points", "late_ticks", "latency_samples"}


def aggregate(rounds: list[dict[str, Any]]) -> dict[str, Any]:
    """Medians over rounds; counts of points summed; lossless only if every round was."""
    out: dict[str, Any] = {}
    for key, value in rounds[0].items():
        values = [r[key] for r in rounds]
        if isinstance(value, dict):
            out[key] = aggregate(values)
        elif isinstance(value, bool):
            out[key] = all(values)
        elif isinstance(value, (int, float)):
            out[key] = sum(values) if key in SUMMED else (max(values) if key.startswith("max") else median(values))
        elif isinstance(value, list):
            out[key] = [x for v in values for x in v]
        else:
            out[key] = value
    return out


def report(results: dict[str, dict[str, Any]], ratios: dict[str, float]) -> str:
    modes = [m for m in MODES if m in results]
    r = results
    rows: list[list[Any]] = []
    with_ratio = bool(ratios)

    def row(label: str, get: Any, fmt: str, ratio_key: str | None = None) -> None:
        values = [get(r[m]) for m in modes]
        cells = [format(v, fmt) if isinstance(v, (int, float)) else str(v) for v in values]
        if with_ratio:
            value = ratios.get(ratio_key, math.nan) if ratio_key else math.nan
            cells.append(f"{value:.2f}x" if math.isfinite(value) else "")
        rows.append([label, *cells])

    row("points/s offered (all agents)", lambda m: m["offered_points_per_s"], ",.0f")
    row("points/s delivered, end to end", lambda m: m["points_per_s"], ",.0f", "points_per_s")
    row("latency log() -> reader p50 (ms)", lambda m: m["latency_p50_ms"], ".1f", "latency_p50_ms")
    row("latency p99 (ms)", lambda m: m["latency_p99_ms"], ".1f", "latency_p99_ms")
    row("latency max (ms)", lambda m: m["latency_max_ms"], ".0f", "latency_max_ms")
    row("CPU ns/point, all processes", lambda m: m["cpu_ns_per_point"], ",.0f", "cpu_ns_per_point")
    for role in ("agent", "trainer", "reader"):
        row(f"  {role}s ns/point", lambda m, role=role: m["roles"][role]["cpu_ns_per_point"], ",.0f",
            f"{role}_cpu_ns_per_point")
    row("  agents ns/point net of idle", lambda m: m["roles"]["agent"]["net_cpu_ns_per_point"], ",.0f",
        "agent_net_cpu_ns_per_point")
    row("cores used: agents / trainers / readers",
        lambda m: " / ".join(f"{m['roles'][k]['cores']:.2f}" for k in ("agent", "trainer", "reader")), "")
    row("agents idle (cores, before the load)", lambda m: m["roles"]["agent"]["idle_cores"], ".2f")
    row("one agent, median (% of a core)", lambda m: m["roles"]["agent"]["median_process_cores"] * 100, ".1f",
        "agent_median_process_cores")
    row("machine busy, median (all cores, %)", lambda m: m["machine_busy_median"] * 100, ".0f")
    row("peak RSS MB: one agent (median) / all", lambda m: f"{m['roles']['agent']['peak_rss_mb_median']:.0f} / "
        f"{m['roles']['agent']['peak_rss_mb_sum']:.0f}", "", "agent_peak_rss_mb_median")
    for role in ("trainer", "reader"):
        row(f"peak RSS MB: one {role} proc / all", lambda m, role=role: f"{m['roles'][role]['peak_rss_mb_median']:.0f}"
            f" / {m['roles'][role]['peak_rss_mb_sum']:.0f}", "")
    if all("app" in r[m] for m in modes):
        row("app: points delivered to its UI thread / expected",
            lambda m: f"{m['app']['received_points']:,} / {m['app']['expected_points']:,}", "")
        row("app: log() -> link took the page p50 / p99 (ms)",
            lambda m: f"{m['app']['received_p50_ms']:.1f} / {m['app']['received_p99_ms']:.1f}", "")
        row("app: log() -> page in the store p50 / p99 (ms)",
            lambda m: f"{m['app']['written_p50_ms']:.1f} / {m['app']['written_p99_ms']:.1f}", "")
        row("app: latency log() -> UI thread p50 / p99 (ms)",
            lambda m: f"{m['app']['latency_p50_ms']:.1f} / {m['app']['latency_p99_ms']:.1f}", "")
        row("app: the same, points logged after the first second (ms)",
            lambda m: f"{m['app']['steady_p50_ms']:.1f} / {m['app']['steady_p99_ms']:.1f}", "")
        row("app: cores used / per agent (% of a core)",
            lambda m: f"{m['app']['cores']:.2f} / {m['app']['cores_per_agent'] * 100:.2f}", "")
        row("app: CPU ns/point", lambda m: m["app"]["cpu_ns_per_point"], ",.0f")
        row("app: CPU ns/point less this benchmark's own tally (on its UI thread)",
            lambda m: m["app"]["cpu_ns_per_point"] - m["app"]["tally_ns_per_point"], ",.0f")
        row("app: a pan of the first chart -> painted, p50 / p99 (ms)",
            lambda m: f"{m['app']['pan_p50_ms']:.0f} / {m['app']['pan_p99_ms']:.0f} ({m['app']['pans']} pans)", "")
        row("app: CPU ns/point on the UI / store writer / link threads / other",
            lambda m: " / ".join(f"{m['app'][f'{part}_ns_per_point']:,.0f}" for part in ("ui", "writer", "links", "other")),
            "")
        row("app: peak RSS MB / per agent", lambda m: f"{m['app']['peak_rss_mb']:.0f} / "
            f"{m['app']['peak_rss_mb_per_agent']:.2f}", "")
    row("late trainer ticks / max lag (ms)", lambda m: f"{m['late_ticks']:,} / {m['max_tick_lag_ms']:.0f}", "")
    row("points expected / received (all rounds)",
        lambda m: f"{m['expected_points']:,} / {m['received_points']:,}", "")
    row("trainer-dropped points", lambda m: m["trainer_dropped_points"], "d")
    row("lossless, no duplicates", lambda m: "yes" if m["lossless"] else "NO", "")
    headers = ["", *modes] + (["listener / loopback"] if with_ratio else [])
    return table(headers, rows)


def main(argv: list[str] | None = None) -> dict[str, Any]:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--agents", type=int, default=32)
    p.add_argument("--rate", type=float, default=2000, help="points/s per agent")
    p.add_argument("--metrics", type=int, default=10, help="scalars per step (steps/s = rate / metrics)")
    p.add_argument("--seconds", type=float, default=45, help="seconds of load per mode and round")
    p.add_argument("--modes", default="loopback,listener", help="comma-separated: loopback, listener")
    p.add_argument("--runs-per-trainer", type=int, default=8,
                   help="trainer runs hosted by one process, each with its own outbox thread and socket "
                        "(1 = a process per trainer: twice the trainers' CPU on a 2-core machine)")
    p.add_argument("--readers", type=int, default=2, help="reader processes (each follows agents on threads)")
    p.add_argument("--app", action="store_true",
                   help="also follow every agent with the real app (offscreen): its UI-thread latency, CPU and memory")
    p.add_argument("--profile", metavar="DIR", help="with --app: sample the app with py-spy (pip install py-spy; "
                   "root, or ptrace allowed) into DIR, collapsed stacks per thread, idle samples kept")
    p.add_argument("--nice-load", type=int, default=0, metavar="N",
                   help="with --app: run the agents, trainers and readers at niceness N (e.g. 19), so that what "
                        "queues on a full machine is told apart from what the app adds")
    p.add_argument("--idle", type=float, default=3.0, help="seconds to measure the idle agents before the load")
    p.add_argument("--rounds", type=int, default=2,
                   help="rounds of all modes, alternating the order (loopback, listener, listener, loopback, ...)")
    p.add_argument("--quick", action="store_true", help="smoke run: 4 agents, 10 s per mode, one round")
    args = p.parse_args(argv)
    if args.quick:
        args.agents, args.seconds, args.rounds = 4, 10.0, 1
    modes = [m.strip() for m in args.modes.split(",") if m.strip()]
    for m in modes:
        if m not in MODES:
            p.error(f"unknown mode {m!r}; choose from {', '.join(MODES)}")
    if min(args.agents, args.metrics, args.rounds, args.readers, args.runs_per_trainer) < 1 \
            or args.rate <= 0 or args.seconds <= 0:
        p.error("--agents, --rate, --metrics, --seconds, --rounds, --readers and --runs-per-trainer must be positive")

    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # clean up children on SIGTERM too
    cores = os.cpu_count()
    print(f"{args.agents} agents x {args.rate:,.0f} points/s ({args.rate / args.metrics:g} steps/s x {args.metrics} "
          f"scalars), {args.seconds:g} s per mode, modes {', '.join(modes)}; {cores} cores, load average "
          f"{os.getloadavg()[0]:.2f}", flush=True)
    runs: dict[str, list[dict[str, Any]]] = {m: [] for m in modes}
    t_all = time.monotonic()
    for rnd in range(args.rounds):
        for mode in (modes if rnd % 2 == 0 else modes[::-1]):  # ABBA: a drifting machine load cancels out
            t = time.monotonic()
            runs[mode].append(res := run_mode(mode, args))
            print(f"round {rnd + 1}/{args.rounds}, {mode}: {res['points_per_s']:,.0f} points/s, p50 "
                  f"{res['latency_p50_ms']:.1f} ms, p99 {res['latency_p99_ms']:.1f} ms, "
                  f"{res['cpu_ns_per_point']:,.0f} CPU ns/point, lossless={res['lossless']} "
                  f"(setup {res['setup_s']:.0f} s, {time.monotonic() - t:.0f} s in all)", flush=True)
            for problem in res["problems"]:
                print("  LOSS:", problem)
    results = {m: aggregate(r) for m, r in runs.items()}
    ratios = {}
    if "loopback" in runs and "listener" in runs:
        ratios = {name: median([get(c) / get(p) for p, c in zip(runs["loopback"], runs["listener"]) if get(p)]
                               or [math.nan])
                  for name, get in RATIOS.items()}
    print(f"\nLoad: {args.agents} agents on loopback, each fed {args.rate:,.0f} points/s by its own trainer run "
          f"({args.runs_per_trainer} run(s) per trainer process), followed by {args.readers} reader process(es); "
          f"{cores} cores shared by everything, load average now {os.getloadavg()[0]:.2f}. Medians of {args.rounds} "
          f"round(s); listener / loopback is the median of the per-round ratios.\n")
    print(report(results, ratios))
    for mode, res in results.items():
        if res["points_per_s"] < 0.95 * res["offered_points_per_s"]:
            print(f"\n{mode}: SATURATED: {res['points_per_s']:,.0f} of {res['offered_points_per_s']:,.0f} points/s "
                  f"delivered with the machine {res['machine_busy_median']:.0%} busy: it cannot carry this load, so "
                  f"a backlog grows and the latency is mostly queueing (try fewer --agents)")
    data = {"args": vars(args), "cores": cores, "medians": {m: results[m] for m in modes}, "rounds": runs,
            "listener_over_loopback": ratios, "wall_s": round(time.monotonic() - t_all, 1)}
    path = write_result("bench_load", data)
    print(f"results: {path} ({data['wall_s']:.0f} s)")
    return data


def passed(data: dict[str, Any]) -> bool:
    return all(r["lossless"] for rounds in data["rounds"].values() for r in rounds)


if __name__ == "__main__":
    raise SystemExit(0 if passed(main()) else 1)
