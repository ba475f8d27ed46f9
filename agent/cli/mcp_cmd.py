"""``pilothouse mcp``: a Model Context Protocol server over stdio, through which an AI agent reads the owner's
runs and, with ``--allow-steer``, steers them (``pilothouse.mcp_tools``; docs/mcp.md).

It is the owner's local process, started by the MCP client: it talks JSON-RPC on its standard input and
output and opens no listener; it reaches agents as every other command does (the owner's keys).
"""

from __future__ import annotations

import argparse
import os
import sys

from pilothouse.cli.common import EXIT_USAGE, positive
from pilothouse.security import Keyring
from pilothouse.text import url_arg
from pilothouse.wire.urls import ENV_AGENT

NO_SDK = ("pilothouse mcp needs the MCP SDK, an optional extra: pip install 'pilothouse[mcp]' "
          "(or pip install 'mcp>=2')")


def add_parser(sub: argparse._SubParsersAction, keys_arg: argparse.ArgumentParser) -> None:
    m = sub.add_parser("mcp", parents=[keys_arg],
                       help="serve your runs to an AI agent as MCP tools over stdio (read-only unless --allow-steer)",
                       description="A Model Context Protocol server over stdio: an MCP client (a coding agent, a chat "
                                   "app) starts it and calls its tools to read runs (list_runs, run_summary, "
                                   "metric_history, rollouts, search_rollouts, events, alerts) and, with "
                                   "--allow-steer, to pause, resume, checkpoint, stop and set hyperparameters. "
                                   "See docs/mcp.md.")
    m.add_argument("--agent", dest="agents", action="append", type=url_arg, default=[], metavar="URL",
                   help=f"an agent to read (repeatable; default: ${ENV_AGENT} if set, else your agents on this "
                        "machine, as `pilothouse agents` lists them, looked up at each call)")
    m.add_argument("--allow-steer", action="store_true",
                   help="let the tools pause, resume, checkpoint, stop and set hyperparameters (each command is "
                        "recorded in the run's events as sent through MCP); without it the steering tools refuse")
    m.add_argument("--timeout", type=positive, default=5.0, help="seconds to wait for an agent's answer")
    m.set_defaults(func=cmd_mcp)


def cmd_mcp(args: argparse.Namespace) -> int:
    try:
        from pilothouse.mcp_tools.server import build
    except ImportError as exc:
        if exc.name is not None and (exc.name == "mcp" or exc.name.startswith("mcp.")):
            print(f"pilothouse: {NO_SDK}", file=sys.stderr)
            return EXIT_USAGE
        raise
    from pilothouse.mcp_tools.reach import Reach

    urls = args.agents or ([url_arg(os.environ[ENV_AGENT])] if os.environ.get(ENV_AGENT) else [])
    if sys.stdin.isatty():  # a person ran it by hand: say what it is while it waits for a client
        print("pilothouse mcp: an MCP server speaking JSON-RPC on stdin/stdout; add it to an MCP client's "
              "configuration (docs/mcp.md). Ctrl-C ends it.", file=sys.stderr)
    build(Reach(urls, Keyring(args.keys), args.timeout), args.allow_steer).run("stdio")
    return 0
