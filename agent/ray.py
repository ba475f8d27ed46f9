"""Ray: one node agent on every node of a cluster, found by the actors there without configuration.

``start_agents()``, called from a Ray driver, pins a detached actor to each alive node.  The actor
runs ``pilothouse agent`` as its child on that node's loopback, starts it again if it exits, and
takes it down when the actor ends (as it does when the cluster goes); Ray restarts the actor itself
if it dies.  In an actor or the driver, ``pilothouse.init()`` without an agent URL asks its node's
actor for the URL, so a rollout worker logs to the agent beside it.
"""

from __future__ import annotations

import ctypes
import logging
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import ray
from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

from pilothouse.client import reachable
from pilothouse.paths import default_data_dir
from pilothouse.security import private_dir
from pilothouse.spawn import spawn_agent
from pilothouse.wire.urls import DEFAULT_PORT

log = logging.getLogger("pilothouse")

NAMESPACE = "pilothouse"
ACTOR_PREFIX = "pilothouse-agent-"
PORT_FILE = "ray-agent.port"
START_SECONDS = 60.0


class NodeAgent:
    """The agent of one node, as the child of a detached actor pinned there."""

    def __init__(self, data_dir: str | None, port: int):
        self.node_id = ray.get_runtime_context().get_node_id()
        self.data = Path(data_dir.format(node=self.node_id)) if data_dir else default_data_dir()
        private_dir(self.data)  # the port file below goes in it too: the user's own folder, or refused
        self.adopted = False
        self._proc: subprocess.Popen | None = None
        self._up = threading.Event()
        if port == DEFAULT_PORT and reachable(f"tcp://127.0.0.1:{port}"):
            self.adopted = True  # this node's own agent already runs: use it, do not own it
            self._url = f"tcp://127.0.0.1:{port}"
            return
        self._url = f"tcp://127.0.0.1:{port or _kept_port(self.data)}"
        # started and restarted from one thread that lives as long as the actor: the child's
        # parent-death signal is tied to the thread that started it
        threading.Thread(target=self._keep_running, name="pilothouse-agent", daemon=True).start()
        if not self._up.wait(START_SECONDS):
            raise RuntimeError(f"the pilothouse agent on node {self.node_id} did not answer on {self._url} "
                               f"within {START_SECONDS:.0f} s; see {self.data / 'agent.log'}")

    def url(self) -> str:
        return self._url

    def info(self) -> dict:
        return {"node_id": self.node_id, "url": self._url, "host": socket.gethostname(),
                "pid": None if self._proc is None else self._proc.pid, "adopted": self.adopted,
                "data": str(self.data)}

    def _keep_running(self) -> None:
        while True:
            self._proc = self._start()
            while not self._up.is_set() and self._proc.poll() is None:
                if reachable(self._url, timeout=0.5):
                    self._up.set()
            code = self._proc.wait()
            if not self._up.is_set() and reachable(self._url):
                self.adopted = True  # another node on this machine was first to the port: share its agent
                self._up.set()
                return
            log.warning("pilothouse agent on node %s exited (%s); starting it again", self.node_id, code)
            time.sleep(1.0)

    def _start(self) -> subprocess.Popen:
        return spawn_agent(self._url, self.data, preexec_fn=_die_with_parent)


def start_agents(*, port: int = DEFAULT_PORT, data_dir: str | None = None) -> dict[str, str]:
    """Make sure one agent runs on every alive node; returns {node id: its loopback URL on that node}.

    ``port``: the agent's loopback port on each node (the default one, where ``pilothouse`` on the node
    finds it; an agent already answering there is used as it is); 0 picks a free port per node, kept
    across restarts (for several nodes on one machine).  ``data_dir``: the journal's folder, where
    ``{node}`` stands for the node id (default: the user's data dir on each node)."""
    if isinstance(port, bool) or not isinstance(port, int) or not 0 <= port < 65536:
        raise ValueError(f"port must be 0 (any free port) or 1-65535, got {port!r}")
    if not ray.is_initialized():
        raise RuntimeError("call ray.init() (or connect to the cluster) before pilothouse.ray.start_agents()")
    actor = ray.remote(NodeAgent)
    handles = {}
    for node in ray.nodes():
        if not node.get("Alive"):
            continue
        node_id = node["NodeID"]
        handles[node_id] = actor.options(
            name=ACTOR_PREFIX + node_id, namespace=NAMESPACE, get_if_exists=True, lifetime="detached",
            max_restarts=-1, num_cpus=0,
            scheduling_strategy=NodeAffinitySchedulingStrategy(node_id, soft=False)).remote(data_dir, port)
    urls = ray.get([h.url.remote() for h in handles.values()], timeout=START_SECONDS)
    return dict(zip(handles, urls))


def agent_here() -> str | None:
    """The URL of this node's agent, if ``start_agents`` put one here (None otherwise)."""
    if not ray.is_initialized():
        return None
    handles = _node_actors([ray.get_runtime_context().get_node_id()])
    return ray.get(handles[0].url.remote(), timeout=START_SECONDS) if handles else None


def cluster_nodes() -> list[dict] | None:
    """The job's nodes as a trainer's hello lists them: every agent ``start_agents`` put on the cluster
    (None without them).  Ray places actors, not ranks, so no ranks are listed."""
    if not ray.is_initialized():
        return None
    infos = ray.get([h.info.remote() for h in _node_actors()], timeout=START_SECONDS)
    return [{"host": h, "agent": u, "ranks": []} for h, u in sorted({(i["host"], i["url"]) for i in infos})] or None


def _node_actors(node_ids: list[str] | None = None) -> list:
    """The actors ``start_agents`` put on these nodes (default: every node of the cluster), where there is one."""
    handles = []
    for node_id in node_ids if node_ids is not None else [n["NodeID"] for n in ray.nodes()]:
        try:
            handles.append(ray.get_actor(ACTOR_PREFIX + node_id, namespace=NAMESPACE))
        except ValueError:
            continue
    return handles


def _kept_port(data: Path) -> int:
    """A free port, chosen once per data dir: a restarted actor binds the same URL its trainers use."""
    path = data / PORT_FILE
    try:
        return int(path.read_text())
    except (OSError, ValueError):
        pass
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    path.write_text(str(port))
    return port


def _die_with_parent() -> None:
    """In the child: SIGTERM when the actor's thread that started it ends (Linux), so an agent never
    outlives its actor and holds the port the restarted actor needs."""
    if sys.platform.startswith("linux"):
        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
