"""GRPO rollouts, every step, with no user code: what GRPOTrainer keeps of its latest generation.

TRL sizes ``trainer._logs`` to one generation batch and refills it whenever it generates
(gathered from every process), so after a step its contents are the completions that step's
update used.  A generation is new when its advantages are new objects (``tolist()`` makes
fresh floats each time), which costs one identity check per step and changes nothing in TRL.
With a conversational dataset TRL's prompts and completions are lists of messages (a tool-calling
completion holds the calls, the tool results and the turns after them): they are logged as such.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Mapping
from typing import Any

from pilothouse.trainer.run import Run
from pilothouse.wire import chat
from pilothouse.wire.records import MAX_ROLLOUT_ROWS

log = logging.getLogger("pilothouse")


class GRPORollouts:
    def __init__(self, trainer: Any, limit: int | None = None):
        self.trainer = trainer
        self.limit = limit
        self._seen: Any = None

    @staticmethod
    def fits(trainer: Any) -> bool:
        logs = getattr(trainer, "_logs", None)
        return isinstance(logs, dict) and all(k in logs for k in ("prompt", "completion", "rewards", "advantages"))

    def skip(self) -> None:
        """What is there now is not a training generation (an evaluation ran)."""
        advantages = self.trainer._logs["advantages"]
        self._seen = advantages[-1] if advantages else None

    def log_new(self, run: Run, step: int) -> int:
        """Log the rows of a generation not logged yet at ``step``; returns how many."""
        logs = self.trainer._logs
        advantages = logs["advantages"]
        if not advantages or advantages[-1] is self._seen:
            return 0
        self._seen = advantages[-1]
        rows = self._rows(logs)
        if self.limit is not None:
            rows = rows[:self.limit]
        _log_in_parts(run, step, rows)
        return len(rows)

    def _rows(self, logs: dict) -> list[dict[str, Any]]:
        rewards = {name: list(values) for name, values in logs["rewards"].items()}
        weights = dict(zip(self.trainer.reward_func_names, self.trainer.reward_weights.tolist()))
        rows = []
        texts = zip(logs["prompt"], logs["completion"], logs["advantages"])
        for i, (prompt, completion, advantage) in enumerate(texts):
            per_func = {name: values[i] for name, values in rewards.items() if i < len(values)}
            scored = [weights.get(name, 1.0) * r for name, r in per_func.items() if not _missing(r)]
            row = {"prompt": _field("prompt", prompt), "completion": _field("completion", completion),
                   "reward": math.fsum(scored) if scored else math.nan, "advantage": float(advantage)}
            row.update({f"rewards/{name}": math.nan if _missing(r) else float(r) for name, r in per_func.items()})
            rows.append(row)
        return rows


def _log_in_parts(run: Run, step: int, rows: list[dict]) -> None:
    """As few calls as the per-call limits allow; a single row too large to send is left out, said."""
    if not rows:
        return
    if len(rows) > MAX_ROLLOUT_ROWS:
        _log_in_parts(run, step, rows[:MAX_ROLLOUT_ROWS])
        _log_in_parts(run, step, rows[MAX_ROLLOUT_ROWS:])
        return
    try:
        run.log_rollouts(step, rows)
    except ValueError as exc:
        if len(rows) == 1:
            log.warning("pilothouse: a rollout of step %d was not logged: %s", step, exc)
            return
        half = len(rows) // 2
        _log_in_parts(run, step, rows[:half])
        _log_in_parts(run, step, rows[half:])


def _missing(value: Any) -> bool:
    return value is None or isinstance(value, float) and math.isnan(value)


def _field(key: str, value: Any) -> Any:
    """A prompt or completion as the row keeps it: text as text; a conversation (TRL's conversational
    datasets: a list of messages; a tool-calling completion: the assistant's calls, the tool results
    and what came after) as plain messages, whole.  One that the row cannot hold even so (a field
    too deep or too long) is kept as ``role: content`` lines rather than lost."""
    if isinstance(value, str):
        return value
    plain = _plain(value)
    if isinstance(plain, list) and all(isinstance(m, dict) for m in plain):
        if chat.check_field(key, plain) is None:
            return plain
        return "\n".join(map(_message_text, plain))
    return str(plain)


def _message_text(message: dict) -> str:
    """``role: content``, then `` → name(arguments)`` for each tool call: of any shape (it failed the
    row's checks), so nothing is assumed of it."""
    content = message.get("content")
    if isinstance(content, list):  # multimodal parts: keep the text ones
        content = " ".join(str(p.get("text", "")) for p in content if isinstance(p, dict) and p.get("type") == "text")
    text = f"{message.get('role', '?')}: {'' if content is None else content}"
    calls = message.get("tool_calls")
    for call in calls if isinstance(calls, list) else ():
        function = call.get("function") if isinstance(call, dict) else None
        if isinstance(function, dict):
            text += f" → {function.get('name')}({chat.arguments_text(function.get('arguments'))})"
    return text


def _plain(value: Any) -> Any:
    """``value`` with Python's own types only: what TRL keeps may hold numpy arrays, numpy scalars
    (subclasses of float and str among them) or tensors; ``tolist()`` turns those into lists and
    Python numbers.  An image part is kept as ``{"type": "image"}`` (the pixels stay with TRL, as in
    its own completion logs); any other object becomes its text."""
    for kind in (bool, str, int, float):
        if isinstance(value, kind):
            return kind(value)
    if value is None:
        return None
    if isinstance(value, Mapping):
        if value.get("type") == "image":
            return {"type": "image"}
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    if callable(getattr(value, "tolist", None)):
        return _plain(value.tolist())
    return str(value)
