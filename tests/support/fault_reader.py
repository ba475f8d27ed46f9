"""A stand-in for the app's process in test_faults: follows one agent with the app's own plain
network layer (``pilothouse.gui.network.Links``) into a ``LocalStore`` file, until it is killed.

Usage: python tests/support/fault_reader.py AGENT_URL STORE_PATH

It prints one line, ``ready qt=<bool>``, once its link runs; ``qt`` says whether any Qt module got
imported (it must not: the network layer and the local store are plain Python)."""

from __future__ import annotations

import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from pilothouse.gui.network import Links  # noqa: E402


def main(url: str, store_path: str) -> None:
    """Like a (re)started app: remember the agent (its cursor is kept), follow it, never exit."""
    links = Links(store_path, dead_after=1.0)
    links.add(url)
    links.start()
    qt = any(name.split(".")[0] in ("PySide6", "PyQt5", "PyQt6", "pyqtgraph") for name in sys.modules)
    print(f"ready qt={qt}", flush=True)
    while True:
        time.sleep(1.0)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
