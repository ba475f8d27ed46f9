"""prime-rl's and ART's files written exactly as their own code writes them, and the rollout rows
each record should become.

- prime-rl (PrimeIntellect-ai/prime-rl @ 559b447): ``src/prime_rl/monitors/file.py`` ``FileMonitor``
  (``log_metrics``, ``log_episodes``; its async wrapper and logger left out), with
  ``prime_rl/utils/utils.py`` ``sanitize``; episode records in the shape of verifiers @ a60a606
  ``Episode.to_record()`` (``model_dump(mode="json", exclude=EXCLUDE_FIELDS, exclude_none=True)``).
  orjson is not installed here: ``_orjson_line`` writes what ``orjson.dumps(..., OPT_APPEND_NEWLINE)``
  writes for these records (compact separators, UTF-8, one newline).
- ART (openpipe-art wheels): 0.4.12 ``art/utils/trajectory_logging.py`` ``serialize_trajectory_groups``
  written by ``art/local/backend.py`` ``LocalBackend._log`` (``write_jsonl``); 0.5.18
  ``write_trajectory_groups_parquet`` (``write_parquet``); ``art/model.py`` ``Model._log_metrics``
  (``append_history``).
"""

from __future__ import annotations

import json
import math
import time
from datetime import datetime
from pathlib import Path


def sanitize(metrics: dict) -> dict:
    """prime-rl's ``sanitize``: NaN and ±Inf dropped (the key disappears)."""
    return {k: v for k, v in metrics.items() if not (isinstance(v, float) and not math.isfinite(v))}


def _orjson_line(record: dict) -> bytes:
    return json.dumps(record, separators=(",", ":"), ensure_ascii=False, default=str).encode() + b"\n"


class FileMonitor:
    """prime-rl's ``FileMonitor``: ``metrics.jsonl`` line-buffered append, episodes appended per step."""

    def __init__(self, output_dir: Path, path: str = "metrics.jsonl"):
        self.output_dir = output_dir
        self.path = output_dir / path
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.file = open(self.path, "a", buffering=1)  # noqa: SIM115 (as prime-rl keeps it open)

    def log_metrics(self, metrics: dict, step: int) -> dict:
        row = {"step": step, "time": time.time(), **sanitize(metrics)}
        self.file.write(json.dumps(row) + "\n")
        return row

    def log_episodes(self, episodes: list[dict], step: int, kind: str, subset: str) -> Path:
        path = self.output_dir / "rollouts" / f"step_{step}" / kind / subset / "traces.jsonl"
        path.parent.mkdir(parents=True, exist_ok=True)
        with open(path, "ab") as f:
            for episode in episodes:
                f.write(_orjson_line(episode))
        return path

    def close(self) -> None:
        self.file.close()


def _node(message: dict, parent: int | None, sampled: bool, stamp: float, tokens: int,
          advantage: float | None = None) -> dict:
    """A MessageNode as ``model_dump(mode="json", exclude_none=True)`` writes it (token arrays included)."""
    node = {"message": message, "sampled": sampled, "timestamp": stamp, "token_ids": list(range(100, 100 + tokens)),
            "mask": [sampled and i > 0 for i in range(tokens)], "is_content": [],
            "logprobs": [-0.25] * (tokens - 1 if sampled else 0)}
    if parent is not None:
        node["parent"] = parent
    if advantage is not None:
        node["advantages"] = [advantage] * (tokens - 1)
    return node


def _trace(trace_id: str, nodes: list[dict], rewards: dict, metrics: dict, ok: bool = True) -> dict:
    return {"version": 1, "id": trace_id, "verifiers": {"version": "0.3.1"},
            "task": {"type": "MathTask", "data": {"question": "2+3?", "answer": "5"}},
            "agent": {"config": {"max_turns": 4}, "name": "solver", "trainable": True}, "tools": [],
            "nodes": nodes,
            "calls": [{"node": i, "model": "tiny", "finish_reason": "stop", "time": 0.5}
                      for i, n in enumerate(nodes) if n["sampled"]],
            "request_rewrites": [], "response_rewrites": [], "rewards": rewards, "metrics": metrics, "info": {},
            "extra_usage": [], "is_completed": True, "ok": ok, "stop_condition": "completed", "errors": [],
            "timing": {"start": nodes[0]["timestamp"] if nodes else 0.0}}


