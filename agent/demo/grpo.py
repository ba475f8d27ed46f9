"""A real, small GRPO run to watch and steer: a character-level GRU learns to reverse digits.

It trains from scratch on a CPU in well under a minute, so the reward visibly rises, and
every steerable knob (lr, kl_coef, temperature) changes what the curves do.

    python -m pilothouse.demo.grpo --agent tcp://127.0.0.1:7766 --name a [--steps 2000] [--pace 0.2]
"""

from __future__ import annotations

import argparse
import itertools
import time
from pathlib import Path

import torch
from torch import nn

import pilothouse as ph

DIGITS = "0123456789"
SEP, EOS = "=", "."
VOCAB = DIGITS + SEP + EOS
PROMPT_DIGITS = 3
MAX_NEW = PROMPT_DIGITS + 2  # room to overshoot, so stopping at the right length is learned too
PROMPTS_PER_STEP = 16
# The rules the agent watches for each demo run (shown in the Alerts tab and `pilothouse alerts ls`),
# sized from what the demo does (both demo runs for 5000 steps, and lr steered to 1e-2..1e-1): the
# KL sits near 2 (p99 under 5) with single-step spikes to 8-16, so a spike is one step past 8, and
# only a steered lr (with kl_coef near 0) takes a step past 50 (to 160-190), worth a pause. The
# reward's first noisy steps fall up to 43 % below their best, a collapse after a too-high lr 78-100 %.
ALERTS = (
    {"name": "kl-spike", "kind": "above", "metric": "kl", "threshold": 8.0},
    {"name": "kl-blowup", "kind": "above", "metric": "kl", "threshold": 50.0, "pause": True},
    {"name": "reward-collapse", "kind": "drop", "metric": "reward/mean", "pct": 60.0, "window": 100},
    {"name": "nonfinite", "kind": "nonfinite", "metric": "*", "pause": True},  # a NaN loss or reward: stop there
)


