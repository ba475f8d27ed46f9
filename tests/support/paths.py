"""Where things are: ``ROOT``, the checkout (pyproject.toml, the agent/ and gui/ sources, examples/),
for tests that run its files, read its sources or start processes in it."""

from __future__ import annotations

from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
