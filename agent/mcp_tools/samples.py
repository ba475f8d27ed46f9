"""``rollouts`` and ``search_rollouts``: a step's sample rows, and the rows holding some words, as
`pilothouse rollouts` shows them, cut to fit a model's context (``shape.plain``: what was cut says so).

Rows are the training data's own text: they come back as data fields, never as instructions of this
server."""

from __future__ import annotations

import math
from typing import Any

from pilothouse.mcp_tools.reach import Answer, Reach, ToolFailure
from pilothouse.mcp_tools.reads import bounded
from pilothouse.mcp_tools.shape import plain, plural
from pilothouse.text import fmt_value, printable
from pilothouse.wire.rollout_groups import groups
from pilothouse.wire.rollouts import fts_query

MAX_ROWS = 100
MAX_CHARS = 20_000


def rollouts(reach: Reach, run: str, step: int | None = None, limit: int = 8, chars: int = 2000,
             agent: str | None = None) -> Answer:
    """The rows of one step (default: the latest step with rollouts), the first ``limit`` of them, each
    string cut at ``chars``; with the step's mean reward and its GRPO groups whose rewards are all
    equal (they give no signal)."""
    bounded(limit, "limit", MAX_ROWS)
    bounded(chars, "chars", MAX_CHARS)
    if step is not None and (isinstance(step, bool) or not isinstance(step, int) or step < 0):
        raise ToolFailure(f"step must be a step (a whole number, 0 or more), got {step!r}")
    url, run_id = reach.locate(run, agent)
    with reach.client(url) as client:
        batches = client.rollouts(run_id, step=step, last=1)
    if not batches:
        raise ToolFailure(f"run {run_id} has logged no rollouts")
    batch = batches[-1]
    rows = batch["rows"]
    rewards = [float(r) for row in rows if _finite(r := row.get("reward"))]
    found = groups(rows)
    data: dict[str, Any] = {
        "run": run_id, "agent": url, "step": batch["step"], "rows_total": len(rows),
        "mean_reward": sum(rewards) / len(rewards) if rewards else None,
        "groups": len(found), "groups_all_equal": sum(g.all_equal for g in found),
        "rows": [plain(row, chars) for row in rows[:limit]]}
    text = f"run {run_id} step {batch['step']}: {plural(len(rows), 'row')}"
    if rewards:
        text += f", mean reward {fmt_value(data['mean_reward'])}"
    if found and len(found) < len(rows):
        text += f"; {plural(len(found), 'group')}, {data['groups_all_equal']} with all rewards equal"
    if len(rows) > limit:
        text += f"; the first {limit} shown (raise limit for more)"
    return Answer(printable(text), data)


def search_rollouts(reach: Reach, run: str, words: str, in_prompt: bool = False, limit: int = 10,
                    chars: int = 1000, agent: str | None = None) -> Answer:
    """Rows of every step whose prompt or completion (``in_prompt``: prompt) holds every word
    (``"a phrase"``, ``word*`` a prefix), newest first."""
    bounded(limit, "limit", MAX_ROWS)
    bounded(chars, "chars", MAX_CHARS)
    try:
        fts_query(words)
    except ValueError as exc:
        raise ToolFailure(printable(f"cannot search for {words!r}: {exc}")) from None
    url, run_id = reach.locate(run, agent)
    with reach.client(url) as client:
        hits, indexing = client.search_rollouts(run_id, words, limit=limit, in_prompt=in_prompt)
    data = {"run": run_id, "agent": url, "words": words, "in_prompt": in_prompt, "indexing": indexing,
            "hits": [{"step": h["step"], "row": h["row"], "rollout": plain(h["rollout"], chars)} for h in hits]}
    where = "whose prompt holds" if in_prompt else "holding"
    text = f"run {run_id}: {plural(len(hits), 'row')} {where} {words!r}, newest first"
    if len(hits) == limit:
        text += " (the newest: raise limit for more)"
    if indexing:
        text += "; the agent is still indexing rollouts, the latest may be missing"
    return Answer(printable(text), data)


def _finite(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)
