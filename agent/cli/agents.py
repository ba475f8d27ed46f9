"""``pilothouse agents`` and ``pilothouse agents stop``, and the agent a command without ``--agent``
talks to: the default address, else the one of the user's running agents (``pilothouse.local_agents``)
that holds the run asked for."""

from __future__ import annotations

import argparse
import json
import sys

from pilothouse.cli.common import EXIT_ERROR, EXIT_USAGE, positive, print_table
from pilothouse.client import AgentError, Client
from pilothouse.local_agents import QUICK, LocalAgent, agent_for, recorded, stop
from pilothouse.security import Keyring
from pilothouse.text import printable, url_arg
from pilothouse.wire.watched import USER_KINDS


def add_parser(sub: argparse._SubParsersAction, keys_arg: argparse.ArgumentParser) -> None:
    a = sub.add_parser("agents", parents=[keys_arg], help="list your running agents on this machine "
                                                           "(the ones a command without --agent asks); "
                                                           "`agents stop` stops one")
    a.add_argument("--json", action="store_true",
                   help="machine-readable: a list of {url, pid, data, started, runs} (runs: null when it does not answer)")
    a.set_defaults(func=cmd_agents)
    actions = a.add_subparsers(dest="action", metavar="ACTION")
    s = actions.add_parser("stop", help="stop your agent (its pid or URL, as `pilothouse agents` lists them) "
                                        "cleanly: it notes its stop in its journal and closes it, as on Ctrl-C",
                           description="Stop one of your agents on this machine, or --all: each gets SIGTERM, "
                                       "finishes its turn, notes its stop in its journal, closes it and ends. "
                                       "Its runs' trainers keep their records buffered until an agent is back.")
    s.add_argument("which", nargs="?", metavar="PID|URL", help="which agent (optional when you run one only)")
    s.add_argument("--all", action="store_true", help="stop every agent of yours on this machine")
    s.add_argument("--timeout", type=positive, default=30.0, help="seconds to wait for them to close (default 30)")
    s.set_defaults(func=cmd_stop)


def cmd_agents(args: argparse.Namespace) -> int:
    keys = Keyring(args.keys)
    if getattr(args, "json", False):
        print(json.dumps([{"url": a.url, "pid": a.pid, "data": a.data, "started": a.started,
                           "runs": _runs(a.url, keys)} for a in recorded()]))
        return 0
    rows = [("URL", "PID", "RUNS", "DATA")]
    for agent in recorded():
        rows.append((agent.url, str(agent.pid), _count(agent.url, keys), agent.data))
    if len(rows) == 1:
        print("no agent of yours is running on this machine (start one with `pilothouse agent`)")
        return 0
    print_table([tuple(printable(cell) for cell in row) for row in rows])
    return 0


def cmd_stop(args: argparse.Namespace) -> int:
    """Only the user's recorded agents are ever signalled: a pid or URL that is not one of them is an
    error that names the ones there are, and nothing is stopped."""
    if args.all and args.which:
        print("pilothouse agents stop: give PID|URL or --all, not both", file=sys.stderr)
        return EXIT_USAGE
    agents = recorded()
    if args.which is None and not agents:
        print("no agent of yours is running on this machine: nothing to stop")
        return 0
    if args.all or args.which is None and len(agents) == 1:
        chosen = agents
    elif args.which is None:
        print(printable(f"pilothouse agents stop: {len(agents)} agents of yours run here: {_named(agents)}; "
                        "say which (`pilothouse agents stop PID`), or --all"), file=sys.stderr)
        return EXIT_USAGE
    else:
        chosen, why = _matching(args.which, agents)
        if not chosen:
            print(printable(f"pilothouse agents stop: {why}"), file=sys.stderr)
            return EXIT_ERROR if why.startswith("not one of") else EXIT_USAGE
    ended = stop(chosen, args.timeout)
    failed = 0
    for agent in chosen:
        what, failed = ended[agent.pid], failed + (ended[agent.pid] not in ("stopped", "gone"))
        said = {"stopped": f"stopped the agent at {agent.url} (pid {agent.pid}, data in {agent.data})",
                "gone": f"the agent at {agent.url} (pid {agent.pid}) had already ended",
                "no clean stop": f"the agent at {agent.url} (pid {agent.pid}) ended before noting its stop: "
                                 f"its log ({agent.data}/agent.log, if ph.init started it) says why",
                "not yours": f"pid {agent.pid} is not your process (the system refused to signal it): left alone",
                "running": f"the agent at {agent.url} (pid {agent.pid}) is still closing after {args.timeout:g} s; "
                           f"wait, or `kill -9 {agent.pid}` (its journal keeps what it committed, but not "
                           "a note of the stop)"}[what]
        print(printable(said), file=sys.stdout if what in ("stopped", "gone") else sys.stderr)
    return EXIT_ERROR if failed else 0


def _matching(which: str, agents: list[LocalAgent]) -> tuple[list[LocalAgent], str]:
    """The agent ``which`` (a pid, or a URL) names, or none and why."""
    if which.isdigit():
        hits = [a for a in agents if a.pid == int(which)]
        what = f"pid {which}"
    else:
        try:
            url = url_arg(which)
        except argparse.ArgumentTypeError as exc:
            return [], f"{which!r} is neither a pid nor an agent URL ({exc})"
        hits = [a for a in agents if a.url == url]
        what = url
    yours = f"yours: {_named(agents)}" if agents else "no agent of yours is running on this machine"
    return hits, f"not one of your agents: {what} ({yours}); `pilothouse agents` lists them"


def _named(agents: list[LocalAgent]) -> str:
    return ", ".join(f"pid {a.pid} at {a.url}" for a in agents)


def _count(url: str, keys: Keyring) -> str:
    runs = _runs(url, keys)
    return "?" if runs is None else str(runs)  # ?: busy, or not answering: it runs (its pid is alive) but says nothing


def _runs(url: str, keys: Keyring) -> int | None:
    with Client(url, timeout=QUICK, keys=keys) as client:
        try:
            return sum(r["kind"] in USER_KINDS for r in client.runs())
        except AgentError:
            return None


def find_agent(args: argparse.Namespace) -> str:
    """The URL for a command given no ``--agent`` (nor $PILOTHOUSE_AGENT): ``agent_for`` its run."""
    return agent_for(getattr(args, "run", None), Keyring(args.keys))
