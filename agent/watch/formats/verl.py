"""verl's own files: its ``file`` logger's scalars and its rollout and validation dumps.

Read from verl 0.9.1's writer code (the PyPI wheel; tests/test_watch_verl.py runs that code itself):

- ``verl/utils/tracking.py``, ``FileLogger.log`` (``trainer.logger`` holding ``file``): one line per
  ``Tracking.log(data, step)``, ``orjson.dumps({"step": step, "data": data})`` (NaN and ±Inf as null,
  left out here), at ``VERL_FILE_LOGGER_PATH`` or ``$VERL_FILE_LOGGER_ROOT/{project}/{experiment}.jsonl``.
  Each line's numbers are scalars at its step (validation's ``val-core/...`` and ``val-aux/...`` share
  the step's line), at the file's time (verl writes none).  The file is opened ``"wb"`` when a Tracking
  starts: a resumed run starts it anew.  A watcher that sees it shorter than what it sent says so and
  stops reading it (``sources.LineSource``); one that was not running then finds mid-line bytes where
  its offset falls, not JSON, and stops there too: what the agent holds is never changed.
- ``verl/trainer/ppo/ray_trainer.py``, ``RayPPOTrainer._write_generations`` (``_dump_generations``,
  from ``_log_rollout_data`` and ``_validate``): ``{trainer.rollout_data_dir or
  trainer.validation_data_dir}/{global_steps}.jsonl``, written whole from a thread, one line per
  sample: ``input``, ``output``, ``gts``, ``score``, ``step``, then the reward function's extras
  (``acc``, ``pred``, ``request_id``, ...).  A row at the file name's step: ``prompt`` ``input`` and
  ``completion`` ``output`` (decoded text), ``reward`` ``score``, every other field kept (a ground
  truth that is not text or a number as its JSON text).  No advantage is written.  Only the folder
  tells a validation dump from a training one: a folder whose name holds ``val`` or ``eval`` is
  validation (``split`` ``val``).  A dump written again (validation at a resumed step) is said, not
  sent twice (``sources.WholeSource``).
- Its ``tensorboard`` backend (``$TENSORBOARD_DIR`` or ``tensorboard_log/{project}/{experiment}``) is
  read by the event reader, named beside the rest with ``watch --run``.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from pilothouse.watch.formats.rows import at_step, row, samples, scalars
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
            if not (isinstance(obj, dict) and isinstance(obj.get("step"), int) and isinstance(obj.get("data"), dict)):
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
        rows = [row(sample, prompt=sample["input"], completion=sample["output"], reward=sample.get("score"),
                    split=split, used=("input", "output", "score", "step"))
                for _, sample in samples(path, ("input", "output"))]
        return at_step(path, step, rows)
