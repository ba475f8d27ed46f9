"""PilothouseCallback in a real transformers.Trainer (a tiny GPT-2 built from a config, on CPU),
steered through the real agent while it trains."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from packaging.version import Version
from support.processes import finish, start_trainer
from support.waiting import wait_until

transformers = pytest.importorskip("transformers")

MAX_STEPS = 300
# Before 4.51 the Trainer logged the lr of the step after the logged one (huggingface/transformers#36973).
LOGGED_LR_STEP_AHEAD = Version(transformers.__version__) < Version("4.51")

TRAINER = """
import os
os.environ["HF_HUB_OFFLINE"] = "1"
import json
import torch
from transformers import GPT2Config, GPT2LMHeadModel, Trainer, TrainerCallback, TrainingArguments
from pilothouse.hf import PilothouseCallback

torch.manual_seed(0)
run = ph.init("hf", name="tiny-gpt2", config={"learning_rate": 1e-3, "weight_decay": 0.01}, agent=URL,
                 heartbeat=0.2)
model = GPT2LMHeadModel(GPT2Config(n_layer=1, n_head=2, n_embd=32, vocab_size=64, n_positions=16,
                                   bos_token_id=0, eos_token_id=0))
data = [{"input_ids": ids, "labels": ids} for ids in torch.randint(0, 64, (64, 16))]


class Pace(TrainerCallback):
    def on_train_begin(self, args, state, control, **kw):
        print("training", run.id, flush=True)

    def on_step_end(self, args, state, control, **kw):
        time.sleep(0.02)  # time for the test to steer between steps


args = TrainingArguments(output_dir=ARGS[0], max_steps=int(ARGS[1]), per_device_train_batch_size=4,
                         learning_rate=1e-3, weight_decay=0.01, lr_scheduler_type="linear", logging_steps=1,
                         save_strategy="no", report_to=[], use_cpu=True, disable_tqdm=True)
trainer = Trainer(model=model, args=args, train_dataset=data, callbacks=[Pace, PilothouseCallback(run)])
trainer.train()
groups = trainer.optimizer.param_groups
print(json.dumps({"global_step": trainer.state.global_step, "lr": [g["lr"] for g in groups],
                  "weight_decay": [g["weight_decay"] for g in groups],
                  "base_lrs": trainer.lr_scheduler.base_lrs}), flush=True)
assert run.finish()
"""


def linear(step: int) -> float:
    """The factor of HF's linear schedule (no warmup) for the optimizer step that ends at ``step``."""
    return (MAX_STEPS - (step - 1)) / MAX_STEPS


def test_trainer_follows_set_checkpoint_and_stop(agent_proc, tmp_path):
    out_dir = tmp_path / "out"
    trainer = start_trainer(tmp_path, TRAINER, agent_proc.url, str(out_dir), str(MAX_STEPS))
    line = trainer.stdout.readline()
    assert line.startswith("training "), line + trainer.stderr.read()
    run_id = line.split()[1]
    with agent_proc.client() as c:
        ack = c.command(run_id, "pause", wait=20)
        assert ack["state"] == "applied", ack
        changed = c.command(run_id, "set", {"learning_rate": 2e-3, "weight_decay": 0.05}, wait=10)
        assert changed["state"] == "applied" and changed["step"] == ack["step"], changed
        at = changed["step"]  # global_step at the change: steps > at use the new base
        assert changed["applied"]["learning_rate"] == pytest.approx(2e-3 * linear(at + 1), rel=1e-9)
        assert c.command(run_id, "resume", wait=10)["state"] == "applied"
        saved = c.command(run_id, "checkpoint", wait=20)
        assert saved["state"] == "applied", saved
        folder = Path(saved["applied"]["path"])
        assert folder == out_dir / f"checkpoint-{saved['step']}" and saved["step"] > at
        wait_until(lambda: (folder / "trainer_state.json").exists(), what="the checkpoint folder")
        stopped = c.command(run_id, "stop", wait=20)
        assert stopped["state"] == "applied", stopped
        result = json.loads(finish(trainer).splitlines()[-1])
        steps, lrs, _ = c.series(run_id, "learning_rate")
    assert result["global_step"] == stopped["step"] < MAX_STEPS
    assert result["base_lrs"] == [2e-3, 2e-3]
    assert result["weight_decay"] == [0.05, 0.0]  # HF's no-decay group (biases, LayerNorm) keeps 0
    assert result["lr"][0] == pytest.approx(2e-3 * linear(result["global_step"] + 1), rel=1e-9)
    logged = dict(zip(steps.tolist(), lrs.tolist()))
    assert set(logged) == set(range(1, result["global_step"] + 1))
    for step, lr in logged.items():  # the logged learning_rate changed at once and stayed changed
        used_in = step + LOGGED_LR_STEP_AHEAD
        assert lr == pytest.approx((2e-3 if used_in > at else 1e-3) * linear(used_in), rel=1e-9), step
    assert json.loads((folder / "trainer_state.json").read_text())["global_step"] == saved["step"]
