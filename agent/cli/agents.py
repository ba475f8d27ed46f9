"""``pilothouse agents``, and the agent a command without ``--agent`` talks to: the default address,
else the one of the user's running agents (``pilothouse.local_agents``) that holds the run asked for."""

from __future__ import annotations

import argparse

from pilothouse.cli.common import print_table
from pilothouse.client import AgentError, Client
from pilothouse.local_agents import QUICK, agent_for, recorded
from pilothouse.security import Keyring
from pilothouse.text import printable
from pilothouse.wire.watched import USER_KINDS


def add_parser(sub: argparse._SubParsersAction, keys_arg: argparse.ArgumentParser) -> None:
    a = sub.add_parser("agents", parents=[keys_arg], help="list your running agents on this machine "
                                                           "(the ones a command without --agent asks)")
    a.set_defaults(func=cmd_agents)


def cmd_agents(args: argparse.Namespace) -> int:
    keys = Keyring(args.keys)
    rows = [("URL", "PID", "RUNS", "DATA")]
    for agent in recorded():
        rows.append((agent.url, str(agent.pid), _count(agent.url, keys), agent.data))
    if len(rows) == 1:
        print("no agent of yours is running on this machine (start one with `pilothouse agent`)")
        return 0
    print_table([tuple(printable(cell) for cell in row) for row in rows])
    return 0


def _count(url: str, keys: Keyring) -> str:
    with Client(url, timeout=QUICK, keys=keys) as client:
        try:
            return str(sum(r["kind"] in USER_KINDS for r in client.runs()))
        except AgentError:
            return "?"  # busy, or not answering: it runs (its pid is alive) but says nothing now


def find_agent(args: argparse.Namespace) -> str:
    """The URL for a command given no ``--agent`` (nor $PILOTHOUSE_AGENT): ``agent_for`` its run."""
    return agent_for(getattr(args, "run", None), Keyring(args.keys))
