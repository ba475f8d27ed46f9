"""``pilothouse runs --job RUN``: a multi-node job from any one of its agents.

Every rank's hello told its agent the job's nodes, so the agent asked lists them all; those this
machine can reach (its own, and any on this host) are asked for the run's state there, the others
get the SSH tunnel that reaches them and the one app command that opens the whole job.
"""

from __future__ import annotations

import argparse
import json
import shlex
import socket
import sys

from pilothouse.cli.common import EXIT_ERROR, client_for, print_table
from pilothouse.client import AgentUnavailable, Client
from pilothouse.security import Keyring
from pilothouse.text import printable
from pilothouse.wire.job import TUNNEL_PORT, format_ranks, tunnel_command


def cmd_job(args: argparse.Namespace) -> int:
    with client_for(args) as client:
        run_id = client.resolve(args.job)
        run = next(r for r in client.runs() if r["id"] == run_id)
        asked_host = client.ping()["host"]
    nodes = run.get("nodes") or [{"host": run["host"] or asked_host, "agent": args.agent, "ranks": [0]}]
    on_asked = [n for n in nodes if n["host"] == asked_host]
    here = socket.gethostname()
    rows, tunnels, urls = [], [], []
    for node in nodes:
        url = _reach(node, here, args.agent if on_asked == [node] else None)
        state = _state(url, run_id, args) if url else None
        if url is None:
            port = TUNNEL_PORT + len(tunnels)
            try:
                tunnels.append(tunnel_command(port, node))
                urls.append(f"tcp://127.0.0.1:{port}")
            except ValueError as exc:  # a host no pasted command may name
                state = {"status": str(exc)}
        else:
            urls.append(url)
        rows.append({**node, "reached": url, **(state or {})})
    if args.json:
        json.dump({"run": run_id, "project": run["project"], "name": run["name"], "nodes": rows}, sys.stdout,
                  indent=1, default=str)
        print()
        return 0
    ranks = sum(len(n["ranks"]) for n in nodes)
    print(printable(f"job {run['project']}/{run['name']} ({run_id}): {len(nodes)} node{'s' * (len(nodes) != 1)}"
                    + (f", {ranks} ranks" if ranks else "")))
    table = [("HOST", "AGENT", "RANKS", "STATUS", "STEP")]
    for r in rows:
        status = r.get("status") or ("not reachable from here" if r["reached"] is None else "unreachable")
        table.append(tuple(map(printable, (r["host"], r["agent"], format_ranks(r["ranks"]) or "-", status,
                                           "-" if r.get("last_step") is None else str(r["last_step"])))))
    print_table(table)
    if tunnels:
        print("reach the other nodes from here (one tunnel each, to their loopback agents):")
        for t in tunnels:
            print(printable(f"  {t}"))
    print(printable("open the whole job in the app: "
                    + shlex.join(["pilothouse", "gui", *(a for u in urls for a in ("--agent", u))])))
    return 0 if all(r["reached"] is None or r.get("status") for r in rows) else EXIT_ERROR


def _reach(node: dict, here: str, asked: str | None) -> str | None:
    """The URL that reaches ``node``'s agent from this machine: the one asked (the user's own way
    there, a tunnel perhaps), its loopback URL on this host, or None."""
    if asked is not None:
        return asked
    return node["agent"] if node["host"] == here else None


def _state(url: str, run_id: str, args: argparse.Namespace) -> dict | None:
    """The run as that node's agent has it (its ranks there): status and last step."""
    try:
        with Client(url, timeout=args.timeout, keys=Keyring(args.keys)) as client:
            row = next((r for r in client.runs() if r["id"] == run_id), None)
    except AgentUnavailable:
        return None
    if row is None:
        return {"status": "run not on this agent"}
    return {"status": row["status"], "last_step": row["last_step"]}
