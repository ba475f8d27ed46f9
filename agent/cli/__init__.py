"""The ``pilothouse`` command, one module per command group.  It never imports Qt, so it works on
GPU nodes; ``gui`` and ``demo`` start the app as a process of its own."""

from __future__ import annotations

import argparse
import os
import sys

from pilothouse.cli import (
    agent,
    agents,
    alerts,
    archive,
    gui,
    import_cmd,
    key_metric,
    keys,
    mcp_cmd,
    read,
    retention,
    rollouts,
    steer,
    watch,
)
from pilothouse.cli.common import EXIT_ERROR, EXIT_USAGE, Command, positive
from pilothouse.client import AgentError
from pilothouse.security import ENV_KEYS, SecurityError
from pilothouse.text import printable, url_arg
from pilothouse.version import __version__
from pilothouse.wire.urls import DEFAULT_URL, ENV_AGENT


def main(argv: list[str] | None = None) -> int:
    parser = _parser()
    args, extra = parser.parse_known_args(rollouts.join_sort(sys.argv[1:] if argv is None else argv))
    if args.command == "gui":
        args.gui_args = extra
    elif extra:
        parser.error(f"unrecognized arguments: {' '.join(extra)}")
    try:
        if getattr(args, "agent", "") is None:  # no --agent, no $PILOTHOUSE_AGENT: the user's local agents
            args.agent = agents.find_agent(args)
        return args.func(args)
    except AgentError as exc:  # its text is the agent's (or whatever answered there): shown, never acted on
        print(printable(f"pilothouse: {exc}"), file=sys.stderr)
        return EXIT_ERROR
    except SecurityError as exc:
        print(f"pilothouse: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:  # `pilothouse export RUN | head`
        sys.stderr.close()
        return 0


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="pilothouse", description="Watch and steer training runs.")
    p.add_argument("--version", action="version", version=f"pilothouse {__version__}")
    sub = p.add_subparsers(dest="command", required=True, metavar="COMMAND")
    default_agent = os.environ.get(ENV_AGENT) or DEFAULT_URL
    found = os.environ.get(ENV_AGENT)  # None: find_agent picks among the user's agents
    found_help = (f"agent URL (default {found})" if found else
                  f"agent URL (default {DEFAULT_URL}, else the one of your agents (`pilothouse agents`) "
                  "holding the run)")
    keys_arg = argparse.ArgumentParser(add_help=False)
    keys_arg.add_argument("--keys", help=f"CurveZMQ keyring directory (default: ${ENV_KEYS} or the user config dir)")

    def reader(name: str, help: str, func: Command) -> argparse.ArgumentParser:
        r = sub.add_parser(name, parents=[keys_arg], help=help)
        r.add_argument("--agent", type=url_arg, default=found, help=found_help)
        r.add_argument("--timeout", type=positive, default=5.0, help="seconds to wait for the agent")
        r.set_defaults(func=func)
        return r

    agent.add_parser(sub, keys_arg)
    agents.add_parser(sub, keys_arg)
    read.add_parsers(reader)
    archive.add_parser(reader)
    import_cmd.add_parser(reader)
    retention.add_parsers(reader)
    rollouts.add_parser(reader)
    steer.add_parsers(reader)
    keys.add_parser(sub, keys_arg)
    alerts.add_parser(reader)
    key_metric.add_parser(reader)
    gui.add_parsers(sub)
    mcp_cmd.add_parser(sub, keys_arg)
    watch.add_parser(sub, keys_arg, default_agent)
    return p
