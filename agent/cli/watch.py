"""``pilothouse watch LOGDIR...`` follows TensorBoard logdirs and RL frameworks' run folders live into
an agent; ``--run NAME PATH...`` follows files of several kinds as one run (``pilothouse import``, in
``import_cmd``, follows them once); the reading is ``pilothouse.watch``'s."""

from __future__ import annotations

import argparse
import signal
import sys
import threading
from pathlib import Path

from pilothouse.cli.common import EXIT_ERROR, EXIT_USAGE, name_arg
from pilothouse.client import AgentUnavailable
from pilothouse.security import Keyring
from pilothouse.text import printable, url_arg

NEEDS = "watching TensorBoard logdirs needs tensorboard's event reader: pip install 'pilothouse[tensorboard]'"


def add_parser(sub: argparse._SubParsersAction, keys_arg: argparse.ArgumentParser, default_agent: str) -> None:
    w = sub.add_parser("watch", parents=[keys_arg],
                       help="follow TensorBoard logdirs and RL frameworks' files live into an agent (no code change)")
    w.add_argument("logdirs", nargs="+", type=Path, metavar="PATH",
                   help="a folder of runs: a framework's run folder (a TRL output_dir) is a run, and every other "
                        "folder holding event files; with --run, files and folders of one run")
    w.add_argument("--agent", type=url_arg, default=default_agent, help=f"agent URL (default {default_agent})")
    add_project(w)
    add_run(w)
    w.set_defaults(func=cmd_watch)


def add_run(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--run", type=name_arg("run name"), metavar="NAME",
                        help="the PATHs are one run of this name: scalars and rollouts from any of them (a verl "
                             "file-logger .jsonl, its rollout and validation dump folders, TensorBoard event files, "
                             "a TRL completions folder, ...)")


def add_project(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--project", type=name_arg("project"), help="the runs' project (default: the LOGDIR's name; "
                        "for W&B and MLflow runs, their W&B project or MLflow experiment)")


def cmd_watch(args: argparse.Namespace) -> int:
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    return follow(args, stop, once=False)


def follow(args: argparse.Namespace, stop: threading.Event, once: bool, logdirs: list[Path] | None = None) -> int:
    try:
        from pilothouse.watch.follower import Watcher, WatchError
        from pilothouse.watch.offsets import StateError
    except ImportError:
        print(f"pilothouse: {NEEDS}", file=sys.stderr)
        return EXIT_USAGE
    try:
        watcher = Watcher(logdirs or args.logdirs, args.agent, args.project, once=once, say=_say,
                          keys=Keyring(args.keys), run_name=getattr(args, "run", None))
    except (WatchError, StateError) as exc:
        print(printable(f"pilothouse: {exc}"), file=sys.stderr)
        return EXIT_USAGE
    try:
        return watcher.run(stop)
    except KeyboardInterrupt:
        return 0  # the watcher kept what the agent acknowledged; a restart goes on from there
    except AgentUnavailable as exc:
        print(printable(f"pilothouse: {exc}"), file=sys.stderr)
        return EXIT_ERROR


def _say(line: str) -> None:
    print(printable(line), file=sys.stderr, flush=True)

