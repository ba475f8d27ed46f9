"""A multi-node job seen from the app, in plain Python: which of its agents the app follows, and how to
reach the others from this machine.

Every rank's hello tells its agent the job's nodes (host, the agent URL the ranks used there, their
ranks), so one agent the app follows names all of them.  Those URLs are as seen on each node (its
loopback, usually): the app reaches another node the way it reaches the first one.

- the first agent is on this machine (a loopback URL, its host this one): the others on this host as
  they are; those on other hosts through an SSH tunnel each, as ``pilothouse runs --job`` prints them;
- through an SSH tunnel (a loopback URL to another host): a tunnel each for the others, on free local
  ports from ``TUNNEL_PORT`` (when the first tunnel's agent key is pinned, each new one needs its key);
- over the network (a CurveZMQ listener): the URL of the other host in the keyring's known agents,
  with its key; where none is known, exactly which key is missing and the commands that get it.

A node entry the app cannot use (a bad URL, a malformed entry, an ipc:// agent elsewhere) is shown
with the reason and never added.
"""

from __future__ import annotations

import shlex
from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass
from urllib.parse import urlsplit

from pilothouse.security import Keyring, SecurityError
from pilothouse.text import printable
from pilothouse.wire.job import TUNNEL_PORT, check_node, format_ranks, tunnel_command
from pilothouse.wire.urls import is_loopback

Member = tuple[str, str, str]  # (the URL the app follows, the node's host, the node's agent URL)


@dataclass(frozen=True)
class Node:
    host: str
    agent: str  # the URL the job's ranks used, on their node
    ranks: tuple[int, ...]
    url: str | None = None  # the URL the app follows for it, or would add
    followed: bool = False
    tunnel: str | None = None  # the SSH tunnel to open first
    problem: str | None = None  # why it is not added: a bad entry, a missing key

    @property
    def addable(self) -> bool:
        return not self.followed and self.url is not None and self.problem is None

    def line(self) -> str:
        """One line for the user: where it is, and what adding it takes (or why it cannot be)."""
        ranks = f"ranks {format_ranks(list(self.ranks))}" if self.ranks else "no ranks"
        where = printable(f"{self.host} ({ranks})")
        if self.followed:
            return f"{where}: followed at {printable(self.url or '')}"
        if self.problem is not None:
            return f"{where}: not added: {printable(self.problem)}"
        tunnel = f", through `{printable(self.tunnel)}`" if self.tunnel else ""
        return f"{where}: add {printable(self.url or '')}{tunnel}"


@dataclass(frozen=True)
class JobPlan:
    run: str  # the run id: the job's id
    title: str  # project/name
    nodes: tuple[Node, ...]

    @property
    def addable(self) -> list[Node]:
        return [n for n in self.nodes if n.addable]

    @property
    def missing(self) -> list[Node]:
        """The nodes the app does not follow (addable or not)."""
        return [n for n in self.nodes if not n.followed]

    @property
    def tunnels(self) -> list[str]:
        return [n.tunnel for n in self.addable if n.tunnel]

    def headline(self) -> str:
        m = len(self.missing)
        text = (f"This job ({printable(self.title)}) runs on {len(self.nodes)} nodes; "
                f"add the other {m} agent{'s' * (m != 1)}")
        if len(self.addable) != m:
            text += f" ({len(self.addable)} can be added now)"
        return text

    def members(self) -> list[Member]:
        """What the app follows of the job once the addable nodes are added."""
        return [(n.url, n.host, n.agent) for n in self.nodes if n.url is not None and (n.followed or n.addable)]


def is_job_node(run: Mapping) -> bool:
    """A run dict from one node of a multi-node job (its agent holds some of the job's ranks)."""
    nodes = run.get("nodes")
    return isinstance(nodes, list) and len(nodes) > 1


def job_ids(runs: Iterable[Mapping]) -> set[str]:
    """The ids of the multi-node jobs among these run dicts."""
    return {r["id"] for r in runs if is_job_node(r) and isinstance(r.get("id"), str)}


