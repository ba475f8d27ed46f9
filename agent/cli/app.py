"""``pilothouse gui`` and ``pilothouse demo``: the app and the demo, each started as its own process."""

from __future__ import annotations

import argparse
import subprocess
import sys


def add_parsers(sub: argparse._SubParsersAction) -> None:
    d = sub.add_parser("demo", help="a real RL run pair to watch and steer: an agent, two trainers and the app")
    d.add_argument("--headless", action="store_true", help="no app: print where to look instead")
    d.add_argument("--steps", type=int, default=2000, help="training steps per run")
    d.add_argument("--data", help="where the demo agent keeps its journal (default: a temporary folder)")
    d.set_defaults(func=cmd_demo)

    g = sub.add_parser("gui", help="open the desktop app (needs the gui extra: pip install 'pilothouse[gui]')",
                       add_help=False)
    g.set_defaults(func=cmd_gui)


def cmd_demo(args: argparse.Namespace) -> int:
    """An agent on a free loopback port, two GRPO runs with different hyperparameters, and the app."""
    from pilothouse.demo.launch import run_demo

    return run_demo(args.steps, args.data, headless=args.headless)


def cmd_gui(args: argparse.Namespace) -> int:
    """The app runs as its own module, so this command never imports Qt (GPU nodes lack it)."""
    return subprocess.call([sys.executable, "-m", "pilothouse.gui", *args.gui_args])
