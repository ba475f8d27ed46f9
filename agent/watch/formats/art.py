"""ART's own files (OpenPipe/ART): a model folder's ``trajectories/{split}/{step:04d}.jsonl`` or
``.parquet`` and its ``history.jsonl``.

Read from ART's writer code in its PyPI wheels (``openpipe-art``):

- 0.4.0 to 0.5.4, ``art/local/backend.py`` ``LocalBackend._log`` (0.4.12, near line 348) and
  ``art/utils/trajectory_logging.py`` ``serialize_trajectory_groups``: ``{step:04d}.jsonl`` written
  whole (``open(..., "w")``: logged again, a step's file is replaced), ``"\\n".join(json.dumps(group))``
  with no newline after the last: one line per trajectory group, ``{"trajectories": [{reward,
  metrics, metadata, messages_and_choices, tools, additional_histories, logs}]}``; an item of
  ``messages_and_choices`` is a chat message, or a model output as an OpenAI ``Choice``
  (``{finish_reason, index, message}``, its logprobs removed).
- From 0.5.5 (read in 0.5.18), ``art/utils/trajectory_logging.py``
  ``write_trajectory_groups_parquet``, called from ``art/model.py`` ``Model.log``: ``{step:04d}.parquet``,
  one row per trajectory: ``group_index``, ``group_metadata``/``group_metrics`` (JSON text),
  ``group_logs``, ``reward``, ``metrics``/``metadata``/``tools`` (JSON text), ``logs``, ``messages``
  (``role``, ``content``, ``tool_calls`` as JSON text, ``tool_call_id``, ``trainable``: a Choice's).
- ``art/model.py`` ``Model._log_metrics`` (0.5.x; ``LocalBackend._log_metrics`` in 0.4.x):
  ``history.jsonl``, a line per log call, ``{"<split>/<metric>": value, ..., "step": step,
  "recorded_at": datetime.now().isoformat()}`` (NaN left out): scalars at ``step``, the wall time
  ``recorded_at`` (local time, as written).

A trajectory is a row: ``prompt`` the messages before the first model output (a Choice, or a
``trainable`` message), ``completion`` that output and everything after it (tool results, later
turns), as chats; ``reward``; each metric as ``metrics/<name>`` and each metadata value as
``metadata/<name>``; ``group`` ``<split>/<group index>`` (the group's place in the step's file, the
split in it so a validation group is never one with a training group of the same step); ``split``
the folder's (ART's ``model.log`` defaults to ``val``; training logs ``train``).  ART writes no
advantage.  The step is the file's name.  ART before 0.4 wrote ``{step:04d}.yaml``: not read.
"""

from __future__ import annotations

import json
import re
from datetime import datetime
from pathlib import Path
from typing import Any

from pilothouse.watch.formats.messages import chat
from pilothouse.watch.formats.rows import row, scalars
from pilothouse.watch.sources import Parsed, first_object

STEP_FILE = re.compile(r"^(\d+)\.(jsonl|parquet)$")
HISTORY = re.compile(r"^history\.jsonl$")
FOLDER = "trajectories"


def is_step_file(path: Path) -> bool:
    """Whether ``path`` is ``trajectories/{split}/{step}.jsonl|parquet``."""
    return path.parent.parent.name == FOLDER


def is_history(path: Path) -> bool:
    """Whether ``path``'s first line is a ``history.jsonl`` line: a step and when it was recorded."""
    first = first_object(path)
    return isinstance(first, dict) and type(first.get("step")) is int and isinstance(first.get("recorded_at"), str)


def has_step_files(trajectories: Path) -> bool:
    """Whether a ``trajectories`` folder holds a split folder of step files (an ART model folder's mark)."""
    try:
        return any(STEP_FILE.match(f.name) for split in trajectories.iterdir() if split.is_dir()
                   for f in split.iterdir())
    except OSError:
        return False


