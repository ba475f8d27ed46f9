"""What of a TensorBoard event becomes what in a run: scalars -> metric records, text holding a
prompt/completion table -> rollouts, the hparams plugin's session -> the run's config.

Everything else (images, histograms, graphs) is passed over.  A value the agent would refuse (a
negative step, a name with control characters) is left out and said once per tag, never sent.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from typing import Any

from tensorboard.compat.proto.event_pb2 import Event
from tensorboard.plugins.hparams import plugin_data_pb2
from tensorboard.util import tensor_util

from pilothouse.watch.formats import openrlhf
from pilothouse.watch.points import MetricRecords, rollout_parts
from pilothouse.wire.checks import INT64_MAX
from pilothouse.wire.records import REC_ROLLOUTS

HPARAMS_START = "_hparams_/session_start_info"
# table columns that name a rollout's prompt, completion and reward (lower case), as frameworks write them
_COLUMNS = {"prompt": ("prompt", "input", "question", "query", "instruction"),
            "completion": ("completion", "output", "response", "generation"),
            "reward": ("reward", "score")}
_CANONICAL = {name: key for key, names in _COLUMNS.items() for name in names}
_TABLE_RULE = re.compile(r"^\s*\|?\s*:?-{3,}:?\s*(\|\s*:?-{3,}:?\s*)*\|?\s*$")
# verl's validation generations: "### Sample N" blocks of "**Input:** ...", "**Output:** ...", "**Score:** ..."
_SAMPLE = re.compile(r"^### Sample \d+\s*$", re.M)
_FIELD = re.compile(r"^\*\*([A-Za-z_ ]{1,40}):\*\*[ \t]?", re.M)


@dataclass
class Decoded:
    """One event's records (in the trainer's queue form), config values and what was left out."""

    records: list[tuple] = field(default_factory=list)
    config: dict[str, Any] = field(default_factory=dict)
    skipped: list[str] = field(default_factory=list)  # why, one line per tag


class Summaries:
    """Decodes a run's events in order; it remembers each tag's plugin (TF2 writers name it once, on
    the tag's first value) and the metric names it has let through."""

    def __init__(self, plugins: dict[str, str] | None = None, metrics: MetricRecords | None = None):
        self.plugins: dict[str, str] = dict(plugins or {})
        self.metrics = metrics or MetricRecords()  # shared with the run's other files: one name check

    def decode(self, event: Event) -> Decoded:
        out = Decoded()
        if not event.HasField("summary"):
            return out
        step = event.step
        scalars: dict[str, float] = {}
        for value in event.summary.value:
            tag = value.tag
            if value.metadata.plugin_data.plugin_name:
                self.plugins[tag] = value.metadata.plugin_data.plugin_name
            plugin = self.plugins.get(tag)
            if value.HasField("simple_value") or plugin == "scalars":
                self._scalar(tag, value, scalars, out)
            elif plugin == "text":
                self._text(tag, step, event.wall_time, value, out)
            elif plugin == "hparams" and tag == HPARAMS_START:
                out.config.update(_hparams(value.metadata.plugin_data.content))
        record = self.metrics.record(step, event.wall_time, scalars, out.skipped)
        if record is not None:
            out.records.insert(0, record)
        return out

    def _scalar(self, tag: str, value: Any, scalars: dict[str, float], out: Decoded) -> None:
        name = self.metrics.name(tag, out.skipped)
        if name is None:
            return
        number = value.simple_value if value.HasField("simple_value") else _tensor_number(value.tensor)
        if number is None:
            self.metrics.skip(out.skipped, tag, f"tag {tag!r} is not a single number: left out")
            return
        scalars[name] = number

    def _text(self, tag: str, step: int, wall_time: float, value: Any, out: Decoded) -> None:
        rows = text_rollouts(tensor_util.make_ndarray(value.tensor))
        if rows is None:
            return
        if not 0 <= step <= INT64_MAX:
            self.metrics.skip(out.skipped, f"step {step}", f"step {step} is negative: rollouts at it are left out")
            return
        for part in rollout_parts(rows):
            out.records.append((REC_ROLLOUTS, None, (step, wall_time, part)))


def _tensor_number(tensor: Any) -> float | None:
    try:
        array = tensor_util.make_ndarray(tensor)
    except (ValueError, TypeError):
        return None
    if array.size != 1 or array.dtype.kind not in "fiub":
        return None
    return float(array.reshape(()))


def _hparams(content: bytes) -> dict[str, Any]:
    data = plugin_data_pb2.HParamsPluginData.FromString(content)
    config: dict[str, Any] = {}
    for name, value in data.session_start_info.hparams.items():
        kind = value.WhichOneof("kind")
        if kind == "number_value":
            number = value.number_value
            config[name] = int(number) if number.is_integer() and abs(number) < 2**53 else number
        elif kind == "string_value":
            config[name] = value.string_value
        elif kind == "bool_value":
            config[name] = value.bool_value
    return config


def text_rollouts(array: Any) -> list[dict] | None:
    """Rollout rows from a text summary's strings: a markdown table, a 2-D table whose first row
    names the columns, verl's "### Sample" blocks or OpenRLHF's "Sample: ... Reward: x" text; None
    when it holds none of them."""
    cells = [[_str(c) for c in row] for row in array] if array.ndim == 2 else None
    if cells is not None and len(cells) > 1:
        return _rows(cells[0], cells[1:])
    if array.ndim > 1:
        return None
    texts = [_str(t) for t in array.reshape(-1)]
    for text in texts:
        rows = _markdown_table(text) or _samples(text) or openrlhf.sample_rows(text)
        if rows:
            return rows
    return None


def _str(cell: Any) -> str:
    return cell.decode("utf-8", "replace") if isinstance(cell, bytes) else str(cell)


def _rows(header: list[str], body: list[list[str]]) -> list[dict] | None:
    keys = [_CANONICAL.get(h.strip().lower(), h.strip().lower() or f"column{i}") for i, h in enumerate(header)]
    if "prompt" not in keys and "completion" not in keys or len(set(keys)) != len(keys):
        return None
    return [{k: _cell(k, v) for k, v in zip(keys, row)} for row in body]


def _cell(key: str, text: str) -> Any:
    text = text.strip()
    if key in ("prompt", "completion"):
        return text
    try:
        number = float(text)
    except ValueError:
        return text
    return number if math.isfinite(number) or text.lower().lstrip("+-") in ("nan", "inf", "infinity") else text


def _markdown_table(text: str) -> list[dict] | None:
    lines = [line for line in text.strip().splitlines() if line.strip()]
    if len(lines) < 3 or not _TABLE_RULE.match(lines[1]):
        return None
    split = [_table_cells(line) for line in lines]
    if any(len(cells) != len(split[0]) for cells in split[2:]):
        return None
    return _rows(split[0], split[2:])


def _table_cells(line: str) -> list[str]:
    line = line.strip()
    line = line[1:] if line.startswith("|") else line
    line = line[:-1] if line.endswith("|") and not line.endswith("\\|") else line
    return [c.replace("\\|", "|").replace("<br>", "\n") for c in re.split(r"(?<!\\)\|", line)]


def _samples(text: str) -> list[dict] | None:
    blocks = _SAMPLE.split(text)[1:]
    rows = []
    for block in blocks:
        block = block.strip().removesuffix("---").strip()
        marks = list(_FIELD.finditer(block))
        fields = {m.group(1).strip(): block[m.end():nxt.start() if nxt else len(block)].strip()
                  for m, nxt in zip(marks, [*marks[1:], None])}
        row = _rows(list(fields), [list(fields.values())])
        if row:
            rows.extend(row)
    return rows or None
