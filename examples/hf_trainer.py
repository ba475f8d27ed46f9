"""A Hugging Face Trainer steered by Pilothouse with a run of your own, on a CPU.

A tiny GPT-2 built from a config and random tokens, so nothing is downloaded.  Tunable live:
learning_rate (the optimizer's groups and the LR schedule's base), weight_decay, max_grad_norm;
the rest of the training arguments is shown, not tunable.  For TRL's GRPOTrainer, and for the
callback with no run of your own (``PilothouseCallback()``), see examples/trl_grpo.py.

    pip install -e '.[hf,torch]'                 # what it needs: transformers, accelerate, torch
    python examples/hf_trainer.py [--steps 1000] [--pace 0.2] [--agent URL]
    pilothouse set hf-trainer learning_rate=1e-4 max_grad_norm=0.5
    pilothouse pause hf-trainer && pilothouse checkpoint hf-trainer   # checkpoint-N at the paused step

About three and a half minutes by default (0.2 s a step), time to steer it; ``--steps 0`` runs until
stopped, ``--pace 0`` at full speed.
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time
from typing import Any

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import torch  # noqa: E402
from transformers import GPT2Config, GPT2LMHeadModel, Trainer, TrainerCallback, TrainingArguments  # noqa: E402

import pilothouse as ph  # noqa: E402
from pilothouse.hf import PilothouseCallback  # noqa: E402

UNTIL_STOPPED = 10**9  # --steps 0: max_steps the Trainer never reaches (its LR schedule stays flat)


class Pace(TrainerCallback):
    """Each step takes at least ``seconds``: a tiny model on a CPU trains in seconds, too fast to steer."""

    def __init__(self, seconds: float):
        self.seconds, self.last = seconds, time.monotonic()

    def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        time.sleep(max(0.0, self.seconds - (time.monotonic() - self.last)))
        self.last = time.monotonic()


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=1000, help="steps to run (0: until stopped)")
    parser.add_argument("--pace", type=float, default=0.2, help="each step takes at least this many seconds")
    parser.add_argument("--agent", default=None)
    args = parser.parse_args()

    torch.manual_seed(0)
    run = ph.init(project="examples", name="hf-trainer", config={"learning_rate": 5e-4, "weight_decay": 0.01},
                     agent=args.agent)
    print(run.id, flush=True)
    model = GPT2LMHeadModel(GPT2Config(n_layer=2, n_head=2, n_embd=64, vocab_size=128, n_positions=32))
    data = [{"input_ids": ids, "labels": ids} for ids in torch.randint(0, 128, (256, 32))]
    training = TrainingArguments(output_dir=tempfile.mkdtemp(prefix="hf-example-"),
                                 max_steps=args.steps or UNTIL_STOPPED, per_device_train_batch_size=8,
                                 learning_rate=run.config["learning_rate"], weight_decay=run.config["weight_decay"],
                                 logging_steps=5, save_strategy="no", report_to=[], use_cpu=True, disable_tqdm=True)
    callbacks = [PilothouseCallback(run), Pace(args.pace)]
    Trainer(model=model, args=training, train_dataset=data, callbacks=callbacks).train()
    run.finish()


if __name__ == "__main__":
    main()
