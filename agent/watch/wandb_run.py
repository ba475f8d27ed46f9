"""W&B offline runs (``wandb/offline-run-*/run-<id>.wandb``) read with wandb's own reader: its
``DataStore`` (the file's block framing and checksums) and its ``Record`` protobuf.  History rows
become metric points at their ``_step`` with their ``_timestamp``; the run's config records its
config.  Summaries are not points (they repeat the history's last values).  Needs ``pilothouse[wandb]``."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

from wandb.proto.wandb_internal_pb2 import Record
from wandb.sdk.internal.datastore import DataStore

from pilothouse.watch.finished import ForeignRun, SourceError, wandb_files
from pilothouse.wire.checks import check_config, check_run_id, normal_name


def read_runs(path: Path, project: str | None) -> list[ForeignRun]:
    """Every run under ``path``, read whole before anything is sent: a damaged one stops the import."""
    return [read_run(f, project) for f in wandb_files(path)]


def read_run(path: Path, project: str | None) -> ForeignRun:
    store = DataStore()
    try:
        store.open_for_scan(str(path))
        run: ForeignRun | None = None
        config: dict[str, Any] = {}
        rows = []
        while (data := store.scan_data()) is not None:
            record = Record.FromString(data)
            kind = record.WhichOneof("record_type")
            if kind == "run":
                run = _run(record.run, project)
                _configure(config, record.run.config)
            elif kind == "config":
                _configure(config, record.config)
            elif kind == "history":
                rows.append(_row(record.history))
    except SourceError:
        raise
    except Exception as exc:  # noqa: BLE001 (the reader says damage with assertions and bare Exceptions)
        raise SourceError(f"{path} is not a readable W&B run file ({type(exc).__name__}: {exc or 'bad framing'}); "
                          "nothing imported") from None
    if run is None:
        raise SourceError(f"{path} holds no W&B run record; nothing imported")
    run.config = _checked(config, run)
    odd: dict[str, None] = {}  # keys whose values are not numbers (tables, images, text), in order
    missing = 0
    for step, wall_time, values, left_out in rows:
        odd.update(dict.fromkeys(left_out))
        if step is None:
            missing += 1
        else:
            run.rows.append((step, run.created if math.isnan(wall_time) else wall_time, values))
    if odd:
        run.skipped.append(f"history values that are not numbers are left out: {', '.join(odd)}")
    if missing:
        run.skipped.append(f"{missing} history rows without a _step are left out")
    return run


def _run(record: Any, project: str | None) -> ForeignRun:
    try:
        return ForeignRun(id=check_run_id(f"wandb-{record.run_id}"),
                          project=project or normal_name(record.project or "wandb", "project"),
                          name=normal_name(record.display_name or record.run_id, "run name"),
                          source="wandb", created=record.start_time.ToMicroseconds() / 1e6)
    except ValueError as exc:
        raise SourceError(f"W&B run {record.run_id!r}: {exc}") from None


def _key(item: Any) -> str:
    nested = item.nested_key
    if not nested:
        return item.key
    return nested[0] if len(nested) == 1 else ".".join(nested)


def _configure(config: dict, record: Any) -> None:
    for item in record.update:
        config[_key(item)] = json.loads(item.value_json)
    for item in record.remove:
        config.pop(_key(item), None)


def _checked(config: dict, run: ForeignRun) -> dict:
    """The config values the agent takes; W&B's own bookkeeping (``_wandb``) and odd values left out."""
    out = {}
    for key, value in config.items():
        if key.startswith("_wandb"):
            continue
        value = value.get("value", value) if isinstance(value, dict) and set(value) <= {"value", "desc"} else value
        try:
            out[key] = check_config({key: value})[key]
        except (TypeError, ValueError) as exc:
            run.skipped.append(f"config {key!r}: {exc}")
    return out


def _row(history: Any) -> tuple[int | None, float, dict[str, float], list[str]]:
    """A history row: its ``_step``, ``_timestamp``, numeric values and the keys that are not numbers."""
    values: dict[str, float] = {}
    left_out = []
    step = history.step.num if history.HasField("step") else None
    wall_time = math.nan
    for item in history.item:
        key = _key(item)
        if key.startswith("_"):
            if key == "_step":
                step = int(json.loads(item.value_json))
            elif key == "_timestamp":
                wall_time = float(item.value_json)
            continue  # _runtime and W&B's own
        value = _number(item.value_json)
        if value is None:
            left_out.append(f"{key!r}")
        else:
            values[key] = value
    return step, wall_time, values, left_out


def _number(text: str) -> float | None:
    """A JSON number (with W&B's NaN, Infinity, -Infinity) as a float, else None (text, tables, media).
    ``float`` reads every JSON number and those three; what it refuses is not a number."""
    try:
        return float(text)
    except ValueError:
        return None
