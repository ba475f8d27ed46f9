"""What every command shares: exit codes, argument types, the options of a command that asks an agent."""

from __future__ import annotations

import argparse
import math
from collections.abc import Callable

EXIT_ERROR = 1
EXIT_USAGE = 2

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
