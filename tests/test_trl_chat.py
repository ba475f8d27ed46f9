"""PilothouseCallback with TRL's GRPOTrainer on a conversational dataset, no user code: the rollouts
stored at a real agent hold TRL's prompts and completions as lists of messages, exactly what TRL
generated and scored (the reward function keeps a copy of what TRL handed it); a tool-calling
completion whole, with the call's arguments as a map, the tool's result and the turn after it.
A tiny model on the CPU, one or two steps (tests/support/trl_chat.py)."""

from __future__ import annotations

import copy
import json
import math

import pytest
from support.rollout_runs import same

from pilothouse.client import Client

pytest.importorskip("trl")

ASK = [{"role": "system", "content": "answer with letters"}, {"role": "user", "content": "say abc"}]


def train(agent_url: str, tmp_path, monkeypatch, name: str, **trainer_args) -> tuple[dict[int, list[dict]], list]:
    """Train with the callback on a run of its own; (the rows the agent stored by step, what the
    reward function was handed at each generation: [(prompts, completions)])."""
    import pilothouse as ph
    from pilothouse.hf import PilothouseCallback

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    from datasets import Dataset
    from trl import GRPOConfig, GRPOTrainer

    seen: list = []

    def letters(prompts: list, completions: list, **_) -> list[float]:
        seen.append(copy.deepcopy((prompts, completions)))
        return [float(c[-1]["content"].count("a")) for c in completions]

    steps = trainer_args.pop("steps")
    run = ph.init("trl", name=name, agent=agent_url, tunable={})
    args = GRPOConfig(output_dir=str(tmp_path / name), max_steps=steps, per_device_train_batch_size=2,
                      num_generations=2, learning_rate=1e-3, logging_steps=1, save_strategy="no", report_to=[],
                      use_cpu=True, disable_tqdm=True, max_completion_length=trainer_args.pop("max_length"))
    prompts = trainer_args.pop("prompts")
    trainer = GRPOTrainer(reward_funcs=[letters], args=args, train_dataset=Dataset.from_dict({"prompt": prompts}),
                          callbacks=[PilothouseCallback(run)], **trainer_args)
    trainer.train()
    assert run.finish()
    with Client(agent_url) as client:
        stored = {b["step"]: b["rows"] for b in client.rollouts(run.id, last=steps)}
    return stored, seen


def test_conversational_prompts_and_completions_are_stored_as_messages(agent_proc, tmp_path, monkeypatch):
    from support.trl_chat import chat_policy

    model, tokenizer = chat_policy()
    other = [{"role": "system", "content": "answer with letters"}, {"role": "user", "content": "say xyz"}]
    stored, seen = train(agent_proc.url, tmp_path, monkeypatch, "chat", steps=2, max_length=6,
                         prompts=[ASK, ASK, other, other] * 2, model=model, processing_class=tokenizer)
    assert sorted(stored) == [1, 2] and len(seen) == 2  # a generation per step, each stored at its step
    for step, (prompts, completions) in zip((1, 2), seen):
        rows = stored[step]
        assert same([r["prompt"] for r in rows], prompts) and same([r["completion"] for r in rows], completions)
        for row in rows:
            assert [m["role"] for m in row["prompt"]] == ["system", "user"]
            assert [m["role"] for m in row["completion"]] == ["assistant"]
            assert isinstance(row["completion"][0]["content"], str)
            assert row["reward"] == row["rewards/letters"] == row["completion"][0]["content"].count("a")
        assert rows[0]["prompt"] in (ASK, other) and rows[1]["prompt"] == rows[0]["prompt"]  # one GRPO group


def test_a_tool_calling_completion_is_stored_whole(agent_proc, tmp_path, monkeypatch):
    from support.trl_chat import calling_rollout, chat_policy, get_weather
    from trl.chat_template_utils import qwen3_chat_template

    model, tokenizer = chat_policy(qwen3_chat_template)
    arguments = {"city": "paris"}
    stored, seen = train(agent_proc.url, tmp_path, monkeypatch, "tools", steps=1, max_length=200,
                         prompts=[[{"role": "user", "content": "weather in paris?"}]] * 2, model=model,
                         processing_class=tokenizer, tools=[get_weather],
                         rollout_func=calling_rollout(tokenizer, arguments))
    (prompts, completions), = seen  # room for the call, its result and more: TRL keeps the result
    rows = stored[1]
    assert same([r["prompt"] for r in rows], prompts) and same([r["completion"] for r in rows], completions)
    for row in rows:
        call, result, *after = row["completion"]
        assert call["role"] == "assistant"
        assert call["tool_calls"] == [{"type": "function", "function": {"name": "get_weather", "arguments": arguments}}]
        assert result == {"role": "tool", "name": "get_weather", "content": "sunny and warm in paris"}
        assert [m["role"] for m in after] in ([], ["assistant"])  # what the model said after the result, if any
        assert math.isclose(row["reward"], float(row["completion"][-1]["content"].count("a")))


def test_what_trl_keeps_is_made_plain_and_a_chat_the_row_cannot_hold_is_kept_as_text(agent_proc):
    """The shapes TRL's buffers may hold besides lists of dicts (numpy arrays and scalars, an image
    part with its pixels, tool arguments nested deeper than a row may hold), in a trainer's ``_logs``
    as GRPOTrainer keeps them, logged to a real agent."""
    import numpy as np
    import torch

    import pilothouse as ph
    from pilothouse.hf.rollouts import GRPORollouts
    from pilothouse.wire.chat import MAX_JSON_DEPTH

    deep: dict = {"x": 1}
    for _ in range(MAX_JSON_DEPTH + 1):
        deep = {"x": deep}
    prompt = np.array([{"role": np.str_("user"), "content": [{"type": "image", "image": np.zeros((2, 2, 3))},
                                                              {"type": "text", "text": np.str_("what is this?")}]}])
    calls = [{"role": "assistant", "content": None, "tool_calls": [
        {"type": "function", "function": {"name": "look", "arguments": {"zoom": np.int64(3), "deep": deep}}}]}]
    said = [{"role": "assistant", "content": "a cat", "score": np.float64(0.5)}]
    trainer = type("Trainer", (), {})()
    trainer._logs = {"prompt": [prompt, prompt], "completion": [said, calls], "rewards": {"r": [1.0, 0.0]},
                     "advantages": torch.tensor([0.5, -0.5]).tolist()}
    trainer.reward_func_names, trainer.reward_weights = ["r"], torch.tensor([1.0])
    run = ph.init("trl", name="shapes", agent=agent_proc.url, tunable={})
    assert GRPORollouts(trainer).log_new(run, 1) == 2
    assert run.finish()
    with Client(agent_proc.url) as client:
        (batch,) = client.rollouts(run.id)
    plain_prompt = [{"role": "user", "content": [{"type": "image"}, {"type": "text", "text": "what is this?"}]}]
    assert batch["rows"][0]["prompt"] == plain_prompt and batch["rows"][1]["prompt"] == plain_prompt
    assert batch["rows"][0]["completion"] == [{"role": "assistant", "content": "a cat", "score": 0.5}]
    # too deep for a row: the chat as text, the call with it
    assert batch["rows"][1]["completion"] == f'assistant:  → look({json.dumps({"deep": deep, "zoom": 3})})'

    assert [r["advantage"] for r in batch["rows"]] == [0.5, -0.5]
