"""What alert rules cost the agent: per point in the engine, and end to end at full ingest speed.

(1) Micro: the agent's own per-chunk call, ``AlertDesk.on_entries`` (which runs
``AlertEngine.observe`` on each metric chunk it just stored), fed the chunks a 100-metric
trainer produces, with 0, 1 and 20 rules loaded; and one rule of each kind on its own.
(2) End to end: a real agent (``python -m pilothouse agent --alerts rules.toml``), a trainer logging
as fast as it can, a reader following the journal (bench_throughput's trainer, reader and
zero-loss check), with no rules file, the 20 realistic rules, and 20 rules that all match
every metric.  The issue's requirement: 20 rules must not cut ingest below 1 M points/s.

    python benchmarks/bench_alerts.py [--quick] [--trials 3] [--points 6000000]
"""

from __future__ import annotations

import argparse
import hashlib
import multiprocessing
import os
import sqlite3
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np
from _common import ROOT, AgentProcess, median, table, write_result
from bench_throughput import TARGET, check, metric_names, read_until, trainer

from pilothouse.client import Client
from pilothouse.node.alert_desk import AlertDesk
from pilothouse.node.alert_engine import AlertEngine
from pilothouse.node.rules_file import load_rules
from pilothouse.wire.alert_rules import Rule
from pilothouse.wire.entries import KIND_METRIC, Entry

N_METRICS = 100  # per step: per-layer statistics of a big model (metric_names: model.layers.NN.<stat>)
RUN = "bench-alerts"

# 20 rules someone might load for a 100-metric run: most on one statistic of every layer, some on one
# layer, a few on metrics this trainer does not log (they cost a glob match once per metric, then
# nothing), one liveness rule.  On bench_throughput's values (step + metric index) exactly one fires,
# once (`param-over-1000`): the firing path runs, but an episode is one edge, not one per point.
MIXED: list[dict[str, Any]] = [
    {"name": "nan-anywhere", "kind": "nonfinite", "metric": "*"},
    {"name": "grad-nonfinite", "kind": "nonfinite", "metric": "model.layers.*.grad_norm"},
    {"name": "grad-explode", "kind": "above", "metric": "*.grad_norm", "threshold": 1e9, "for_steps": 3},
    {"name": "grad-spike-early", "kind": "above", "metric": "model.layers.0*.grad_norm", "threshold": 1e7},
    {"name": "update-too-big", "kind": "above", "metric": "*.update_ratio", "threshold": 1e6, "for_steps": 20},
    {"name": "update-vanished", "kind": "below", "metric": "*.update_ratio", "threshold": -1.0, "for_steps": 100},
    {"name": "act-dead", "kind": "below", "metric": "*.act_rms", "threshold": -1.0, "for_steps": 10},
    {"name": "param-negative", "kind": "below", "metric": "*.param_norm", "threshold": -1.0},
    {"name": "param-collapse", "kind": "drop", "metric": "*.param_norm", "pct": 50, "window": 100},
    {"name": "act-drop-first", "kind": "drop", "metric": "model.layers.00.act_rms", "pct": 30, "window": 50},
    {"name": "act-drop-long", "kind": "drop", "metric": "model.layers.1*.act_rms", "pct": 30, "window": 1000},
    {"name": "grad-drop-first", "kind": "drop", "metric": "model.layers.00.grad_norm", "pct": 90, "window": 500},
    {"name": "grad-last-layer", "kind": "above", "metric": "model.layers.24.grad_norm", "threshold": 1e8,
     "for_steps": 5},
    {"name": "act-last-layers", "kind": "above", "metric": "model.layers.2?.act_rms", "threshold": 1e8},
    {"name": "param-over-1000", "kind": "above", "metric": "model.layers.00.param_norm", "threshold": 1000,
     "for_steps": 10},
    {"name": "loss-high", "kind": "above", "metric": "loss", "threshold": 10},
    {"name": "reward-collapse", "kind": "drop", "metric": "reward/mean", "pct": 30, "window": 50},
    {"name": "lr-zero", "kind": "below", "metric": "lr", "threshold": 1e-9},
    {"name": "eval-drop", "kind": "drop", "metric": "eval/*", "pct": 20, "window": 200},
    {"name": "stalled", "kind": "stale", "seconds": 120},
]
MIXED_FIRING = 1  # episodes the mixed rules start per run on bench_throughput's values