def episode(step: int, n: int, kind: str = "train", advantage: float | None = None) -> tuple[dict, list[dict]]:
    """Episode ``n`` of ``step`` (one of three kinds, by ``n % 3``) as ``to_record()`` writes it, and
    the rows it should become (written out, not derived by the reader's code).

    0: a tool-calling trace (system, user, a sampled call with reasoning and opaque provider state,
    the tool's result, a sampled answer); 1: a retried answer (two branches off the user message: the
    final branch is the retry); 2: an episode that failed before any trace."""
    t = 1.7e9 + step * 10 + n
    group = f"g{step}-{kind}"
    env = {"id": "math-env", "name": "math"}
    head = {"id": f"e{step}-{kind}-{n}", "env": env, "task": {"type": "MathTask", "data": {"question": "2+3?"}},
            "group": {"id": group}, "run": {"type": "train", "id": "r1", "work": {"type": kind, "step": step,
                                                                                     "policy": {"start": step,
                                                                                                "end": step}}}}
    split = {} if kind == "train" else {"split": kind}
    system, user = {"role": "system", "content": "Use the calculator."}, {"role": "user", "content": f"2+3? ({n})"}
    base = {"group": group, "env": "math", "episode": head["id"], "task": '{"question": "2+3?"}'}
    if n % 3 == 0:
        call = {"role": "assistant", "content": None, "reasoning_content": "add them",
                "tool_calls": [{"id": "c1", "name": "add", "arguments": '{"a": 2, "b": 3}'}],
                "provider_state": [{"encrypted": "xyz"}]}
        result = {"role": "tool", "tool_call_id": "c1", "content": [{"type": "text", "text": "5"}]}
        answer = {"role": "assistant", "content": f"5 (step {step})"}
        nodes = [_node(system, None, False, t, 4), _node(user, 0, False, t, 6),
                 _node(call, 1, True, t + 0.25, 9, advantage), _node(result, 2, False, t + 0.5, 3),
                 _node(answer, 3, True, t + 0.75, 5, advantage)]
        score = 1.0 - step / 10
        trace = _trace(f"t{step}-{n}", nodes, {"correct": {"score": score, "weight": 2.0}, "format": None},
                       {"turns": 2, "tool_calls": 1})
        want = {"prompt": [system, user],
                "completion": [{"role": "assistant", "reasoning_content": "add them",
                                "tool_calls": [{"type": "function", "id": "c1",
                                                "function": {"name": "add", "arguments": '{"a": 2, "b": 3}'}}]},
                               result, answer],
                "reward": score * 2.0, **({"advantage": advantage} if advantage is not None else {}), **split,
                **base, "trace": trace["id"], "agent": "solver", "ok": True, "stop_condition": "completed",
                "completion_tokens": 12, "rewards/correct": score, "metrics/turns": 2.0, "metrics/tool_calls": 1.0}
        return {**head, "ok": True, "errors": [], "traces": [trace]}, [want]
    if n % 3 == 1:
        first = {"role": "assistant", "content": "6"}
        retry = {"role": "assistant", "content": "5"}
        nodes = [_node(user, None, False, t, 6), _node(first, 0, True, t + 0.25, 2), _node(retry, 0, True, t + 0.5, 2)]
        trace = _trace(f"t{step}-{n}", nodes, {"correct": {"score": 0.5, "weight": 1.0}}, {})
        want = {"prompt": [user], "completion": [retry], "reward": 0.5, **split, **base, "trace": trace["id"],
                "agent": "solver", "ok": True, "stop_condition": "completed", "completion_tokens": 1,
                "rewards/correct": 0.5}
        return {**head, "ok": True, "errors": [], "traces": [trace]}, [want]
    errors = [{"type": "SandboxError", "message": "sandbox timed out", "status_code": 504}]
    want = {**split, **base, "ok": False, "errors": "SandboxError: sandbox timed out"}
    return {**head, "ok": False, "errors": errors, "traces": []}, [want]


# --- ART --------------------------------------------------------------------------------------------

def trajectory(step: int, g: int, i: int, split: str) -> dict:
    """A trajectory as ART holds it: a system and user message, a model output (a Choice) calling a
    tool, the tool's result, a final Choice."""
    call = {"id": "call_1", "type": "function", "function": {"name": "lookup", "arguments": '{"q": "x"}'}}
    return {"reward": round(0.25 * i + step / 8, 4), "metrics": {"correct": float(i % 2), "turns": 2},
            "metadata": {"scenario": f"s{g}"}, "logs": [f"step {step}"] if i == 0 else [], "tools": None,
            "messages_and_choices": [
                {"role": "system", "content": "You search."}, {"role": "user", "content": f"find x ({split} {g})"},
                {"finish_reason": "tool_calls", "index": 0, "logprobs": None,
                 "message": {"role": "assistant", "content": None, "refusal": None, "annotations": [],
                             "tool_calls": [call]}},
                {"role": "tool", "tool_call_id": "call_1", "content": "x=1"},
                {"finish_reason": "stop", "index": 0, "logprobs": None,
                 "message": {"role": "assistant", "content": f"x is 1 ({i})", "refusal": None}}]}