class Policy(nn.Module):
    """Embedding -> 1-layer GRU -> next-character logits (about 17k parameters)."""

    def __init__(self, hidden: int = 64, embed: int = 16):
        super().__init__()
        self.embed = nn.Embedding(len(VOCAB), embed)
        self.gru = nn.GRU(embed, hidden, batch_first=True)
        self.head = nn.Linear(hidden, len(VOCAB))

    def forward(self, tokens: torch.Tensor, state: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        out, state = self.gru(self.embed(tokens), state)
        return self.head(out), state


def encode(text: str) -> list[int]:
    return [VOCAB.index(c) for c in text]


def decode(tokens: list[int]) -> str:
    """Characters up to and including the first EOS."""
    text = "".join(VOCAB[t] for t in tokens)
    return text[:text.index(EOS) + 1] if EOS in text else text


def step_prompts(step: int) -> list[str]:
    """The same prompts at the same step in every run (a generator seeded by the step alone), so
    two runs' completions can be compared prompt by prompt."""
    gen = torch.Generator().manual_seed(step)
    digits = torch.randint(10, (PROMPTS_PER_STEP, PROMPT_DIGITS), generator=gen).tolist()
    return ["".join(DIGITS[d] for d in row) + SEP for row in digits]


def reward(prompt: str, completion: str) -> float:
    """Verifiable and dense: the share of positions right, over the longer of answer and target,
    so each correct digit earns credit and a missing or extra character costs some."""
    target = prompt[:PROMPT_DIGITS][::-1] + EOS
    right = sum(a == b for a, b in zip(completion, target))
    return right / max(len(completion), len(target))


@torch.no_grad()
def sample(policy: Policy, prompts: torch.Tensor, temperature: float) -> torch.Tensor:
    """Completions of MAX_NEW tokens for each prompt row (what follows an EOS is masked later)."""
    logits, state = policy(prompts)
    tokens = []
    for _ in range(MAX_NEW):
        probs = torch.softmax(logits[:, -1] / temperature, dim=-1)
        token = torch.multinomial(probs, 1)
        tokens.append(token)
        logits, state = policy(token, state)
    return torch.cat(tokens, dim=1)


def completion_mask(completions: torch.Tensor) -> torch.Tensor:
    """1 for tokens up to and including the first EOS, 0 after it."""
    eos = (completions == VOCAB.index(EOS)).int()
    after = (eos.cumsum(dim=1) - eos) > 0
    return (~after).float()


def token_logprobs(policy: nn.Module, prompts: torch.Tensor, completions: torch.Tensor,
                   temperature: float) -> torch.Tensor:
    """Log-probabilities (batch, MAX_NEW, vocab) of the distributions the completions were sampled from."""
    seq = torch.cat([prompts, completions], dim=1)
    logits, _ = policy(seq[:, :-1])
    return torch.log_softmax(logits[:, prompts.shape[1] - 1:] / temperature, dim=-1)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--agent", required=True, help="the agent's URL, e.g. tcp://127.0.0.1:7766")
    p.add_argument("--name", required=True, help="run name")
    p.add_argument("--project", default="grpo-demo")
    p.add_argument("--id", default=None, help="run id (default: a new one)")
    p.add_argument("--steps", type=int, default=2000, help="0: train until stopped")
    p.add_argument("--pace", type=float, default=0.0, help="each step takes at least this many seconds")
    p.add_argument("--lr", type=float, default=3e-3)
    p.add_argument("--kl-coef", type=float, default=0.05)
    p.add_argument("--temperature", type=float, default=1.0)
    p.add_argument("--group", type=int, default=8, help="completions sampled per prompt")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--checkpoint-dir", default="checkpoints", help="checkpoints go to DIR/<run id>/")
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    torch.set_num_threads(1)  # tiny matrices: more threads only add contention
    torch.manual_seed(args.seed)
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    run = ph.init(project=args.project, name=args.name, agent=args.agent, id=args.id,
                     config={"lr": args.lr, "kl_coef": args.kl_coef, "temperature": args.temperature,
                             "group_size": args.group, "seed": args.seed},
                     tunable={"lr": {"above": 0.0, "max": 1.0}, "kl_coef": {"min": 0.0, "max": 10.0},
                              "temperature": {"min": 0.05, "max": 5.0}},
                     alerts=ALERTS)
    print(run.id, flush=True)

    policy = Policy().to(device)
    reference = Policy().to(device)
    reference.load_state_dict(policy.state_dict())
    reference.requires_grad_(False)
    optimizer = torch.optim.Adam(policy.parameters(), lr=args.lr)
    ph.torch.bind_optimizer(run, optimizer)
    ph.torch.bind_checkpoints(run, policy, optimizer, directory=Path(args.checkpoint_dir) / run.id)  # paused too
    group = run.config["group_size"]

    due = time.monotonic()  # when the next step may start, at --pace
    for step in range(args.steps) if args.steps else itertools.count():
        if run.sync(step).stop:
            break
        time.sleep(max(0.0, due - time.monotonic()))
        due = time.monotonic() + args.pace
        started = time.perf_counter()
        temperature, kl_coef = run.config["temperature"], run.config["kl_coef"]

        texts = step_prompts(step)
        prompts = torch.tensor([encode(t) for t in texts], device=device).repeat_interleave(group, dim=0)
        completions = sample(policy, prompts, temperature)
        mask = completion_mask(completions)
        answers = [decode(row) for row in completions.tolist()]
        rewards = torch.tensor([reward(texts[i // group], a) for i, a in enumerate(answers)], device=device)

        # Group-relative advantages: each completion is judged against its siblings for the same prompt.
        grouped = rewards.view(-1, group)
        advantages = ((grouped - grouped.mean(1, keepdim=True)) / (grouped.std(1, keepdim=True) + 1e-4)).view(-1, 1)

        logprobs = token_logprobs(policy, prompts, completions, temperature)
        with torch.no_grad():
            ref_logprobs = token_logprobs(reference, prompts, completions, temperature)
        chosen = logprobs.gather(2, completions.unsqueeze(2)).squeeze(2)
        ref_chosen = ref_logprobs.gather(2, completions.unsqueeze(2)).squeeze(2)
        # k3 estimator of KL(policy || reference): unbiased and never negative.
        kl = torch.exp(ref_chosen - chosen) - (ref_chosen - chosen) - 1
        tokens = mask.sum()
        loss = ((-advantages * chosen + kl_coef * kl) * mask).sum() / tokens

        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()

        with torch.no_grad():
            entropy = (-(logprobs.exp() * logprobs).sum(2) * mask).sum() / tokens
        elapsed = time.perf_counter() - started
        run.log({"reward/mean": rewards.mean().item(), "reward/std": rewards.std().item(),
                 "kl": ((kl * mask).sum() / tokens).item(), "entropy": entropy.item(), "loss": loss.item(),
                 "response/length": tokens.item() / len(answers), "lr": optimizer.param_groups[0]["lr"],
                 "temperature": temperature, "tokens_per_s": tokens.item() / elapsed, "step_time": elapsed},
                step=step)
        if step % 10 == 0:
            # whole GRPO groups of four prompts: the app's group view, and the agent's rollouts/* series
            run.log_rollouts(step, [{"prompt": texts[i], "completion": answers[k], "reward": rewards[k].item(),
                                     "advantage": advantages[k].item()}
                                    for i in range(4) for k in range(i * group, (i + 1) * group)])
    run.finish()


if __name__ == "__main__":
    main()
