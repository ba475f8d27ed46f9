"""Read-outs: ``pilothouse runs``, ``tail``, ``export``, ``events``."""

from __future__ import annotations

import argparse
import json
import sys

from pilothouse.cli.common import EXIT_ERROR, RUN_HELP, Reader, client_for, print_table
from pilothouse.cli.job import cmd_job
from pilothouse.cli.tail import MetricFilter, Tail, finite_or_text, json_line, steps_and_events, terminal_width
from pilothouse.client import Client
from pilothouse.event_text import Narrator
from pilothouse.text import fmt_bytes, fmt_value, printable, write_points
from pilothouse.wire.entries import KIND_EVENT, KIND_METRIC, entry_body
from pilothouse.wire.watched import STEER_HOW, USER_KINDS, WATCHED


def add_parsers(reader: Reader) -> None:
    r = reader("runs", "list runs with status, step, key metric and last values", cmd_runs)
    r.add_argument("--json", action="store_true", help="machine-readable output")
    r.add_argument("--all", action="store_true", help="include the agent's host/GPU sampling runs")
    r.add_argument("--size", action="store_true", help="each run's disk use (its journal data), and the total")
    r.add_argument("--job", metavar="RUN", help="a multi-node run's nodes: each agent holding its ranks, its state "
                                               "there, and how to reach the others from here")

    t = reader("tail", "print a run's metrics live", cmd_tail)
    t.add_argument("run", help=RUN_HELP)
    t.add_argument("--history", action="store_true", help="print every stored point first")
    t.add_argument("--metric", action="append", metavar="GLOB",
                   help="only metrics whose name matches this shell-style glob ('train/*', '*loss*'); "
                        "repeatable. Without it a step's line shows the most important metrics that fit "
                        "the terminal and '+N more'; with it every chosen metric, wrapped")
    t.add_argument("--json", action="store_true",
                   help="one JSON object per line: the run first ({\"run\": ID, ...} with its last values), then "
                        "{\"step\": N, \"values\": {...}} per step (NaN and Inf as \"nan\", \"inf\", \"-inf\") and "
                        "each event as `events --json` prints it")

    e = reader("export", "write every point of a run as CSV or JSON lines", cmd_export)
    e.add_argument("run", help=RUN_HELP)
    e.add_argument("--format", choices=["csv", "jsonl"], default="csv")
    e.add_argument("-o", "--output", help="file to write (default: standard output)")

    ev = reader("events", "a run's audit trail: status, commands, acknowledgements, checkpoints", cmd_events)
    ev.add_argument("run", help=RUN_HELP)
    ev.add_argument("--json", action="store_true", help="one JSON object per line")


def cmd_runs(args: argparse.Namespace) -> int:
    if args.job:
        return cmd_job(args)
    with client_for(args) as client:
        runs = client.runs()
        full = client.ping().get("disk_full")
    if full:
        print(printable(f"pilothouse: the agent at {args.agent}: {full}; nothing new is stored until space "
                        "returns (trainers keep their records)"), file=sys.stderr)
    if not args.all:
        runs = [r for r in runs if r["kind"] in USER_KINDS]
    if args.json:
        json.dump(runs, sys.stdout, indent=1, default=str)
        print()
        return 0
    if not runs:
        print(f"no runs yet on {args.agent}: add `run = pilothouse.init(project=..., name=...)` to a training script, "
              "or follow its TensorBoard logs with `pilothouse watch LOGDIR`")
        return 0
    size = ("SIZE",) if args.size else ()
    rows = [("ID", "RUN", "STATUS", "STEP", *size, "HOST", "LOST", "ATTEMPT", "ALERTS", "KEY", "LAST VALUES")]
    for r in runs:
        lost = max(r["dropped_records"] or 0, r["lost_records"] or 0)
        key, summary = r["key"], r["summary"]  # the agent decides the key: a project's choice, or automatic
        headline = f"{key}={fmt_value(summary[key])}" if key in summary else "-"
        values = "  ".join(f"{k}={fmt_value(v)}" for k, v in [kv for kv in summary.items() if kv[0] != key][:3])
        size = (fmt_bytes(r.get("bytes") or 0),) if args.size else ()
        status = f"{r['status']} (watched)" if r["kind"] == WATCHED else r["status"]
        rows.append(tuple(map(printable, (r["id"], f"{r['project']}/{r['name']}", status,
                     "-" if r["last_step"] is None else str(r["last_step"]), *size, r["host"] or "-",
                     f"{lost} rec" if lost else "0", str(r.get("attempts") or 1),
                     ",".join(r.get("alerts") or []) or "-", headline, values))))
    print_table(rows)
    if any(r["kind"] == WATCHED for r in runs):
        print(f"watched runs are read from files (TensorBoard, W&B, MLflow) and cannot be steered; {STEER_HOW}")
    if args.size:
        print(f"{fmt_bytes(sum(r.get('bytes') or 0 for r in runs))} in {len(runs)} run{'s' if len(runs) != 1 else ''}")
    return 0


