"""``pilothouse agent``: the node agent in the foreground."""

from __future__ import annotations

import argparse
import logging
import sqlite3
import sys
import threading
from pathlib import Path
from typing import Any

from pilothouse.cli.common import EXIT_ERROR, EXIT_USAGE, positive
from pilothouse.cli.watch import NEEDS
from pilothouse.local_agents import forget, record
from pilothouse.paths import default_data_dir
from pilothouse.security import Keyring, SecurityError
from pilothouse.text import PrintableFormatter, printable, url_arg
from pilothouse.wire.urls import DEFAULT_URL


def add_parser(sub: argparse._SubParsersAction, keys_arg: argparse.ArgumentParser) -> None:
    a = sub.add_parser("agent", parents=[keys_arg], help="run the node agent in the foreground")
    a.add_argument("--bind", type=url_arg, default=DEFAULT_URL,
                   help=f"loopback address for trainers and local tools (default {DEFAULT_URL})")
    a.add_argument("--listen", type=url_arg, metavar="URL",
                   help="also listen here for remote apps and CLIs, CurveZMQ only (needs `pilothouse keys`)")
    a.add_argument("--data", help="data directory (default: the user data dir, or $PILOTHOUSE_DATA)")
    a.add_argument("--alerts", metavar="FILE", help="alert rules ([[rule]] tables in TOML), re-read when it changes")
    a.add_argument("--sample-interval", type=positive, default=1.0, help="seconds between GPU/host samples")
    a.add_argument("--stale-after", type=positive, default=5.0, help="seconds without heartbeat before a run is stale")
    a.add_argument("--log-level", default="INFO", choices=["DEBUG", "INFO", "WARNING", "ERROR"])
    a.add_argument("--watch", action="append", type=Path, metavar="LOGDIR", default=[],
                   help="also follow this TensorBoard logdir's runs into the agent (as `pilothouse watch`); repeatable")
    a.add_argument("--recover", action="store_true",
                   help="copy what can be read of a damaged journal into a new one (the agent must be stopped), "
                        "keep the damaged file beside it, and exit")
    a.set_defaults(func=cmd_agent)


def cmd_agent(args: argparse.Namespace) -> int:
    import zmq

    from pilothouse.node.data_lock import DataLocked
    from pilothouse.node.server import Agent

    handler = logging.StreamHandler()
    handler.setFormatter(PrintableFormatter("%(asctime)s %(name)s %(levelname)s %(message)s"))
    logging.basicConfig(level=args.log_level, handlers=[handler])
    logging.raiseExceptions = False  # a log line that cannot be written (a full disk) is dropped, not a traceback
    data = args.data or default_data_dir()
    if args.recover:
        return _recover(args, Path(data))
    watcher = _watcher(args) if args.watch else None
    if isinstance(watcher, int):
        return watcher
    try:
        agent = Agent(args.bind, data, sample_interval=args.sample_interval, stale_after=args.stale_after,
                      listen=args.listen, keys=Keyring(args.keys), alerts=args.alerts)
    except ValueError as exc:
        print(f"pilothouse agent: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except DataLocked as exc:
        print(printable(f"pilothouse agent: {exc}"), file=sys.stderr)
        return EXIT_ERROR
    except zmq.ZMQError as exc:
        where = args.bind if args.listen is None else f"{args.bind} / {args.listen}"
        print(f"pilothouse agent: cannot listen on {where}: {exc} (is another agent running? `pilothouse runs "
              f"--agent {args.bind}` says what listens there)", file=sys.stderr)
        return EXIT_ERROR
    except (OSError, sqlite3.Error) as exc:
        print(f"pilothouse agent: cannot use data directory {data}: {exc}", file=sys.stderr)
        return EXIT_ERROR
    stop = threading.Event()
    if watcher is not None:
        thread = threading.Thread(target=watcher.run, args=(stop,), name="pilothouse-watch", daemon=True)
        thread.start()
    mark = _record(args.bind, data)
    try:
        agent.serve_forever()
    finally:
        if mark is not None:
            forget(mark)
    if watcher is not None:
        stop.set()
        thread.join(timeout=5)
    return 0


def _record(url: str, data: str | Path) -> Path | None:
    """Record the agent for the commands that find it with no ``--agent`` (``pilothouse agents``); an
    agent that cannot record itself still serves, found by its URL only."""
    try:
        return record(url, data)
    except (OSError, SecurityError) as exc:
        logging.getLogger("pilothouse.agent").warning("not recorded among your agents: %s", exc)
        return None


def _watcher(args: argparse.Namespace) -> Any:
    """``--watch``: a watcher for a thread of the agent's process, talking to the agent as a trainer does
    (the agent's loop never waits on files); an exit status if a logdir cannot be watched."""
    try:
        from pilothouse.watch.follower import Watcher, WatchError
        from pilothouse.watch.offsets import StateError
    except ImportError:
        print(f"pilothouse agent: {NEEDS}", file=sys.stderr)
        return EXIT_USAGE
    log = logging.getLogger("pilothouse.watch")
    try:
        watcher = Watcher(args.watch, args.bind, say=log.warning, keys=Keyring(args.keys))
    except (WatchError, StateError) as exc:
        print(printable(f"pilothouse agent: --watch: {exc}"), file=sys.stderr)
        return EXIT_USAGE
    watcher.flush_timeout = 0.0  # at exit the agent has stopped answering; the state says what it holds
    return watcher


def _recover(args: argparse.Namespace, data: Path) -> int:
    """The agent's lock on the folder is taken first (an agent on any port holds it), then every
    table is copied and what could not be kept is said: rows, whole tables, and each run's points."""
    from pilothouse.node.data_lock import DataLocked
    from pilothouse.node.recover import recover

    journal = data / "journal.sqlite"
    if not journal.is_file():
        print(f"pilothouse agent: no journal at {journal}", file=sys.stderr)
        return EXIT_USAGE
    try:
        salvage = recover(journal)
    except DataLocked as exc:
        print(printable(f"pilothouse agent: {exc}"), file=sys.stderr)
        return EXIT_ERROR
    except (OSError, sqlite3.Error) as exc:
        print(f"pilothouse agent: cannot recover {journal}: {exc}", file=sys.stderr)
        return EXIT_ERROR
    for table, kept in salvage.kept.items():
        lost = salvage.lost[table]
        print(printable(f"{table}: {kept} rows kept" + (f", {lost} unreadable" if lost else "")))
    for table, why in salvage.dropped.items():
        print(printable(f"{table}: NOT COPIED, none of it could be read ({why})"))
    short = {run: (kept, had) for run, (kept, had) in salvage.points.items() if kept < had}
    for run, (kept, had) in short.items():
        print(printable(f"run {run}: {kept} of {had} points kept, {had - kept} lost (counted in its LOST)"))
    print(f"{len(salvage.points) - len(short)} run(s) kept every point")
    print(f"new journal at {journal}; the damaged one is {salvage.damaged}")
    return 0
