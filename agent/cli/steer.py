"""Steering: ``pilothouse pause``, ``resume``, ``checkpoint``, ``stop`` and ``set``."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from pilothouse.cli.common import EXIT_ERROR, RUN_HELP, Reader, client_for
from pilothouse.text import parse_assignment, printable, step_arg


def add_parsers(reader: Reader) -> None:
    for name, text in (("pause", "pause a run at its next step boundary"), ("resume", "resume a paused run"),
                       ("checkpoint", "ask a run to save a checkpoint now"),
                       ("stop", "ask a run to stop at its next step boundary")):
        c = reader(name, text, cmd_command)
        c.add_argument("run", help=RUN_HELP)
        c.set_defaults(timeout=30.0)
    c = reader("set", "change hyperparameters of a running run", cmd_command)
    c.add_argument("run", help=RUN_HELP)
    c.add_argument("values", nargs="+", type=_assignment, metavar="KEY=VALUE")
    c.add_argument("--at-step", type=step_arg, help="apply at this step instead of the next one")
    c.set_defaults(timeout=30.0)


def _assignment(text: str) -> tuple[str, Any]:
    try:
        return parse_assignment(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def cmd_command(args: argparse.Namespace) -> int:
    values = dict(getattr(args, "values", None) or []) or None
    with client_for(args, timeout=min(args.timeout, 5.0)) as client:
        row = client.command(args.run, args.command, values=values, at_step=getattr(args, "at_step", None),
                             wait=args.timeout)
    state = row["state"]
    if state in ("applied", "scheduled"):
        print(printable(f"{row['detail']} (run {row['run']}, command {row['cid']})"))
        return 0
    if state == "rejected":
        print(printable(f"pilothouse: {args.command} rejected: {row['detail']}"), file=sys.stderr)
    else:
        print(f"pilothouse: no acknowledgement within {args.timeout:g} s; the command stays queued "
              f"(id {row['cid']}) and applies at the trainer's next sync: see `pilothouse events {args.run}`",
              file=sys.stderr)
    return EXIT_ERROR
