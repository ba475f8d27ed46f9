"""prime-rl's own files: a run folder's ``metrics.jsonl`` and its ``rollouts/step_N/{train,eval}/all/traces.jsonl``.

Read from prime-rl's writer code (PrimeIntellect-ai/prime-rl @ 559b447, 0.8.0) and the Episode and
Trace schema it dumps (PrimeIntellect-ai/verifiers @ a60a606, its ``deps/verifiers`` pin):

- ``src/prime_rl/monitors/file.py``, ``FileMonitor.log_metrics``: one line per ``monitors.log(metrics,
  step)``, ``json.dumps({"step": step, "time": time.time(), **sanitize(metrics)})`` (NaN and ±Inf
  dropped), appended to ``{run_dir}/metrics.jsonl`` by the trainer and the orchestrator alike (the ``rl``
  entrypoint gives both the run folder).  Several lines share a step; an eval line's own ``"step"`` is
  a float (``3.0``).  Each line is a metric record at its step, its wall time ``time``.
- ``FileMonitor.log_episodes``: ``orjson.dumps(episode.to_record())`` appended to
  ``rollouts/step_{step}/{kind}/{subset}/traces.jsonl`` (``kind`` train or eval); the ``all`` subset
  grows one episode at a time as each finishes (errored ones too, ``orchestrator.py`` line 592);
  ``effective`` repeats the trained-on ones at ship time and is not read.  The step is the folder's.
- verifiers ``verifiers/v1/episode.py`` (``Episode.to_record``: ``id``, ``env``, ``task``, ``group``,
  ``run``, ``ok``, ``errors``, ``traces``), ``verifiers/v1/trace.py`` (``Trace``: ``nodes``, ``rewards``
  ``{name: {score, weight}}``, ``metrics``, ``ok``, ``errors``, ...; ``Trace.reward`` and
  ``Trace.messages``, the final branch), ``verifiers/v1/graph.py`` (``MessageNode``: ``parent``,
  ``message``, ``sampled``, per-token ``token_ids``/``mask``/``logprobs``/``advantages``; ``leaves``).

An episode becomes one row per trace (one per agent).  Its messages are the trace's final branch
(the path to its last leaf, verifiers' ``Trace.messages``): ``prompt`` the messages before the first
sampled one (model-generated), ``completion`` that one and all after it (tool results, later turns),
chats of role, content, tool calls (``pilothouse.watch.formats.messages``).  ``reward`` is
``sum(score * weight)`` over the rewards scored (each score kept as ``rewards/<name>``);
``advantage`` the one value prime-rl assigns a branch's sampled tokens (GRPO's, where present: an
``all`` record is written before advantages are assigned, and a value that varies over the tokens is
not one advantage); ``group`` the episode's group id (GRPO's group); ``split`` ``eval`` for the eval
folder.  Kept too: ``env``, ``episode``, ``trace``, ``agent``, ``ok``, ``errors`` (as text), the
trace's ``metrics/<name>``, ``stop_condition``, ``completion_tokens`` (the sampled tokens of the
branch, counted from the mask) and the task's data as JSON text.  Left out: the nodes' token ids,
masks, logprobs and per-token advantages, the model calls and timings: per-token arrays are most of
a record's size and no row shows them.
"""

from __future__ import annotations

import json
import math
import re
from pathlib import Path
from typing import Any

from pilothouse.watch.formats.messages import chat
from pilothouse.watch.formats.rows import row, scalars
from pilothouse.watch.sources import Parsed, first_object

METRICS = re.compile(r"^metrics\.jsonl$")
TRACES = re.compile(r"^traces\.jsonl$")
STEP_FOLDER = re.compile(r"^step_(\d+)$")
KINDS = ("train", "eval")


def is_traces(path: Path) -> bool:
    """Whether ``path`` is ``rollouts/step_N/{train,eval}/all/traces.jsonl``."""
    parts = path.parts[-5:-1]
    return (len(parts) == 4 and parts[0] == "rollouts" and bool(STEP_FOLDER.match(parts[1]))
            and parts[2] in KINDS and parts[3] == "all")


def has_steps(rollouts: Path) -> bool:
    """Whether a ``rollouts`` folder holds a ``step_N`` folder (a prime-rl run folder's mark)."""
    try:
        return any(STEP_FOLDER.match(p.name) and p.is_dir() for p in rollouts.iterdir())
    except OSError:
        return False


def _step(value: Any) -> int | None:
    """A line's step: an int, or an integral float (the orchestrator's eval lines write ``3.0``)."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, float) and value.is_integer():
        return int(value)
    return None


def is_metrics_log(path: Path) -> bool:
    """Whether ``path``'s first line is a ``FileMonitor.log_metrics`` line: a step and a time first."""
    first = first_object(path)
    return (isinstance(first, dict) and list(first)[:2] == ["step", "time"] and _step(first["step"]) is not None
            and isinstance(first["time"], (int, float)))