def trajectory_row(step: int, g: int, i: int, split: str) -> dict:
    """The row ``trajectory(step, g, i, split)`` should become."""
    call = {"id": "call_1", "type": "function", "function": {"name": "lookup", "arguments": '{"q": "x"}'}}
    row = {"prompt": [{"role": "system", "content": "You search."},
                      {"role": "user", "content": f"find x ({split} {g})"}],
           "completion": [{"role": "assistant", "tool_calls": [call]},
                          {"role": "tool", "tool_call_id": "call_1", "content": "x=1"},
                          {"role": "assistant", "content": f"x is 1 ({i})"}],
           "reward": round(0.25 * i + step / 8, 4), **({"split": split} if split != "train" else {}),
           "group": f"{split}/{g}", "metrics/correct": float(i % 2), "metrics/turns": 2,
           "metadata/scenario": f"s{g}"}
    if i == 0:
        row["logs"] = f'["step {step}"]'
    return row


def message_or_choice_to_dict(item: dict) -> dict:
    item = dict(item)
    item.pop("logprobs", None)
    return item


def write_jsonl(path: Path, groups: list[list[dict]]) -> None:
    """ART 0.4.0-0.5.4: one line per group, joined by newlines, none after the last; "w"."""
    lines = [json.dumps({"trajectories": [{
        "reward": t["reward"], "metrics": t["metrics"], "metadata": t["metadata"],
        "messages_and_choices": [message_or_choice_to_dict(m) for m in t["messages_and_choices"]],
        "tools": t["tools"], "additional_histories": [], "logs": t["logs"]} for t in group]}) for group in groups]
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w") as f:
        f.write("\n".join(lines))


def _flatten_message(msg: dict) -> dict:
    if "finish_reason" in msg:
        inner = msg.get("message", {})
        tool_calls = inner.get("tool_calls")
        return {"role": inner.get("role"), "content": inner.get("content"),
                "tool_calls": json.dumps(tool_calls) if tool_calls else None, "tool_call_id": None, "trainable": True}
    tool_calls = msg.get("tool_calls")
    return {"role": msg.get("role"), "content": msg.get("content"),
            "tool_calls": json.dumps(tool_calls) if tool_calls else None, "tool_call_id": msg.get("tool_call_id"),
            "trainable": False}


def write_parquet(path: Path, groups: list[list[dict]]) -> None:
    """ART >= 0.5.5: ``write_trajectory_groups_parquet``, one row per trajectory, ZSTD."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    rows = [{"group_index": gi, "group_metadata": None, "group_metrics": None, "group_logs": None,
             "reward": t["reward"], "metrics": json.dumps(t["metrics"]) if t["metrics"] else None,
             "metadata": json.dumps(t["metadata"]) if t["metadata"] else None,
             "tools": json.dumps(t["tools"]) if t["tools"] else None, "logs": t["logs"] if t["logs"] else None,
             "messages": [_flatten_message(m) for m in t["messages_and_choices"]]}
            for gi, group in enumerate(groups) for t in group]
    message_type = pa.struct([("role", pa.string()), ("content", pa.string()), ("tool_calls", pa.string()),
                              ("tool_call_id", pa.string()), ("trainable", pa.bool_())])
    schema = pa.schema([("group_index", pa.int64()), ("group_metadata", pa.string()), ("group_metrics", pa.string()),
                        ("group_logs", pa.list_(pa.string())), ("reward", pa.float64()), ("metrics", pa.string()),
                        ("metadata", pa.string()), ("tools", pa.string()), ("logs", pa.list_(pa.string())),
                        ("messages", pa.list_(message_type))])
    path.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(pa.Table.from_pylist(rows, schema=schema), path, compression="zstd")


def append_history(model_dir: Path, prefixed: dict, step: int) -> dict:
    """ART's ``_log_metrics``: a line of the split-prefixed metrics (NaN left out), the step, the time."""
    line = {k: v for k, v in prefixed.items() if v == v} | {"step": step, "recorded_at": datetime.now().isoformat()}
    with open(model_dir / "history.jsonl", "a") as f:
        f.write(json.dumps(line) + "\n")
    return line
