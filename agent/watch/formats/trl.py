"""TRL's completion files: ``{output_dir}/completions/completions_{global_step:05d}.parquet``.

Read from TRL 1.16's writer, ``GRPOTrainer.log`` (``trl/trainer/grpo_trainer.py``): with
``log_completions=True`` each log call writes ``pd.DataFrame(table).to_parquet(...)`` of the recent
samples it keeps (deques of ``generation_batch_size``): ``step`` (the log's global step on every
row), ``prompt`` and ``completion`` (text, or lists of messages for a conversational dataset), one
float column per reward function (named for it), the ``log_extra`` columns, ``advantage``.

Why a source of its own rather than a file each: the deques are never cleared, so consecutive files
repeat samples (all of them where a generation serves several logged steps, ``steps_per_generation``
> ``logging_steps``), and the same step's file is written again (an eval log, the final log).  The
completions folder is read as one stream: ``offset`` is the next file number to read, a file is
read once it settled, and the rows a file starts with that the file before it ends with (a deque
keeps its newest samples: what a file repeats is the previous file's tail, in order) are not sent
again; that earlier file is on disk, so a restarted watcher drops the same repeats.  Why the tail
and not any row seen before: two samples may be equal (a short completion, a GRPO group that
agrees), and a new one equal to an old one is still a new sample.
TRL writes no total reward: ``reward`` is the sum of the reward columns (TRL's ``nansum`` with its
default weights of 1), each also kept as ``rewards/<name>``.
"""

from __future__ import annotations

import json
import math
import re
from pathlib import Path
from typing import Any

from pilothouse.watch.formats.rows import row
from pilothouse.watch.points import MetricRecords
from pilothouse.watch.sources import SETTLE_S, Parsed, Read, records

FILE = re.compile(r"^completions_(\d+)\.parquet$")
FOLDER = "completions"
_FIXED = ("step", "prompt", "completion", "advantage")


def is_output_dir(folder: Path, dirs: list[str]) -> bool:
    """Whether ``folder`` (holding the folders ``dirs``) is a TRL output_dir: its completions folder holds
    completion files, or stands beside the TensorBoard callback's ``runs``.  Why not the files alone:
    GRPOTrainer makes the folder in ``__init__``, the event files come at train begin and the first
    completion file at the first log; a watcher looking in between would take ``runs/<date>_<host>``
    for a run of its own, and the output_dir would be a second run with the same scalars."""
    return FOLDER in dirs and ("runs" in dirs or bool(numbered(folder / FOLDER)))


def numbered(folder: Path) -> list[tuple[int, Path]]:
    try:
        names = sorted(folder.iterdir())
    except OSError:
        return []
    return sorted((int(m.group(1)), p) for p in names if (m := FILE.match(p.name)))


def _plain(value: Any) -> Any:
    """A nested parquet cell (chat messages) less the struct fields a message lacks: pyarrow gives every
    message of a column all the keys any of them has (``tool_calls: None`` beside a plain answer)."""
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items() if v is not None or k in ("content",)}
    if isinstance(value, list):
        return [_plain(v) for v in value]
    return value


def read_rows(path: Path) -> tuple[int | None, list[dict]]:
    """The file's step and its samples as rollout rows (``reward`` summed over the reward columns)."""
    import pyarrow.parquet as pq

    table = pq.read_table(path)
    columns = table.column_names
    if not {"prompt", "completion"} <= set(columns):
        raise ValueError("no prompt and completion columns")
    rewards = [c for c in columns if c not in _FIXED and str(table.schema.field(c).type) in ("double", "float")]
    nested = {c for c in columns if table.schema.field(c).type.num_fields}  # lists, structs: the rest is plain
    out, steps = [], set()
    for sample in table.to_pylist():
        if nested:
            sample = {k: _plain(v) if k in nested else v for k, v in sample.items()}
        steps.add(sample.get("step"))
        values = [sample[c] for c in rewards if isinstance(sample[c], float) and not math.isnan(sample[c])]
        fields = {(f"rewards/{c}" if c in rewards else c): v for c, v in sample.items()}
        out.append(row(fields, prompt=sample["prompt"], completion=sample["completion"],
                       reward=sum(values) if values else None, advantage=sample.get("advantage"),
                       used=_FIXED))
    step = steps.pop() if len(steps) == 1 else None
    return step if isinstance(step, int) else None, out


def _key(sample: dict) -> str:
    return json.dumps(sample, sort_keys=True, default=str)


def repeated(before: list[str], now: list[str]) -> int:
    """How many of the rows ``now`` starts with are the ones ``before`` ends with: the longest such run."""
    for n in range(min(len(before), len(now)), 0, -1):
        if before[len(before) - n] == now[0] and before[len(before) - n:] == now[:n]:
            return n
    return 0


class CompletionsSource:
    """A TRL ``completions`` folder, one stream of samples (see the module's docstring)."""

    name = "TRL completions"

    def __init__(self, key: str, path: Path, offset: int, metrics: MetricRecords):
        self.key, self.path, self.offset, self._metrics = key, path, offset, metrics
        self.damaged: str | None = None
        self.torn = False
        self._previous: tuple[int, list[str]] | None = None  # the last file read: its number and rows' keys

    def read(self, limit: int, now: float, eager: bool) -> Read:
        out = Read()
        for number, path in numbered(self.path):
            if number < self.offset:
                continue
            try:
                self.torn = not eager and now - path.stat().st_mtime < SETTLE_S
                if self.torn:
                    break
                step, rows = read_rows(path)
                seen = self._seen_before(number)
            except ImportError:
                self.damaged = "reading TRL's completion files needs pyarrow: pip install 'pilothouse[archive]'"
                break
            except (OSError, ValueError) as exc:  # pyarrow's errors are ValueErrors (ArrowInvalid) or OSErrors
                out.said.append(f"{path} is not a TRL completions file ({exc}): left out")
                self.offset = number + 1
                continue
            keys = [_key(r) for r in rows]
            new = rows[repeated(seen, keys):]
            at = number if step is None else step  # the file's name is its global step too
            records(Parsed(rollouts=[(at, path.stat().st_mtime, new)] if new else []), self._metrics, out)
            self._previous = (number, keys)
            self.offset = number + 1
            if out.records:  # a file's rows per read: see ROLLOUT_READS in pilothouse.watch.follower
                break
        return out

    def _seen_before(self, number: int) -> list[str]:
        """The rows' keys of the file before ``number``: read again from disk after a restart."""
        if self._previous is not None and self._previous[0] < number:
            return self._previous[1]
        earlier = [p for n, p in numbered(self.path) if n < number]
        if not earlier:
            return []
        try:
            return [_key(r) for r in read_rows(earlier[-1])[1]]
        except (OSError, ValueError):
            return []

    def pending(self) -> bool:
        return any(n >= self.offset for n, _ in numbered(self.path)) and not self.torn

    def close(self) -> None:
        pass
