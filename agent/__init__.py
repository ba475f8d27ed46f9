"""Pilothouse: watch and steer training runs.  ``import pilothouse as ph; run = ph.init(...)``.

This folder is the ``pilothouse`` package (``gui/`` is ``pilothouse.gui``).  ``import pilothouse``
stays cheap on GPU nodes: no Qt, no torch, no SQLite; ``pilothouse.torch`` and ``pilothouse.hf``
load their frameworks on first use.
"""

from pilothouse.version import __version__

__all__ = ["Effect", "Refused", "Run", "init", "__version__"]

_MODULES = ("torch", "hf", "client")


def __getattr__(name: str):
    """Everything loads on first use: ``ph.init`` the trainer side, ``ph.torch`` and ``ph.hf`` their
    frameworks, so the node agent, the CLI and the app never load the trainer or torch."""
    if name in ("init", "Run"):
        from pilothouse.trainer import run

        return run.init if name == "init" else run.Run
    if name in ("Effect", "Refused"):  # what a run.on_change callback returns or raises
        from pilothouse.trainer import helm

        return helm.Effect if name == "Effect" else helm.Refused
    if name in _MODULES:
        import importlib

        return importlib.import_module(f".{name}", __name__)
    raise AttributeError(f"module 'pilothouse' has no attribute {name!r}")
