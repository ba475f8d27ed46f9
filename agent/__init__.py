"""Pilothouse: watch and steer training runs.  ``import pilothouse as ph; run = ph.init(...)``.

This folder is the ``pilothouse`` package (``gui/`` is ``pilothouse.gui``).  ``import pilothouse``
stays cheap on GPU nodes: no Qt, no torch, no SQLite; ``pilothouse.torch`` and ``pilothouse.hf``
load their frameworks on first use.
"""

from pilothouse.version import __version__

__all__ = ["Run", "init", "__version__"]

_ON_USE = {"init": "trainer.run", "Run": "trainer.run", "torch": None, "hf": None, "client": None}


def __getattr__(name: str):
    """Everything loads on first use: ``ph.init`` the trainer side, ``ph.torch`` and ``ph.hf`` their
    frameworks, so the node agent, the CLI and the app never load the trainer or torch."""
    if name not in _ON_USE:
        raise AttributeError(f"module 'pilothouse' has no attribute {name!r}")
    import importlib

    module = importlib.import_module(f".{_ON_USE[name] or name}", __name__)
    return module if _ON_USE[name] is None else getattr(module, name)