# The worst case for 20 rules: every one matches every metric (4 of each metric kind, never firing).
_WORST_KINDS = [
    {"kind": "nonfinite"},
    {"kind": "above", "threshold": 1e12, "for_steps": 5},
    {"kind": "below", "threshold": -1.0},
    {"kind": "drop", "pct": 50, "window": 50},
    {"kind": "drop", "pct": 50, "window": 1000},
]
EVERY: list[dict[str, Any]] = [{"name": f"every-{i:02d}", "metric": "*", **_WORST_KINDS[i % 5]} for i in range(20)]

RULE_SETS: dict[str, list[dict[str, Any]]] = {
    "0 rules": [],
    "1 rule (nonfinite *)": [MIXED[0]],
    "20 rules (mixed)": MIXED,
    "20 rules (all on *)": EVERY,
}

# One rule of each kind alone, on one metric: the cost of one rule evaluation on one chunk.
KIND_RULES: dict[str, dict[str, Any]] = {
    "nonfinite": {"kind": "nonfinite", "metric": "*"},
    "above, for_steps=1": {"kind": "above", "metric": "*", "threshold": 1e12},
    "above, for_steps=20": {"kind": "above", "metric": "*", "threshold": 1e12, "for_steps": 20},
    "below, for_steps=1": {"kind": "below", "metric": "*", "threshold": -1.0},
    "drop, window=50": {"kind": "drop", "metric": "*", "pct": 30, "window": 50},
    "drop, window=1000": {"kind": "drop", "metric": "*", "pct": 30, "window": 1000},
}


def toml_rules(rules: list[dict[str, Any]]) -> str:
    """``[[rule]]`` tables for ``--alerts``; values are str, bool, int or float."""
    def value(v: Any) -> str:
        if isinstance(v, str):
            return '"' + v.replace("\\", "\\\\").replace('"', '\\"') + '"'
        if isinstance(v, bool):
            return "true" if v else "false"
        return repr(v)
    return "\n".join("[[rule]]\n" + "".join(f"{k} = {value(v)}\n" for k, v in r.items()) for r in rules)


def parsed(rules: list[dict[str, Any]]) -> list[Rule]:
    """The rules exactly as the agent loads them (through a TOML file and load_rules)."""
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "rules.toml"
        path.write_text(toml_rules(rules))
        return load_rules(path)


def matched_rules(rules: list[Rule], names: list[str]) -> float:
    """Rule evaluations per metric chunk (the mean over the trainer's metrics)."""
    engine = AlertEngine()
    engine.replace("file", "", rules)
    one = np.zeros(1)
    for name in names:
        engine.observe(RUN, RUN, name, one.astype(np.int64), one)
    return len(engine._states) / len(names)  # one state per (rule, run, metric) that matched


# --- (1) micro ------------------------------------------------------------------------------

class _Desk(AlertDesk):
    """The agent's alert desk without an agent: ``on_entries`` as the agent calls it; the edges it
    returns are counted instead of written to the journal."""

    def __init__(self, rules: list[Rule]) -> None:
        self.engine = AlertEngine()
        self.engine.replace("file", "", rules)
        self._names = {RUN: RUN}
        self.edges = 0

    def _act(self, fired: list) -> None:  # type: ignore[override]
        self.edges += len(fired)


