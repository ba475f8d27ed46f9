"""The ``pilothouse`` command.  It lives with the agent so it works on GPU nodes without Qt."""

from __future__ import annotations

import argparse
import csv
import json
import logging
import math
import os
import sqlite3
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from typing import IO, Any

from .cli_alerts import add_alerts_arguments, cmd_alerts
from .cli_keys import add_keys_parser
from .client import AgentError, Client, entry_body, entry_points
from .protocol import DEFAULT_URL, ENV_AGENT, KIND_EVENT, KIND_METRIC, check_url
from .security import ENV_KEYS, Keyring, SecurityError
from .tuning import parse_assignment

EXIT_ERROR = 1
EXIT_USAGE = 2


def main(argv: list[str] | None = None) -> int:
    parser = _parser()
    args, extra = parser.parse_known_args(argv)
    if args.command == "gui":
        args.gui_args = extra
    elif extra:
        parser.error(f"unrecognized arguments: {' '.join(extra)}")
    try:
        return args.func(args)
    except AgentError as exc:
        print(f"pilothouse: {exc}", file=sys.stderr)
        return EXIT_ERROR
    except SecurityError as exc:
        print(f"pilothouse: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:  # `pilothouse export RUN | head`
        sys.stderr.close()
        return 0


def url_arg(text: str) -> str:
    """argparse type for agent URLs: a clear usage error instead of a traceback."""
    try:
        return check_url(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _positive(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if not math.isfinite(value) or value <= 0:
        raise argparse.ArgumentTypeError(f"must be a positive number of seconds, got {text!r}")
    return value


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="pilothouse", description="Watch and steer training runs.")
    sub = p.add_subparsers(dest="command", required=True, metavar="COMMAND")
    default_agent = os.environ.get(ENV_AGENT) or DEFAULT_URL
    keys_arg = argparse.ArgumentParser(add_help=False)
    keys_arg.add_argument("--keys", help=f"CurveZMQ keyring directory (default: ${ENV_KEYS} or the user config dir)")

    a = sub.add_parser("agent", parents=[keys_arg], help="run the node agent in the foreground")
    a.add_argument("--bind", type=url_arg, default=DEFAULT_URL,
                   help=f"loopback address for trainers and local tools (default {DEFAULT_URL})")
    a.add_argument("--listen", type=url_arg, metavar="URL",
                   help="also listen here for remote apps and CLIs, CurveZMQ only (needs `pilothouse keys`)")
    a.add_argument("--data", help="data directory (default: the user data dir, or $PILOTHOUSE_DATA)")
    a.add_argument("--alerts", metavar="FILE", help="alert rules ([[rule]] tables in TOML), re-read when it changes")
    a.add_argument("--sample-interval", type=_positive, default=1.0, help="seconds between GPU/host samples")
    a.add_argument("--stale-after", type=_positive, default=5.0, help="seconds without heartbeat before a run is stale")
    a.add_argument("--log-level", default="INFO", choices=["DEBUG", "INFO", "WARNING", "ERROR"])
    a.set_defaults(func=cmd_agent)

    def reader(name: str, help: str, func: Callable[[argparse.Namespace], int]) -> argparse.ArgumentParser:
        r = sub.add_parser(name, parents=[keys_arg], help=help)
        r.add_argument("--agent", type=url_arg, default=default_agent, help=f"agent URL (default {default_agent})")
        r.add_argument("--timeout", type=_positive, default=5.0, help="seconds to wait for the agent")
        r.set_defaults(func=func)
        return r

    r = reader("runs", "list runs with status, step and last values", cmd_runs)
    r.add_argument("--json", action="store_true", help="machine-readable output")
    r.add_argument("--all", action="store_true", help="include the agent's host/GPU sampling runs")

    t = reader("tail", "print a run's metrics live", cmd_tail)
    t.add_argument("run", help="run id or unambiguous run name")
    t.add_argument("--history", action="store_true", help="print every stored point first")

    e = reader("export", "write every point of a run as CSV or JSON lines", cmd_export)
    e.add_argument("run", help="run id or unambiguous run name")
    e.add_argument("--format", choices=["csv", "jsonl"], default="csv")
    e.add_argument("-o", "--output", help="file to write (default: standard output)")

    for name, text in (("pause", "pause a run at its next step boundary"), ("resume", "resume a paused run"),
                       ("checkpoint", "ask a run to save a checkpoint now"),
                       ("stop", "ask a run to stop at its next step boundary")):
        c = reader(name, text, cmd_command)
        c.add_argument("run", help="run id or unambiguous run name")
        c.set_defaults(timeout=30.0)
    c = reader("set", "change hyperparameters of a running run", cmd_command)
    c.add_argument("run", help="run id or unambiguous run name")
    c.add_argument("values", nargs="+", type=_assignment, metavar="KEY=VALUE")
    c.add_argument("--at-step", type=int, help="apply at this step instead of the next one")
    c.set_defaults(timeout=30.0)

    add_keys_parser(sub, keys_arg, url_arg)
    add_alerts_arguments(reader("alerts", "firing and recent alerts; `alerts ls|add|rm` manage the rules",
                                cmd_alerts))

    d = sub.add_parser("demo", help="a real RL run pair to watch and steer: an agent, two trainers and the app")
    d.add_argument("--headless", action="store_true", help="no app: print where to look instead")
    d.add_argument("--steps", type=int, default=2000, help="training steps per run")
    d.add_argument("--data", help="where the demo agent keeps its journal (default: a temporary folder)")
    d.set_defaults(func=cmd_demo)

    g = sub.add_parser("gui", help="open the desktop app (needs the gui extra: pip install 'pilothouse[gui]')",
                       add_help=False)
    g.set_defaults(func=cmd_gui)

    ev = reader("events", "a run's audit trail: status, commands, acknowledgements, checkpoints", cmd_events)
    ev.add_argument("run", help="run id or unambiguous run name")
    ev.add_argument("--json", action="store_true", help="one JSON object per line")
    return p


def _assignment(text: str) -> tuple[str, Any]:
    try:
        return parse_assignment(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


# --- agent -------------------------------------------------------------------------------

def cmd_agent(args: argparse.Namespace) -> int:
    import zmq

    from .launcher import default_data_dir
    from .server import Agent

    logging.basicConfig(level=args.log_level, format="%(asctime)s %(name)s %(levelname)s %(message)s")
    data = args.data or default_data_dir()
    try:
        agent = Agent(args.bind, data, sample_interval=args.sample_interval, stale_after=args.stale_after,
                      listen=args.listen, keys=Keyring(args.keys), alerts=args.alerts)
    except ValueError as exc:
        print(f"pilothouse agent: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except zmq.ZMQError as exc:
        where = args.bind if args.listen is None else f"{args.bind} / {args.listen}"
        print(f"pilothouse agent: cannot listen on {where}: {exc} (is another agent running?)", file=sys.stderr)
        return EXIT_ERROR
    except (OSError, sqlite3.Error) as exc:
        print(f"pilothouse agent: cannot use data directory {data}: {exc}", file=sys.stderr)
        return EXIT_ERROR
    agent.serve_forever()
    return 0


# --- runs --------------------------------------------------------------------------------

def cmd_runs(args: argparse.Namespace) -> int:
    with Client(args.agent, timeout=args.timeout, keys=Keyring(args.keys)) as client:
        runs = client.runs()
    if not args.all:
        runs = [r for r in runs if r["kind"] == "train"]
    if args.json:
        json.dump(runs, sys.stdout, indent=1, default=str)
        print()
        return 0
    if not runs:
        print(f"no runs yet on {args.agent}: add `run = agent.init(project=..., name=...)` to a training script")
        return 0
    rows = [("ID", "RUN", "STATUS", "STEP", "HOST", "LOST", "ALERTS", "LAST VALUES")]
    for r in runs:
        lost = max(r["dropped_records"] or 0, r["lost_records"] or 0)
        values = "  ".join(f"{k}={fmt_value(v)}" for k, v in list(r["summary"].items())[:4])
        rows.append((r["id"], f"{r['project']}/{r['name']}", r["status"],
                     "-" if r["last_step"] is None else str(r["last_step"]), r["host"] or "-",
                     f"{lost} rec" if lost else "0", ",".join(r.get("alerts") or []) or "-", values))
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]) - 1)]
    for row in rows:
        print("  ".join(cell.ljust(w) for cell, w in zip(row, widths)) + "  " + row[-1])
    return 0


