"""verl's own files: its ``file`` logger's scalars and its rollout and validation dumps.

Read from verl 0.9.1's writer code:

- ``verl/utils/tracking.py``, ``FileLogger.log``: one line per ``Tracking.log(data, step)``,
  ``orjson.dumps({"step": step, "data": data})`` (NaN and ±Inf as null), at ``VERL_FILE_LOGGER_PATH``
  or ``$VERL_FILE_LOGGER_ROOT/{project}/{experiment}.jsonl``; the file is truncated when a Tracking
  starts (a resumed run starts it anew: the watcher says so and stops reading it).
- ``verl/trainer/ppo/ray_trainer.py``, ``RayPPOTrainer._write_generations`` (``_dump_generations``,
  from ``_log_rollout_data`` and ``_validate``): ``{trainer.rollout_data_dir or
  trainer.validation_data_dir}/{global_steps}.jsonl``, written whole from a thread, one line per
  sample: ``input``, ``output``, ``gts``, ``score``, ``step``, then the reward function's extras
  (``acc``, ``pred``, ``request_id``, ...).  No advantage is written.  Only the folder tells a
  validation dump from a training one: a folder whose name holds ``val`` or ``eval`` is validation.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from pilothouse.watch.formats.rows import row, scalars
from pilothouse.watch.sources import Parsed, first_object

STEP_FILE = re.compile(r"^(\d+)\.jsonl$")
_VAL_FOLDER = re.compile(r"(^|[^a-z])(val|eval|validation)([^a-z]|$)", re.I)


def is_file_logger(path: Path) -> bool:
    """Whether ``path``'s first line is a file-logger line, ``{"step": N, "data": {...}}``."""
    first = first_object(path)
    return isinstance(first, dict) and set(first) == {"step", "data"} and isinstance(first["data"], dict)


class Scalars:
    name = "verl file logger"

    def lines(self, path: Path, objects: list[tuple[int, Any]]) -> Parsed:
        out = Parsed()
        wall = path.stat().st_mtime  # verl writes no time: the file's, the nearest there is
        for offset, obj in objects:
            if not isinstance(obj, dict) or not isinstance(obj.get("step"), int) or not isinstance(obj.get("data"), dict):
                out.said.append(f"{path}: the line at offset {offset} is not a verl file-logger line "
                                '({"step": N, "data": {...}}): left out')
                continue
            out.metrics.append((obj["step"], wall, scalars(obj["data"])))
        return out


class Generations:
    """One ``{step}.jsonl`` dump: a step's samples, training or validation by its folder."""

    name = "verl generations dump"

    def file(self, path: Path) -> Parsed:
        step = int(STEP_FILE.match(path.name).group(1))  # type: ignore[union-attr]
        split = "val" if _VAL_FOLDER.search(path.parent.name) else "train"
        rows = []
        with open(path, encoding="utf-8") as f:
            for n, line in enumerate(f, 1):
                if not line.strip():
                    continue
                sample = json.loads(line)
                if not isinstance(sample, dict) or not ({"input", "output"} <= set(sample)):
                    raise ValueError(f"line {n} has no input and output")
                rows.append(row(sample, prompt=sample["input"], completion=sample["output"], reward=sample.get("score"),
                                split=split, used=("input", "output", "score", "step")))
        return Parsed(rollouts=[(step, path.stat().st_mtime, rows)] if rows else [])