def offers(runs: Iterable[Mapping], followed: Collection[str], decided: Collection[str], here: str,
           known: Mapping[str, str] | None = None, client_key: str | None = None) -> list[JobPlan]:
    """The jobs to offer: multi-node runs of the followed agents (run dicts carrying ``agent``, as
    ``LocalStore.runs()`` gives them) that the user has not decided on and that have nodes not followed."""
    copies: dict[str, dict[str, Mapping]] = {}
    for run in runs:
        if run.get("agent") in followed and run.get("id") not in decided and is_job_node(run):
            copies.setdefault(run["id"], {})[run["agent"]] = run
    plans = [plan_job(i, c, here, known, client_key, used_urls=followed) for i, c in copies.items()]
    return [p for p in plans if p is not None and p.missing]


def app_keys(ring: Keyring | None = None) -> tuple[dict[str, str], str | None]:
    """The keyring's pinned agent keys and this app's public client key (None where it has none)."""
    ring = ring if ring is not None else Keyring()
    try:
        known = ring.known_agents()
    except SecurityError:  # an exposed or damaged file: no pinned key is used, so none is offered
        known = {}
    try:
        client = ring.public("client")
    except SecurityError:
        client = None
    return known, client


def plan_job(run_id: str, copies: Mapping[str, Mapping], here: str, known: Mapping[str, str] | None = None,
             client_key: str | None = None, remembered: Iterable[Member] = (),
             used_urls: Collection[str] = ()) -> JobPlan | None:
    """How the app reaches every node of ``run_id``'s job.

    ``copies``: the run as each followed agent reports it (URL -> run dict, with ``host`` and
    ``nodes``); ``here``: this machine's host name; ``known``: the keyring's pinned agent keys (URL ->
    key); ``client_key``: this app's public client key (for the commands a missing key takes);
    ``remembered``: members of this job the app follows already (added before they answered);
    ``used_urls``: every URL the app follows (their ports are not offered for tunnels).  None when
    the run is not a multi-node job."""
    known = known or {}
    copies = {u: c for u, c in copies.items() if isinstance(c, Mapping)}
    first = next((c for c in copies.values() if is_job_node(c)), None)
    if first is None:
        return None
    entries: list[Node] = []
    valid: list[dict] = []
    for entry in first["nodes"]:
        try:
            node = check_node(entry)
        except ValueError as exc:
            entries.append(Node(_field(entry, "host"), _field(entry, "agent"), (), problem=str(exc)))
            continue
        if any((v["host"], v["agent"]) == (node["host"], node["agent"]) for v in valid):
            entries.append(Node(node["host"], node["agent"], tuple(node["ranks"]), problem="listed twice"))
            continue
        valid.append(node)
        entries.append(Node(node["host"], node["agent"], tuple(node["ranks"])))
    followed = {(h, a): u for u, h, a in remembered if u in copies or u in used_urls}
    for url, copy in copies.items():
        node = _node_of(url, copy.get("host"), valid)
        if node is not None:
            followed.setdefault((node["host"], node["agent"]), url)
    ref_url = next(iter(copies))  # the way the app reaches the job: the first agent that reported it
    way = _way(ref_url, copies[ref_url].get("host"), here)
    ports = {p for u in [*used_urls, *copies, *followed.values()] if (p := _port(u)) is not None}
    nodes = []
    for n in entries:
        if n.problem is not None:
            nodes.append(n)
        elif (n.host, n.agent) in followed:
            nodes.append(Node(n.host, n.agent, n.ranks, url=followed[(n.host, n.agent)], followed=True))
        else:
            nodes.append(_reach(n, way, ref_url, here, known, client_key, ports))
    return JobPlan(run_id, f"{first.get('project') or ''}/{first.get('name') or ''}", tuple(nodes))