class Metrics:
    name = "prime-rl metrics.jsonl"

    def lines(self, path: Path, objects: list[tuple[int, Any]]) -> Parsed:
        out = Parsed()
        for offset, obj in objects:
            step = _step(obj.get("step")) if isinstance(obj, dict) else None
            if step is None:
                out.said.append(f"{path}: the line at offset {offset} has no step (an int, or an integral float): "
                                "left out")
                continue
            wall = obj.get("time")
            wall = float(wall) if isinstance(wall, (int, float)) and not isinstance(wall, bool) else path.stat().st_mtime
            out.metrics.append((step, wall, scalars({k: v for k, v in obj.items() if k not in ("step", "time")})))
        return out


class Traces:
    """A ``traces.jsonl`` of one step and kind: an episode per line, each its own batch of rows (a
    restarted watcher passes over whole records of lines, so each line's rows are one record)."""

    name = "prime-rl traces.jsonl"

    def lines(self, path: Path, objects: list[tuple[int, Any]]) -> Parsed:
        out = Parsed()
        step = int(STEP_FOLDER.match(path.parts[-4]).group(1))  # type: ignore[union-attr]
        split = path.parts[-3]
        for offset, episode in objects:
            if not (isinstance(episode, dict) and isinstance(episode.get("traces", []), list)
                    and isinstance(episode.get("env"), dict)):
                out.said.append(f"{path}: the line at offset {offset} is not a prime-rl episode record (id, env, "
                                "task, traces): left out")
                continue
            rows = episode_rows(episode, split)
            out.rollouts.append((step, _finished(episode, path), rows))
        return out


def episode_rows(episode: dict, split: str) -> list[dict]:
    """An episode's rows, one per trace; an episode that failed before any trace: one row of its errors."""
    env = _map(episode.get("env"))
    group = _map(episode.get("group")).get("id")
    base = {"group": group, "env": env.get("name") or env.get("id"), "episode": episode.get("id"),
            "task": json.dumps(_map(episode.get("task")).get("data"), ensure_ascii=False, sort_keys=True)}
    traces = [t for t in episode.get("traces") or [] if isinstance(t, dict)]
    if not traces:
        fields = {**base, "ok": bool(episode.get("ok")), "errors": _errors(episode)}
        return [row({k: v for k, v in fields.items() if v is not None}, split=split)]
    return [_trace_row(base, episode, trace, split) for trace in traces]


def _trace_row(base: dict, episode: dict, trace: dict, split: str) -> dict:
    branch = _final_branch([n for n in trace.get("nodes") or [] if isinstance(n, dict)])
    first = next((i for i, node in enumerate(branch) if node.get("sampled")), len(branch))
    messages = [node.get("message") for node in branch]
    sampled = [node for node in branch if node.get("sampled")]
    fields = {**base, "trace": trace.get("id"), "agent": _map(trace.get("agent")).get("name"),
              "ok": bool(episode.get("ok")) and trace.get("ok", True) is True,
              "errors": _errors(episode, trace), "stop_condition": trace.get("stop_condition")}
    if any(node.get("mask") for node in sampled):
        fields["completion_tokens"] = sum(sum(map(bool, node.get("mask") or ())) for node in sampled)
    rewards = {k: r for k, r in _map(trace.get("rewards")).items() if isinstance(r, dict) and _finite(r.get("score"))}
    fields.update({f"rewards/{name}": r["score"] for name, r in rewards.items()})
    fields.update({f"metrics/{name}": v for name, v in scalars(_map(trace.get("metrics"))).items()})
    reward = sum(r["score"] * r.get("weight", 1.0) for r in rewards.values()) if rewards else None
    return row({k: v for k, v in fields.items() if v is not None}, prompt=chat(messages[:first]),
               completion=chat(messages[first:]), reward=reward, advantage=_advantage(sampled), split=split)


def _final_branch(nodes: list[dict]) -> list[dict]:
    """The root-to-leaf path to the last leaf (verifiers' ``Trace.messages``); a cycle or a parent out
    of range ends the walk rather than looping."""
    parents = {n.get("parent") for n in nodes}
    leaves = [i for i in range(len(nodes)) if i not in parents]
    path: list[int] = []
    at: Any = leaves[-1] if leaves else None
    while isinstance(at, int) and 0 <= at < len(nodes) and at not in path:
        path.append(at)
        at = nodes[at].get("parent")
    return [nodes[i] for i in reversed(path)]


def _advantage(sampled: list[dict]) -> float | None:
    values = {v for node in sampled for v in node.get("advantages") or () if isinstance(v, (int, float))}
    return values.pop() if len(values) == 1 else None


def _errors(*holders: dict) -> str | None:
    lines = [f"{e.get('type', 'error')}: {e.get('message', '')}" for holder in holders
             for e in holder.get("errors") or () if isinstance(e, dict)]
    return "\n".join(lines) or None


def _finished(episode: dict, path: Path) -> float:
    """When the episode's last message was made (its nodes' timestamps), else the file's time."""
    stamps = [n["timestamp"] for t in episode.get("traces") or () if isinstance(t, dict)
              for n in t.get("nodes") or () if isinstance(n, dict) and _finite(n.get("timestamp"))]
    return float(max(stamps)) if stamps else path.stat().st_mtime


def _finite(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def _map(value: Any) -> dict:
    return value if isinstance(value, dict) else {}
