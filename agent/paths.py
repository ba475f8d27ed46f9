"""Where the node agent keeps its data: the CLI's ``agent`` command and a trainer starting one agree."""

from __future__ import annotations

import os
import warnings
from pathlib import Path

import platformdirs

ENV_DATA = "PILOTHOUSE_DATA"


def default_data_dir() -> Path:
    return Path(os.environ.get(ENV_DATA) or platformdirs.user_data_dir("pilothouse")) / "agent"


def watch_state_dir() -> Path:
    """Where ``pilothouse watch`` keeps what each agent acknowledged of each logdir."""
    return Path(os.environ.get(ENV_DATA) or platformdirs.user_data_dir("pilothouse")) / "watch"


ENV_RUNTIME = "PILOTHOUSE_RUNTIME"


def agents_dir() -> Path:
    """Where each running agent of this user records itself (``pilothouse.local_agents``): the user
    runtime dir ($XDG_RUNTIME_DIR, emptied at logout as the agents end), or $PILOTHOUSE_RUNTIME."""
    if os.environ.get(ENV_RUNTIME):
        return Path(os.environ[ENV_RUNTIME]) / "agents"
    with warnings.catch_warnings():  # no $XDG_RUNTIME_DIR (a container, cron): platformdirs' /tmp fallback is fine
        warnings.simplefilter("ignore")
        return Path(platformdirs.user_runtime_dir("pilothouse")) / "agents"