def cmd_tail(args: argparse.Namespace) -> int:
    metrics = MetricFilter(args.metric)
    with client_for(args) as client:
        run = client.resolve(args.run)
        after = 0 if args.history else client.ping()["head"]
        row = next(r for r in client.runs() if r["id"] == run)
        why = metrics.unmatched(run, _metric_names(client, run, row, metrics)) if metrics else None
        if why:
            print(why, file=sys.stderr)
            return EXIT_ERROR
        if args.json:
            return _tail_json(client, run, row, after, args.history, metrics)
        tail = Tail(terminal_width(), metrics)
        attempt = f", attempt {row['attempts']}" if (row.get("attempts") or 1) > 1 else ""
        for line in tail.text(f"{row['project']}/{row['name']} ({run}) {row['status']} on {row['host']}, "
                              f"step {row['last_step']}{attempt}"):
            print(line, flush=True)
        if row["summary"] and not args.history:
            for line in tail.values("last", row["summary"]):
                print(line, flush=True)
        if row["status"] in ("finished", "crashed") and not args.history:
            return 0
        for page in client.follow(after=after, run=run, kinds=[KIND_METRIC, KIND_EVENT]):
            for line, ended in tail.lines(page.entries):
                print(line, flush=True)
                if ended:
                    return 0
    return 0


def _tail_json(client: Client, run: str, row: dict, after: int, history: bool, metrics: MetricFilter) -> int:
    """``tail --json``: what the text shows, a JSON object per line, flushed as it comes."""
    last = {k: finite_or_text(v) for k, v in (row["summary"] or {}).items() if metrics(k)}
    print(json.dumps({"run": run, "project": row["project"], "name": row["name"], "status": row["status"],
                      "host": row["host"], "step": row["last_step"], "attempts": row.get("attempts") or 1,
                      **({} if history else {"last": last})}), flush=True)
    if row["status"] in ("finished", "crashed") and not history:
        return 0
    for page in client.follow(after=after, run=run, kinds=[KIND_METRIC, KIND_EVENT]):
        for item in steps_and_events(page.entries, metrics):
            line = json_line(item, metrics)
            if line is not None:
                print(line, flush=True)
            if item[3]:
                return 0
    return 0


SCAN_PAGES = 20  # a run with more metrics than its summary holds: history read this far for their names


def _metric_names(client: Client, run: str, row: dict, metrics: MetricFilter) -> set[str]:
    """Names of the run's metrics, enough to tell whether ``metrics`` matches one: the summary's
    (its most important), else the names its first pages of history hold."""
    names = set(row["summary"] or ())
    if any(map(metrics, names)) or len(names) >= (row.get("metrics") or 0):
        return names
    for n, page in enumerate(client.history(run, [KIND_METRIC])):
        names.update(e.metric for e in page.entries if e.metric is not None)
        if any(map(metrics, names)) or len(names) >= row["metrics"] or n + 1 >= SCAN_PAGES:
            break
    return names


def cmd_events(args: argparse.Namespace) -> int:
    with client_for(args) as client:
        run = client.resolve(args.run)
        narrator = Narrator()  # an acknowledgement names who asked, from the command before it
        for page in client.history(run, [KIND_EVENT]):
            for e in page.entries:
                body = entry_body(e)
                print(json.dumps(body, default=str) if args.json else narrator.line(body))
    return 0


def cmd_export(args: argparse.Namespace) -> int:
    with client_for(args) as client:
        run = client.resolve(args.run)
        try:
            out = open(args.output, "w", newline="") if args.output else sys.stdout  # noqa: SIM115 (stdout stays open)
        except OSError as exc:
            print(f"pilothouse: cannot write {args.output}: {exc.strerror}", file=sys.stderr)
            return EXIT_ERROR
        try:
            n = write_points(client.history(run, [KIND_METRIC]), out, args.format)
        finally:
            if args.output:
                out.close()
    if args.output:
        print(f"wrote {n} points of run {run} to {args.output}", file=sys.stderr)
    return 0