def fmt_value(v: float) -> str:
    return f"{v:.6g}"


# --- tail --------------------------------------------------------------------------------

def cmd_tail(args: argparse.Namespace) -> int:
    with Client(args.agent, timeout=args.timeout, keys=Keyring(args.keys)) as client:
        run = client.resolve(args.run)
        after = 0 if args.history else client.ping()["head"]
        row = next(r for r in client.runs() if r["id"] == run)
        print(f"{row['project']}/{row['name']} ({run}) {row['status']} on {row['host']}, "
              f"step {row['last_step']}", flush=True)
        if row["summary"] and not args.history:
            print("  ".join(f"{k}={fmt_value(v)}" for k, v in row["summary"].items()), flush=True)
        if row["status"] in ("finished", "crashed") and not args.history:
            return 0
        for page in client.follow(after=after, run=run, kinds=[KIND_METRIC, KIND_EVENT]):
            for line, ended in tail_lines(page.entries):
                print(line, flush=True)
                if ended:
                    return 0
    return 0


def tail_lines(entries: list) -> Iterator[tuple[str, bool]]:
    """One line per step with every metric of that step; events on lines of their own."""
    steps: dict[int, dict[str, float]] = {}
    for e in entries:
        if e.kind == KIND_METRIC:
            s, v, _ = entry_points(e)
            for step, value in zip(s.tolist(), v.tolist()):
                steps.setdefault(step, {})[e.metric] = value
    for step in sorted(steps):
        yield f"step {step:>8}  " + "  ".join(f"{k}={fmt_value(v)}" for k, v in steps[step].items()), False
    for e in entries:
        if e.kind == KIND_EVENT:
            body = entry_body(e)
            detail = " ".join(f"{k}={v}" for k, v in body.items() if k not in ("event", "time"))
            yield f"-- {body['event']}: {detail}", body.get("status") in ("finished", "crashed")


