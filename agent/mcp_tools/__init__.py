"""``pilothouse mcp``: the runs, and (when the owner allows) their steering, as tools of a Model Context
Protocol server, so an AI agent that watches a run for its owner reads what the CLI reads and gets the
trainer's own answer to a command.

The tools themselves (``reads``, ``history``, ``samples``, ``steering``) are plain functions over a
``Reach`` (which agents, the owner's keys) that return an ``Answer``; only ``server`` imports the
``mcp`` SDK (the ``pilothouse[mcp]`` extra), so the rest is tested and imported without it.
"""
