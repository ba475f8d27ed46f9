"""Pilothouse trainer library and node agent.

``import agent`` stays cheap and never imports Qt or torch: it runs on GPU nodes.
"""

__version__ = "0.1.0"

from agent.trainer.run import Run, init  # noqa: E402  (after __version__, which the agent reports)

__all__ = ["Run", "init", "__version__"]


def __getattr__(name: str):
    """``agent.torch`` and ``agent.hf`` load on first use, so ``import agent`` stays free of torch."""
    if name in ("torch", "hf"):
        import importlib

        return importlib.import_module(f".{name}", __name__)
    raise AttributeError(f"module 'agent' has no attribute {name!r}")