def _reach(n: Node, way: str, ref_url: str, here: str, known: Mapping[str, str], client_key: str | None,
           ports: set[int]) -> Node:
    """The URL (and tunnel, or the missing key) that reaches ``n`` the way ``ref_url`` reaches the first."""
    if _same_host(n.host, here):
        if is_loopback(n.agent) or n.agent in known:
            return Node(n.host, n.agent, n.ranks, url=n.agent)
        return Node(n.host, n.agent, n.ranks, url=n.agent, problem=_no_key(n.agent, n.host, client_key))
    if urlsplit(n.agent).scheme == "ipc":
        return Node(n.host, n.agent, n.ranks, problem=f"an ipc:// agent is reachable only on {n.host} itself")
    if way == "network":
        port = _port(ref_url)
        mine = sorted(u for u in known if _same_host(urlsplit(u).hostname or "", n.host))
        url = next((u for u in mine if _port(u) == port), mine[0] if mine else None)
        if url is not None:
            return Node(n.host, n.agent, n.ranks, url=url)
        url = f"tcp://{n.host}:{port}"
        return Node(n.host, n.agent, n.ranks, url=url, problem=_no_key(url, n.host, client_key, listen=port))
    port = TUNNEL_PORT
    while port in ports:
        port += 1
    ports.add(port)
    url = f"tcp://127.0.0.1:{port}"
    try:
        tunnel = tunnel_command(port, {"host": n.host, "agent": n.agent})
    except ValueError as exc:  # a host no command copied to the clipboard may name
        return Node(n.host, n.agent, n.ranks, problem=str(exc))
    if way == "tunnel" and ref_url in known and url not in known:  # the first tunnel's key is pinned
        return Node(n.host, n.agent, n.ranks, url=url, tunnel=tunnel,
                    problem=_no_key(url, n.host, client_key, pinned=ref_url))
    return Node(n.host, n.agent, n.ranks, url=url, tunnel=tunnel)


def _no_key(url: str, host: str, client_key: str | None, listen: int | None = None, pinned: str | None = None) -> str:
    """Which key is missing for ``url`` and the commands that get it."""
    why = f"the tunnel to {pinned} has a pinned agent key, this one has none" if pinned else \
        f"no agent key known for {url}"
    trust = shlex.join(["pilothouse", "keys", "trust", url, "AGENT_KEY"])  # pasted into a shell: quoted
    steps = [f"on {host} run `pilothouse keys show`, then here `{trust}`"]
    if listen is not None:
        allow = f"`pilothouse keys allow {client_key} --name NAME`" if client_key else \
            "`pilothouse keys allow CLIENT_KEY --name NAME` (CLIENT_KEY: `pilothouse keys show` here)"
        steps.append(f"its agent must listen (`pilothouse agent --listen tcp://0.0.0.0:{listen}`) and admit "
                     f"this app's key: {allow}")
    return f"{why}: " + "; ".join(steps)


def _node_of(url: str, host: object, nodes: list[dict]) -> dict | None:
    """The node a followed agent is: the one on the host its copy of the run names (by URL too, when
    several agents of the job share that host)."""
    on_host = [n for n in nodes if n["host"] == host]
    if len(on_host) > 1:
        on_host = [n for n in on_host if n["agent"] == url]
    return on_host[0] if len(on_host) == 1 else None


def _way(url: str, host: object, here: str) -> str:
    """How the app reaches an agent: ``local`` (this machine), ``tunnel`` or ``network``."""
    if not is_loopback(url):
        return "network"
    return "local" if isinstance(host, str) and _same_host(host, here) else "tunnel"


def _same_host(a: str, b: str) -> bool:
    """node7 and node7.cluster.local are one host."""
    return bool(a) and bool(b) and a.split(".")[0].lower() == b.split(".")[0].lower()


def _port(url: str) -> int | None:
    try:
        return urlsplit(url).port if url.startswith("tcp://") else None
    except ValueError:
        return None


def _field(entry: object, key: str) -> str:
    value = entry.get(key) if isinstance(entry, dict) else None
    return value if isinstance(value, str) else repr(value)[:80]
