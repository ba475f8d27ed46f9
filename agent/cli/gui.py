"""``pilothouse gui`` and ``pilothouse demo``: the app and the demo, each started as its own process."""

from __future__ import annotations

import argparse
import subprocess
import sys


def add_parsers(sub: argparse._SubParsersAction) -> None:
    d = sub.add_parser("demo", help="a real RL run pair to watch and steer: an agent, two trainers and the app")
    d.add_argument("--headless", action="store_true",
                   help="no app: print where to look instead (the default where there is no display)")
    d.add_argument("--steps", type=_count, default=0, help="training steps per run (default: until stopped)")
    d.add_argument("--pace", type=_seconds, default=0.2,
                   help="seconds per step at the least, so a person can steer (default 0.2; 0: full speed)")
    d.add_argument("--data", help="where the demo agent keeps its journal (default: a temporary folder)")
    d.add_argument("--keep", action="store_true", help="keep the temporary data folder at the end")
    d.set_defaults(func=cmd_demo)

    g = sub.add_parser("gui", help="open the desktop app (needs the gui extra: pip install 'pilothouse[gui]')",
                       add_help=False)
    g.set_defaults(func=cmd_gui)


def cmd_demo(args: argparse.Namespace) -> int:
    """An agent on a free loopback port, two GRPO runs with different hyperparameters, and the app."""
    from pilothouse.demo.launch import run_demo

    return run_demo(args.steps, args.data, headless=args.headless, keep=args.keep, pace=args.pace)


def _count(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be a whole number, got {text!r}") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be >= 0, got {value}")
    return value


def _seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be a number of seconds, got {text!r}") from None
    if not 0 <= value <= 60:
        raise argparse.ArgumentTypeError(f"must be a number of seconds in [0, 60], got {text}")
    return value


def cmd_gui(args: argparse.Namespace) -> int:
    """The app runs as its own module, so this command never imports Qt (GPU nodes lack it)."""
    return subprocess.call([sys.executable, "-m", "pilothouse.gui", *args.gui_args])