# --- steering ----------------------------------------------------------------------------

def cmd_command(args: argparse.Namespace) -> int:
    values = dict(getattr(args, "values", None) or []) or None
    with Client(args.agent, timeout=min(args.timeout, 5.0), keys=Keyring(args.keys)) as client:
        row = client.command(args.run, args.command, values=values, at_step=getattr(args, "at_step", None),
                             wait=args.timeout)
    state = row["state"]
    if state in ("applied", "scheduled"):
        print(f"{row['detail']} (run {row['run']}, command {row['cid']})")
        return 0
    if state == "rejected":
        print(f"pilothouse: {args.command} rejected: {row['detail']}", file=sys.stderr)
    else:
        print(f"pilothouse: no acknowledgement within {args.timeout:g} s; the command stays queued "
              f"(id {row['cid']}) and applies at the trainer's next sync: see `pilothouse events {args.run}`",
              file=sys.stderr)
    return EXIT_ERROR


DEMO_RUNS = (("lr3e-3", ["--lr", "3e-3", "--kl-coef", "0.05"]), ("lr1e-2", ["--lr", "1e-2", "--kl-coef", "0.1"]))


def cmd_demo(args: argparse.Namespace) -> int:
    """An agent on a free loopback port, two GRPO runs with different hyperparameters, and the app."""
    from .demo.launch import run_demo

    return run_demo(args.steps, args.data, headless=args.headless, runs=DEMO_RUNS)


def cmd_gui(args: argparse.Namespace) -> int:
    """The app runs as its own module, so this command never imports Qt (GPU nodes lack it)."""
    return subprocess.call([sys.executable, "-m", "gui", *args.gui_args])


def cmd_events(args: argparse.Namespace) -> int:
    with Client(args.agent, timeout=args.timeout, keys=Keyring(args.keys)) as client:
        run = client.resolve(args.run)
        for page in client.history(run, [KIND_EVENT]):
            for e in page.entries:
                body = entry_body(e)
                print(json.dumps(body, default=str) if args.json else event_line(body))
    return 0


def event_line(body: dict) -> str:
    """One readable line per audit event."""
    when = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(body.get("time", 0)))
    kind = body.get("event", "?")
    if kind == "command":
        extra = " ".join(f"{k}={v!r}" for k, v in (body.get("values") or {}).items())
        at = f" at step {body['at_step']}" if body.get("at_step") is not None else ""
        text = f"{body.get('cmd')} {extra}{at} by {_sender(body.get('who') or {})} id={body.get('cid')}"
    elif kind == "alert":
        step = "" if body.get("step") is None else f" at step {body['step']}"
        actions = f" -> {', '.join(body['actions'])}" if body.get("actions") else ""
        text = f"{body.get('rule')} {body.get('state')}{step} ({body.get('kind')}): {body.get('detail')}{actions}"
    elif kind in ("ack", "checkpoint"):
        step = "" if body.get("step") is None else f" at step {body['step']}"
        text = f"{body.get('cmd')} {body.get('state')}{step}: {body.get('detail')} id={body.get('cid')}"
    else:
        text = " ".join(f"{k}={v}" for k, v in body.items() if k not in ("event", "time"))
    return f"{when}  {kind:<10}  {text}"


def _sender(who: dict) -> str:
    claimed = f"{who.get('user', '?')}@{who.get('host', '?')} ({who.get('client', '?')})"
    if who.get("via") == "alert":
        return f"alert rule {who.get('rule')}"
    if who.get("via") == "curve":
        return f"{who.get('name')} [key {str(who.get('key'))[:12]}...] as {claimed}"
    return claimed


# --- export ------------------------------------------------------------------------------

def cmd_export(args: argparse.Namespace) -> int:
    with Client(args.agent, timeout=args.timeout, keys=Keyring(args.keys)) as client:
        run = client.resolve(args.run)
        try:
            out = open(args.output, "w", newline="") if args.output else sys.stdout
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


def write_points(pages: Iterator[Any], out: IO[str], fmt: str) -> int:
    """Long format metric,step,value,wall_time; floats written so they read back bit-exact."""
    n = 0
    writer = csv.writer(out) if fmt == "csv" else None
    if writer:
        writer.writerow(["metric", "step", "value", "wall_time"])
    for page in pages:
        for e in page.entries:
            steps, vals, times = entry_points(e)
            for step, value, wall in zip(steps.tolist(), vals.tolist(), times.tolist()):
                if writer:
                    writer.writerow([e.metric, step, repr(value), repr(wall)])
                else:
                    out.write(json.dumps({"metric": e.metric, "step": step,
                                          "value": value if math.isfinite(value) else repr(value),
                                          "wall_time": wall}) + "\n")
                n += 1
    return n
