"""TRL's GRPOTrainer steered by Pilothouse, on a CPU and offline: a tiny Llama built from a config
and a character tokenizer built in code, so nothing is downloaded.

    pip install -e '.[trl,torch]'                # what it needs: trl, transformers, datasets, torch
    python examples/trl_grpo.py [--steps 900] [--pace 0.2] [--agent URL]
    pilothouse set trl-grpo temperature=0.7 reward_weights/brevity=0.5    # the next generation uses them
    pilothouse pause trl-grpo && pilothouse checkpoint trl-grpo            # saved at the paused step
    pilothouse rollouts trl-grpo                                           # every step's completions

About three minutes by default (0.2 s a step), time to steer it; ``--steps 0`` runs until stopped,
``--pace 0`` at full speed.

One line adds Pilothouse, with no run of your own: ``trainer.add_callback(PilothouseCallback())``
(project $PILOTHOUSE_PROJECT, name from ``run_name``; the agent from $PILOTHOUSE_AGENT or local).
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time
from typing import Any

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import torch  # noqa: E402
from datasets import Dataset  # noqa: E402
from tokenizers import Tokenizer, decoders, models, pre_tokenizers  # noqa: E402
from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast, TrainerCallback  # noqa: E402
from trl import GRPOConfig, GRPOTrainer  # noqa: E402

from pilothouse.hf import PilothouseCallback  # noqa: E402

LETTERS = "abcdefghijklmnopqrstuvwxyz "


def tiny_policy() -> tuple[LlamaForCausalLM, PreTrainedTokenizerFast]:
    vocab = {"<pad>": 0, "<eos>": 1, **{c: i + 2 for i, c in enumerate(LETTERS)}}
    tok = Tokenizer(models.WordLevel(vocab, unk_token="<pad>"))
    tok.pre_tokenizer = pre_tokenizers.Split("", "isolated")
    tok.decoder = decoders.Fuse()
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=tok, pad_token="<pad>", eos_token="<eos>")
    config = LlamaConfig(vocab_size=len(vocab), hidden_size=16, intermediate_size=32, num_hidden_layers=1,
                         num_attention_heads=2, num_key_value_heads=2, max_position_embeddings=64,
                         pad_token_id=0, eos_token_id=1, bos_token_id=1)
    return LlamaForCausalLM(config), tokenizer


def letter_a(completions: list[str], **_: Any) -> list[float]:
    """The task: say 'a' often."""
    return [float(c.count("a")) for c in completions]


def brevity(completions: list[str], **_: Any) -> list[float]:
    return [-len(c) / 10 for c in completions]


def make_trainer(steps: int, output_dir: str, callbacks: list | None = None, **settings: Any) -> GRPOTrainer:
    torch.manual_seed(0)
    model, tokenizer = tiny_policy()
    policy = os.path.join(output_dir, "policy")  # a folder, so TRL can load a reference model (beta > 0) from it
    model.save_pretrained(policy)
    tokenizer.save_pretrained(policy)
    prompts = Dataset.from_dict({"prompt": ["abc", "hello", "xyz", "cat"] * 16})
    args = GRPOConfig(**{"output_dir": output_dir, "run_name": "trl-grpo", "max_steps": steps,
                         "per_device_train_batch_size": 4, "num_generations": 4, "max_completion_length": 8,
                         "learning_rate": 1e-3, "logging_steps": 1, "save_strategy": "no", "report_to": [],
                         "use_cpu": True, "disable_tqdm": True, **settings})
    return GRPOTrainer(model=policy, reward_funcs=[letter_a, brevity], args=args, train_dataset=prompts,
                       processing_class=tokenizer, callbacks=callbacks)


UNTIL_STOPPED = 10**9  # --steps 0: max_steps the trainer never reaches (its LR schedule stays flat)


class Pace(TrainerCallback):
    """Each step takes at least ``seconds``: a tiny model on a CPU trains in seconds, too fast to steer."""

    def __init__(self, seconds: float):
        self.seconds, self.last = seconds, time.monotonic()

    def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        time.sleep(max(0.0, self.seconds - (time.monotonic() - self.last)))
        self.last = time.monotonic()


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=900, help="steps to run (0: until stopped)")
    parser.add_argument("--pace", type=float, default=0.2, help="each step takes at least this many seconds")
    parser.add_argument("--agent", default=None)
    args = parser.parse_args()
    if args.agent:
        os.environ["PILOTHOUSE_AGENT"] = args.agent
    trainer = make_trainer(args.steps or UNTIL_STOPPED, tempfile.mkdtemp(prefix="trl-grpo-"))
    trainer.add_callback(PilothouseCallback(project="examples"))
    trainer.add_callback(Pace(args.pace))
    trainer.train()


if __name__ == "__main__":
    main()
