"""Pilothouse: watch and steer training runs.  ``import pilothouse as ph; run = ph.init(...)``.

This folder is the ``pilothouse`` package (``gui/`` is ``pilothouse.gui``).  ``import pilothouse``
stays cheap on GPU nodes: no Qt, no torch, no SQLite; ``pilothouse.torch`` and ``pilothouse.hf``
load their frameworks on first use.
"""

from pilothouse.trainer.run import Run, init
from pilothouse.version import __version__

__all__ = ["Run", "init", "__version__"]

_ON_USE = ("torch", "hf", "client")


def __getattr__(name: str):
    """``pilothouse.torch`` and ``pilothouse.hf`` load on first use, so ``import pilothouse`` stays free of torch."""
    if name in _ON_USE:
        import importlib

        return importlib.import_module(f".{name}", __name__)
    raise AttributeError(f"module 'pilothouse' has no attribute {name!r}")
