"""Pilothouse trainer library and node agent.

``import agent`` stays cheap and never imports Qt or torch: it runs on GPU nodes.
"""

__version__ = "0.1.0"

from .run import Run, init  # noqa: E402  (after __version__, which the agent reports)

__all__ = ["Run", "init", "__version__"]
