"""Where the node agent keeps its data: the CLI's ``agent`` command and a trainer starting one agree."""

from __future__ import annotations

import os
from pathlib import Path

import platformdirs

ENV_DATA = "PILOTHOUSE_DATA"


def default_data_dir() -> Path:
    return Path(os.environ.get(ENV_DATA) or platformdirs.user_data_dir("pilothouse")) / "agent"


def watch_state_dir() -> Path:
    """Where ``pilothouse watch`` keeps what each agent acknowledged of each logdir."""
    return Path(os.environ.get(ENV_DATA) or platformdirs.user_data_dir("pilothouse")) / "watch"
