"""Retention: ``pilothouse rm`` and ``pilothouse gc`` remove runs from an agent, after saying what goes.

Both ask the agent first what would go (it resolves the names and refuses a live run), show it,
ask for a confirmation on a terminal (``--yes`` skips it; without a terminal it is required), and
only then remove: the agent hides the runs at once and deletes their rows in the background.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Callable

from pilothouse.cli.common import EXIT_ERROR, EXIT_USAGE, Reader, client_for
from pilothouse.client import Client
from pilothouse.text import fmt_bytes, parse_age, parse_size, printable


def add_parsers(reader: Reader) -> None:
    r = reader("rm", "remove runs and all their data from the agent", cmd_rm)
    r.add_argument("runs", nargs="+", metavar="RUN", help="run id or unambiguous run name")
    r.add_argument("--force", action="store_true", help="remove a live (running or paused) run too")
    r.add_argument("-y", "--yes", action="store_true", help="remove without asking")

    g = reader("gc", "remove ended runs: those older than an age, or the oldest until the data fits a size", cmd_gc)
    g.add_argument("--older-than", type=_arg(parse_age), metavar="AGE",
                   help="runs that ended (stale ones: were last heard) longer ago than AGE: 30d, 12h, 2w (s m h d w)")
    g.add_argument("--max-size", type=_arg(parse_size), metavar="SIZE",
                   help="also the oldest ended runs until the journal's data is at most SIZE: 50GB, 800MB, 2TiB")
    g.add_argument("--dry-run", action="store_true", help="list what would go, remove nothing")
    g.add_argument("--json", action="store_true", help='with --dry-run: machine-readable, {"runs": [...], "total": '
                                                       'BYTES, "left": BYTES} (the journal\'s data now and after)')
    g.add_argument("-y", "--yes", action="store_true", help="remove without asking")


def _arg(parse: Callable[[str], object]) -> Callable[[str], object]:
    def check(text: str) -> object:
        try:
            return parse(text)
        except ValueError as exc:
            raise argparse.ArgumentTypeError(str(exc)) from None
    return check


def cmd_rm(args: argparse.Namespace) -> int:
    with client_for(args) as client:
        return _remove(client, args, client.remove(args.runs, force=args.force, plan=True), args.force)


def cmd_gc(args: argparse.Namespace) -> int:
    if args.older_than is None and args.max_size is None:
        print("pilothouse gc: say which runs: --older-than AGE (30d), --max-size SIZE (50GB), or both",
              file=sys.stderr)
        return EXIT_USAGE
    if args.json and not args.dry_run:
        print("pilothouse gc: --json says what would go: use it with --dry-run", file=sys.stderr)
        return EXIT_USAGE
    with client_for(args) as client:
        found = client.gc_plan(args.older_than, args.max_size)
        if args.json:
            print(json.dumps({"runs": found["runs"], "total": found["total"], "left": found["left"]}, default=str))
            return 0
        runs = found["runs"]
        if args.max_size is not None and found["left"] > args.max_size:
            print(f"the journal's data stays at {fmt_bytes(found['left'])} after this, above "
                  f"{fmt_bytes(args.max_size)}: the rest is in runs that have not ended", file=sys.stderr)
        if not runs:
            print(f"nothing to remove: no ended run matches (the journal's data is {fmt_bytes(found['total'])})")
            return 0
        if args.dry_run:
            _show(runs)
            print(f"would remove {_total(runs)}; the journal's data would go from {fmt_bytes(found['total'])} to "
                  f"{fmt_bytes(found['left'])}")
            return 0
        return _remove(client, args, runs, False)


def _remove(client: Client, args: argparse.Namespace, runs: list[dict], force: bool) -> int:
    """Show ``runs``, confirm, remove them; the agent checks each again (a run may have resumed)."""
    _show(runs)
    if not args.yes:
        if not sys.stdin.isatty():
            print("pilothouse: not removing anything without a confirmation: pass --yes to remove without asking",
                  file=sys.stderr)
            return EXIT_USAGE
        try:
            answer = input(f"Remove {_total(runs)}? This cannot be undone. [y/N] ")
        except EOFError:
            answer = ""
        if answer.strip().lower() not in ("y", "yes"):
            print("nothing removed", file=sys.stderr)
            return EXIT_ERROR
    removed = client.remove([r["id"] for r in runs], force=force)
    print(f"removed {_total(removed)}; the agent deletes their data in the background")
    return 0


def _show(runs: list[dict]) -> None:
    for r in runs:
        ended = f"  ended {time.strftime('%Y-%m-%d %H:%M', time.localtime(r['ended']))}" if r.get("ended") else ""
        print(printable(f"  {r['project']}/{r['name']} ({r['id']})  {r['status']}  {r['points']:,} points  "
                        f"{fmt_bytes(r['bytes'])}{ended}"))


def _total(runs: list[dict]) -> str:
    return (f"{len(runs)} run{'s' if len(runs) != 1 else ''} ({sum(r['points'] for r in runs):,} points, "
            f"{fmt_bytes(sum(r['bytes'] for r in runs))})")
