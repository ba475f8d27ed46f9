"""The user's running agents, found with no flag as Jupyter finds its kernels: each agent records
itself (its URL, pid, data folder, start time) in a file of its own in the user's runtime dir while it
runs, so a command without ``--agent`` can ask every agent of this user, wherever the demo or a
test put it.  A record outlives an agent that was killed: one whose pid is gone, or now another
program's (its start time differs), is removed by whoever reads it."""

from __future__ import annotations

import contextlib
import json
import os
import time
from dataclasses import dataclass
from pathlib import Path

import psutil

from pilothouse.client import AgentError, AgentUnavailable, Client
from pilothouse.paths import agents_dir
from pilothouse.security import Keyring, SecurityError, owned_file, private_dir
from pilothouse.wire.urls import DEFAULT_URL

QUICK = 1.0  # seconds a local agent has to answer while the one to use is looked for
NOT_FOUND = "no run with id or name"  # the agent's answer for a reference it does not hold


@dataclass(frozen=True)
class LocalAgent:
    url: str
    pid: int
    data: str
    started: float  # the process's start time (psutil), which tells a reused pid apart
    path: Path  # its record


def record(url: str, data: str | Path) -> Path:
    """Record this process as an agent at ``url`` with ``data``: an owner-only file (runs and folders are
    nobody else's business on a shared node); ``forget`` it on a clean stop."""
    folder = agents_dir()
    private_dir(folder)
    path = folder / f"{os.getpid()}.json"
    me = psutil.Process()
    text = json.dumps({"url": url, "pid": me.pid, "data": str(Path(data).resolve()), "started": me.create_time()})
    fd = owned_file(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
    with open(fd, "w", encoding="utf-8") as f:
        f.write(text)
    return path


def forget(path: Path) -> None:
    with contextlib.suppress(FileNotFoundError):
        path.unlink()


def recorded() -> list[LocalAgent]:
    """The agents of this user that still run, oldest first; stale records are removed."""
    folder = agents_dir()
    if not folder.is_dir():
        return []
    private_dir(folder)  # refuses a folder another user made or can write to: its records could be planted
    found = []
    for path in folder.glob("*.json"):
        pid = int(path.stem) if path.stem.isdigit() else None
        if pid is None:
            continue
        agent = _read(path)
        if not _alive(pid, agent):
            forget(path)
        elif agent is not None:
            found.append(agent)
    return sorted(found, key=lambda a: a.started)


def stop(agents: list[LocalAgent], timeout: float) -> dict[int, str]:
    """Stop ``agents`` as Ctrl-C stops one: SIGTERM, on which an agent finishes its turn, notes its stop in
    its journal, closes it, frees its port and data folder and removes its record; then wait for that,
    all of them at once.  Per pid: "stopped"; "gone" (it had already ended); "no clean stop" (it ended
    with its record left, so before it noted its stop: its log says why); "running" (still at it after
    ``timeout`` seconds); "not yours" (the system refused the signal: left alone)."""
    procs: dict[int, psutil.Process] = {}
    result: dict[int, str] = {}
    for agent in agents:
        try:
            proc = psutil.Process(agent.pid)
            if abs(proc.create_time() - agent.started) >= 0.5:
                raise psutil.NoSuchProcess(agent.pid)  # its pid is another program's now: never signalled
            proc.terminate()  # psutil checks again that the pid is still this process
            procs[agent.pid] = proc
        except (psutil.NoSuchProcess, psutil.ZombieProcess):
            forget(agent.path)
            result[agent.pid] = "gone"
        except psutil.AccessDenied:  # not this user's process after all: left alone
            result[agent.pid] = "not yours"
    deadline = time.monotonic() + timeout
    while True:
        for agent in agents:
            if agent.pid in result or not _ended(procs[agent.pid]):
                continue
            result[agent.pid] = "stopped" if not agent.path.exists() else "no clean stop"
            forget(agent.path)
        if len(result) == len(agents) or time.monotonic() >= deadline:
            return {agent.pid: result.get(agent.pid, "running") for agent in agents}
        time.sleep(0.05)


def _ended(proc: psutil.Process) -> bool:
    """Whether it has exited: gone, or a zombie its parent (a test, a shell) has not reaped yet."""
    try:
        return not proc.is_running() or proc.status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


def agent_for(ref: str | None, keys: Keyring) -> str:
    """The agent a command without ``--agent`` talks to: the default address when an agent answers
    there and holds run ``ref`` (if the command names one); else the one recorded agent that answers
    and holds it.  Several: an error naming them.  None: the default address, where the command says
    what it always says."""
    if holds(DEFAULT_URL, ref, keys):
        return DEFAULT_URL
    hits = [a.url for a in recorded() if a.url != DEFAULT_URL and holds(a.url, ref, keys)]
    if len(hits) > 1:
        what = f"hold a run {ref!r}" if ref is not None else f"answer, none at {DEFAULT_URL}"
        raise AgentError(f"{len(hits)} of your agents {what}: {', '.join(hits)}; pass --agent URL to say which")
    return hits[0] if hits else DEFAULT_URL


def holds(url: str, ref: str | None, keys: Keyring) -> bool:
    """Whether the agent at ``url`` answers and, if ``ref``, knows that run; an ambiguous name
    there counts as held, so the command there says which runs it means."""
    with Client(url, timeout=QUICK, keys=keys) as client:
        try:
            client.ping() if ref is None else client.resolve(ref)
            return True
        except AgentUnavailable:
            return False
        except AgentError as exc:
            return NOT_FOUND not in str(exc)


def _read(path: Path) -> LocalAgent | None:
    """The record, or None while its agent is still writing it (or if it is not one)."""
    try:
        fd = owned_file(path, os.O_RDONLY)
    except (OSError, SecurityError):
        return None
    with open(fd, encoding="utf-8") as f:
        try:
            d = json.load(f)
            return LocalAgent(str(d["url"]), int(d["pid"]), str(d["data"]), float(d["started"]), path)
        except (ValueError, KeyError, TypeError):
            return None


def _alive(pid: int, agent: LocalAgent | None) -> bool:
    """Whether ``pid`` runs and, if its record could be read, is the process that wrote it."""
    try:
        started = psutil.Process(pid).create_time()
    except (psutil.NoSuchProcess, psutil.ZombieProcess):
        return False
    except psutil.AccessDenied:
        return True
    return agent is None or (agent.pid == pid and abs(agent.started - started) < 0.5)