def batches(names: list[str], steps: int, chunk: int) -> list[list[Entry]]:
    """Stored entries as ``Store._entries`` makes them, ``chunk`` steps per trainer batch, value =
    step + metric index (bench_throughput's values)."""
    out = []
    for start in range(0, steps, chunk):
        s = np.arange(start, min(start + chunk, steps), dtype=np.int64)
        times = (s * 1e-4 + 1.7e9).astype(np.float64).tobytes()
        out.append([Entry(0, RUN, KIND_METRIC, name, 0, len(s), s.tobytes(), (s + j).astype(np.float64).tobytes(),
                           times, None) for j, name in enumerate(names)])
    return out


def time_stream(rules: list[Rule], stream: list[list[Entry]]) -> tuple[int, int, int]:
    """(CPU ns, wall ns, edges) of ``on_entries`` over the stream; the first batch (glob
    matching, state creation) is a warm-up outside the clock."""
    desk = _Desk(rules)
    desk.on_entries(stream[0])
    cpu = wall = 0
    for batch in stream[1:]:
        c0, w0 = time.thread_time_ns(), time.perf_counter_ns()
        desk.on_entries(batch)
        wall += time.perf_counter_ns() - w0
        cpu += time.thread_time_ns() - c0
    return cpu, wall, desk.edges