class History:
    name = "ART history.jsonl"

    def lines(self, path: Path, objects: list[tuple[int, Any]]) -> Parsed:
        out = Parsed()
        for offset, obj in objects:
            if not isinstance(obj, dict) or type(obj.get("step")) is not int:
                out.said.append(f"{path}: the line at offset {offset} has no step: left out")
                continue
            try:
                wall = datetime.fromisoformat(obj["recorded_at"]).timestamp()
            except (KeyError, TypeError, ValueError):
                wall = path.stat().st_mtime
            out.metrics.append((obj["step"], wall, scalars({k: v for k, v in obj.items()
                                                             if k not in ("step", "recorded_at")})))
        return out


class Trajectories:
    """One ``{step:04d}.jsonl`` or ``.parquet``: a step's trajectories of one split."""

    name = "ART trajectories"

    def file(self, path: Path) -> Parsed:
        match = STEP_FILE.match(path.name)
        step, split = int(match.group(1)), path.parent.name  # type: ignore[union-attr]
        rows = _parquet(path, split) if match.group(2) == "parquet" else _jsonl(path, split)  # type: ignore[union-attr]
        return Parsed(rollouts=[(step, path.stat().st_mtime, rows)] if rows else [])


def _jsonl(path: Path, split: str) -> list[dict]:
    rows = []
    with open(path, encoding="utf-8") as f:
        for index, line in enumerate(f):
            if not line.strip():
                continue
            group = json.loads(line)
            if not isinstance(group, dict) or not isinstance(group.get("trajectories"), list):
                raise ValueError(f"line {index + 1} is not a trajectory group ({{\"trajectories\": [...]}})")
            extras = {f"group_{k}": v for k, v in group.items() if k != "trajectories" and v}
            for trajectory in group["trajectories"]:
                if not isinstance(trajectory, dict) or not isinstance(trajectory.get("messages_and_choices"), list):
                    raise ValueError(f"line {index + 1} holds a trajectory with no messages_and_choices")
                items = trajectory["messages_and_choices"]
                first = next((i for i, m in enumerate(items) if isinstance(m, dict) and "finish_reason" in m),
                             len(items))
                messages = [m.get("message") if isinstance(m, dict) and "finish_reason" in m else m for m in items]
                rows.append(_row(trajectory, extras, messages, first, split, index))
    return rows


def _parquet(path: Path, split: str) -> list[dict]:
    import pyarrow.parquet as pq

    table = pq.read_table(path)
    if not {"group_index", "reward", "messages"} <= set(table.column_names):
        raise ValueError("no group_index, reward and messages columns")
    rows = []
    for trajectory in table.to_pylist():
        messages = []
        for m in trajectory["messages"] or ():
            calls = m.get("tool_calls")
            messages.append({**m, "tool_calls": json.loads(calls) if calls else None})
        first = next((i for i, m in enumerate(messages) if m.get("trainable")), len(messages))
        for key in ("metrics", "metadata", "tools", "group_metadata", "group_metrics"):
            if isinstance(trajectory.get(key), str):
                trajectory[key] = json.loads(trajectory[key])
        extras = {k: trajectory.pop(k) for k in ("group_metadata", "group_metrics", "group_logs") if trajectory.get(k)}
        rows.append(_row(trajectory, extras, [_untagged(m) for m in messages], first, split,
                         trajectory.pop("group_index")))
    return rows


def _untagged(message: dict) -> dict:
    return {k: v for k, v in message.items() if k != "trainable"}


def _row(trajectory: dict, extras: dict, messages: list, first: int, split: str, group: int) -> dict:
    fields: dict[str, Any] = {"group": f"{split}/{group}", **extras}
    for key in ("metrics", "metadata"):
        value = trajectory.get(key)
        if isinstance(value, dict):
            fields.update({f"{key}/{k}": v for k, v in value.items()})
    fields.update({k: v for k, v in trajectory.items()
                   if k not in ("reward", "metrics", "metadata", "messages_and_choices", "messages") and v})
    return row(fields, prompt=chat(messages[:first]), completion=chat(messages[first:]),
               reward=trajectory.get("reward"), split=split)
