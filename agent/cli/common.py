"""What every command shares: exit codes, argument types, the client for a command's ``--agent``."""

from __future__ import annotations

import argparse
import math
from collections.abc import Callable

from pilothouse.client import Client
from pilothouse.security import Keyring

EXIT_ERROR = 1
EXIT_USAGE = 2

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