def micro(chunks: list[int], points: int, trials: int) -> list[dict[str, Any]]:
    names = metric_names(N_METRICS)
    sets = {label: parsed(rules) for label, rules in RULE_SETS.items()}
    rows = []
    for chunk in chunks:
        steps = max(points // N_METRICS, 6 * chunk)
        stream = batches(names, steps, chunk)
        timed_points = (steps - chunk) * N_METRICS
        timed_chunks = (len(stream) - 1) * N_METRICS
        samples: dict[str, list[tuple[int, int, int]]] = {label: [] for label in sets}
        for i in range(trials):  # round robin, so a slow spell of the machine hits every rule set
            for label in list(sets)[i % len(sets):] + list(sets)[:i % len(sets)]:
                samples[label].append(time_stream(sets[label], stream))
        for label, rules in sets.items():
            cpu = [s[0] for s in samples[label]]
            wall = [s[1] for s in samples[label]]
            rows.append({"rules": label, "n_rules": len(rules), "chunk_points": chunk,
                         "evals_per_chunk": matched_rules(rules, names),
                         "cpu_ns_per_point": median(cpu) / timed_points,
                         "wall_ns_per_point": median(wall) / timed_points,
                         "cpu_us_per_chunk": median(cpu) / timed_chunks / 1e3,
                         "wall_us_per_chunk": median(wall) / timed_chunks / 1e3,
                         "edges": samples[label][0][2], "timed_points": timed_points,
                         "trial_cpu_ns": cpu, "trial_wall_ns": wall})
        base = next(r for r in rows if r["chunk_points"] == chunk and r["n_rules"] == 0)
        for r in rows:
            if r["chunk_points"] == chunk:
                r["added_cpu_ns_per_point"] = r["cpu_ns_per_point"] - base["cpu_ns_per_point"]
        print(f"micro: chunks of {chunk} points done", flush=True)
    return rows


def per_kind(chunks: list[int], trials: int, repeat: int) -> list[dict[str, Any]]:
    """One rule of each kind, one metric, ``AlertEngine.observe`` alone: µs per evaluation."""
    rows = []
    for chunk in chunks:
        s = np.arange(chunk * (repeat + 1), dtype=np.int64)
        v = s.astype(np.float64)
        pieces = [(s[i:i + chunk], v[i:i + chunk]) for i in range(0, len(s), chunk)]
        for label, spec in {"(no rule)": None, **KIND_RULES}.items():
            rules = parsed([{"name": "r", **spec}]) if spec else []
            per_trial = []
            for _ in range(trials):
                engine = AlertEngine()
                engine.replace("file", "", rules)
                engine.observe(RUN, RUN, "m", *pieces[0])
                c0 = time.thread_time_ns()
                for steps, vals in pieces[1:]:
                    engine.observe(RUN, RUN, "m", steps, vals)
                per_trial.append((time.thread_time_ns() - c0) / repeat)
            rows.append({"kind": label, "chunk_points": chunk, "cpu_us_per_chunk": median(per_trial) / 1e3,
                         "cpu_ns_per_point": median(per_trial) / chunk})
    return rows


# --- (2) end to end -------------------------------------------------------------------------

class AlertsAgent(AgentProcess):
    """``AgentProcess`` started with ``--alerts rules.toml`` (written into its data dir) when given rules."""

    def __init__(self, rules: list[dict[str, Any]]):
        super().__init__()
        if rules:
            path = self.data / "rules.toml"
            path.write_text(toml_rules(rules))
            self.extra = ["--alerts", str(path)]

    def chunks(self, run: str) -> tuple[int, int]:
        """(metric chunks, points) the agent stored for ``run``."""
        with sqlite3.connect(f"file:{self.data / 'journal.sqlite'}?mode=ro", uri=True) as db:
            n, pts = db.execute("SELECT COUNT(*), COALESCE(SUM(n), 0) FROM journal WHERE run=? AND kind=?",
                                [run, KIND_METRIC]).fetchone()
        return n, pts


def e2e_trial(mode: str, rules: list[dict[str, Any]], points: int, index: int) -> dict[str, Any]:
    steps = points // N_METRICS
    expected = steps * N_METRICS
    run_id = f"bench-alerts-{index}"
    ctx = multiprocessing.get_context("spawn")
    with AlertsAgent(rules) as ap:
        go = ctx.Event()
        parent, child = ctx.Pipe()
        proc = ctx.Process(target=trainer, args=(ap.url, run_id, N_METRICS, steps, go, child), daemon=True)
        proc.start()
        if not parent.poll(60) or parent.recv() != "ready":
            raise RuntimeError("the trainer did not start")
        cpu0 = ap.cpu_seconds()
        go.set()
        result = read_until(ap.url, {run_id}, expected)
        agent_cpu = ap.cpu_seconds() - cpu0
        report = parent.recv() if parent.poll(120) else {}
        proc.join(30)
        with Client(ap.url, timeout=10) as client:
            state = client.alerts()
        n_chunks, stored = ap.chunks(run_id)
    if not report:
        raise RuntimeError("the trainer did not report back")
    seconds = result.t_last_point - report["t_first_log"]
    problems = check(result, {run_id}, N_METRICS, steps)
    if report["stats"]["dropped_points"]:
        problems.append(f"the trainer dropped {report['stats']['dropped_points']} points")
    if not report["finished"]:
        problems.append("the trainer's last records were not acknowledged")
    firing = [a for a in state["firing"] if a["run"] == run_id]
    want_firing = MIXED_FIRING if rules is MIXED else 0
    if len(state["rules"]) != len(rules) or len(firing) != want_firing:
        problems.append(f"the agent holds {len(state['rules'])} rules ({len(rules)} loaded) and "
                        f"{len(firing)} firing alerts (want {want_firing})")
    return {"mode": mode, "points": expected, "received": result.points, "seconds": round(seconds, 3),
            "points_per_s": expected / seconds,
            "trainer_log_points_per_s": expected / (report["t_logged"] - report["t_first_log"]),
            "agent_cpu_s": round(agent_cpu, 2), "agent_cpu_ns_per_point": agent_cpu / expected * 1e9,
            "agent_cpu_share": agent_cpu / seconds, "stored_chunks": n_chunks,
            "mean_chunk_points": stored / n_chunks if n_chunks else 0.0,
            "rules_loaded": len(state["rules"]), "firing": len(firing),
            "lossless": not problems and result.points == expected, "problems": problems[:10]}


def end_to_end(points: int, trials: int) -> list[dict[str, Any]]:
    modes = {"0 rules": RULE_SETS["0 rules"], "20 rules (mixed)": MIXED, "20 rules (all on *)": EVERY}
    runs: dict[str, list[dict[str, Any]]] = {m: [] for m in modes}
    index = 0
    for i in range(trials):  # rotate the order each round so drift of the machine's load hits every mode
        for mode in list(modes)[i % len(modes):] + list(modes)[:i % len(modes)]:
            t = e2e_trial(mode, modes[mode], points, index)
            index += 1
            runs[mode].append(t)
            print(f"e2e {mode}, trial {i + 1}/{trials}: {t['points_per_s'] / 1e6:.2f} M points/s, agent "
                  f"{t['agent_cpu_ns_per_point']:.0f} ns/pt, lossless={t['lossless']}", flush=True)
            for problem in t["problems"]:
                print("  LOSS:", problem, flush=True)
    summary = []
    for mode, ts in runs.items():
        summary.append({"mode": mode, "n_rules": len(modes[mode]),
                        "median_points_per_s": median([t["points_per_s"] for t in ts]),
                        "median_trainer_log_points_per_s": median([t["trainer_log_points_per_s"] for t in ts]),
                        "median_agent_cpu_ns_per_point": median([t["agent_cpu_ns_per_point"] for t in ts]),
                        "median_agent_cpu_share": median([t["agent_cpu_share"] for t in ts]),
                        "median_chunk_points": median([t["mean_chunk_points"] for t in ts]),
                        "lossless": all(t["lossless"] for t in ts), "trials": ts})
    base = summary[0]["trials"]
    for s in summary:  # per-round ratios (same round = nearby in time), then their median
        s["ratio_vs_0_rules"] = median([t["points_per_s"] / b["points_per_s"] for t, b in zip(s["trials"], base)])
        s["agent_cpu_ratio_vs_0_rules"] = median([t["agent_cpu_ns_per_point"] / b["agent_cpu_ns_per_point"]
                                                  for t, b in zip(s["trials"], base)])
    return summary


def sources() -> dict[str, str]:
    """sha256 (first 12 hex digits) of the alert code measured: the commit does not name an edited tree."""
    return {name: hashlib.sha256((ROOT / "agent" / name).read_bytes()).hexdigest()[:12]
            for name in ("node/alert_engine.py", "node/alert_desk.py", "wire/alert_rules.py", "node/journal.py",
                         "node/server.py")}


# --- report ---------------------------------------------------------------------------------

def main(argv: list[str] | None = None) -> dict[str, Any]:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--quick", action="store_true", help="fewer points and chunk sizes (about a minute)")
    p.add_argument("--trials", type=int, default=None,
                   help="trials per case (default 5, end to end 5; --quick: 3 and 3)")
    p.add_argument("--points", type=int, default=None, help="points per end-to-end trial (default 6 M; quick 1.5 M)")
    args = p.parse_args(argv)
    chunks = [40, 200] if args.quick else [40, 200, 1000]
    micro_points = 100_000 if args.quick else 300_000
    micro_trials = args.trials or (3 if args.quick else 5)
    e2e_trials = args.trials or (3 if args.quick else 5)
    e2e_points = args.points or (1_500_000 if args.quick else 6_000_000)
    load0 = os.getloadavg()
    print(f"load average at start: {load0[0]:.2f} {load0[1]:.2f} {load0[2]:.2f} on {os.cpu_count()} CPUs", flush=True)

    t0 = time.monotonic()
    micro_rows = micro(chunks, micro_points, micro_trials)
    kind_rows = per_kind([40, 200], micro_trials, repeat=300 if args.quick else 1000)
    micro_s = time.monotonic() - t0
    e2e = end_to_end(e2e_points, e2e_trials)
    load1 = os.getloadavg()

    print(f"\nAlert evaluation per stored chunk: AlertDesk.on_entries (AlertEngine.observe on each "
          f"metric chunk), {N_METRICS} metrics/step, value = step + metric index; thread CPU time, median of "
          f"{micro_trials} trials ({micro_s:.0f} s). Budget at 1 M points/s: 1,000 ns/pt for the agent's whole loop.\n")
    print(table(["rules", "rule evals/chunk", "chunk pts", "ns/pt", "+ns/pt vs 0", "µs/chunk", "wall ns/pt",
                 "edges"],
                [[r["rules"], f"{r['evals_per_chunk']:.2f}", r["chunk_points"], f"{r['cpu_ns_per_point']:.1f}",
                  f"{r['added_cpu_ns_per_point']:+.1f}", f"{r['cpu_us_per_chunk']:.2f}",
                  f"{r['wall_ns_per_point']:.1f}", r["edges"]] for r in micro_rows]))
    print("\nOne rule alone on one metric: AlertEngine.observe per chunk (thread CPU, median)\n")
    by_kind: dict[str, dict[int, dict[str, Any]]] = {}
    for r in kind_rows:
        by_kind.setdefault(r["kind"], {})[r["chunk_points"]] = r
    print(table(["rule", "µs/chunk of 40", "ns/pt at 40", "µs/chunk of 200", "ns/pt at 200"],
                [[k, f"{v[40]['cpu_us_per_chunk']:.2f}", f"{v[40]['cpu_ns_per_point']:.1f}",
                  f"{v[200]['cpu_us_per_chunk']:.2f}", f"{v[200]['cpu_ns_per_point']:.1f}"]
                 for k, v in by_kind.items()]))

    with20 = next(s for s in e2e if s["mode"] == "20 rules (mixed)")
    verdict = "PASS" if with20["median_points_per_s"] >= TARGET else "FAIL"
    print(f"\nTrainer -> agent (--alerts) -> reader, {N_METRICS} metrics/step x 1 trainer, "
          f"{e2e_points / 1e6:g} M points per trial, median of {e2e_trials} (ratios: median of per-round ratios)\n")
    print(table(["agent rules", "M points/s", "vs 0 rules", "trainer-side M pts/s", "agent CPU ns/pt",
                 "agent CPU vs 0", "agent CPU", "agent ceiling M pts/s", "chunk pts", "vs 1 M target", "lossless"],
                [[s["mode"], f"{s['median_points_per_s'] / 1e6:.2f}", f"{s['ratio_vs_0_rules']:.2f}x",
                  f"{s['median_trainer_log_points_per_s'] / 1e6:.2f}", f"{s['median_agent_cpu_ns_per_point']:.0f}",
                  f"{s['agent_cpu_ratio_vs_0_rules']:.2f}x", f"{s['median_agent_cpu_share'] * 100:.0f}%",
                  f"{1e3 / s['median_agent_cpu_ns_per_point']:.2f}",
                  f"{s['median_chunk_points']:.0f}", f"{s['median_points_per_s'] / TARGET:.2f}x",
                  "yes" if s["lossless"] else "NO"] for s in e2e]))
    print(f"\n{verdict}: {with20['median_points_per_s'] / 1e6:.2f} M points/s with 20 rules loaded "
          f"(requirement: >= {TARGET / 1e6:g} M points/s)")
    print("(agent ceiling: 1e9 / agent CPU ns per point, the rate one whole core could carry; chunk pts: "
          "mean points per stored metric chunk)")
    print(f"load average at end: {load1[0]:.2f} {load1[1]:.2f} {load1[2]:.2f} on {os.cpu_count()} CPUs "
          f"(2-core machines: the trainer, agent and reader share the cores; compare within one run)")
    data = {"target_points_per_s": TARGET, "verdict": verdict, "quick": args.quick,
            "load_avg_start": load0, "load_avg_end": load1, "rule_sets": RULE_SETS, "sources": sources(),
            "micro": micro_rows, "per_kind": kind_rows, "end_to_end": e2e}
    path = write_result("bench_alerts", data)
    print(f"results: {path}")
    return data


def passed(data: dict[str, Any]) -> bool:
    """Zero loss (and the rules really loaded) in every end-to-end trial."""
    return all(s["lossless"] for s in data["end_to_end"])


if __name__ == "__main__":
    raise SystemExit(0 if passed(main()) else 1)
