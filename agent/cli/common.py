"""What every command shares: exit codes, argument types, the client for a command's ``--agent``."""

from __future__ import annotations

import argparse
import math
from collections.abc import Callable

from pilothouse.client import Client
from pilothouse.security import Keyring
from pilothouse.wire.checks import normal_name

EXIT_ERROR = 1
EXIT_USAGE = 2
# A re-run shares its name with the runs before it: the name means the live one (pilothouse.node.run_refs)
RUN_HELP = "run id or run name (a name several runs share means the one live run; else give the id)"

def client_for(args: argparse.Namespace, timeout: float | None = None) -> Client:
    """The client a reader command uses: its --agent, --timeout and --keys."""
    return Client(args.agent, timeout=args.timeout if timeout is None else timeout, keys=Keyring(args.keys))


Command = Callable[[argparse.Namespace], int]
Reader = Callable[[str, str, Command], argparse.ArgumentParser]  # adds a command that talks to an agent


def positive(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if not math.isfinite(value) or value <= 0:
        raise argparse.ArgumentTypeError(f"must be a positive number of seconds, got {text!r}")
    return value


def name_arg(what: str) -> Callable[[str], str]:
    """argparse type for a project or metric name: checked (and put in NFC) as a trainer checks it,
    so a name no run could log is a usage error here and never reaches the agent."""
    def check(text: str) -> str:
        try:
            return normal_name(text, what)
        except ValueError as exc:
            raise argparse.ArgumentTypeError(str(exc)) from None
    return check


def print_table(rows: list[tuple[str, ...]]) -> None:
    """Rows of cells (the first a header) in columns as wide as their widest cell."""
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    for row in rows:
        print("  ".join(cell.ljust(w) for cell, w in zip(row, widths)).rstrip())
