"""A plain PyTorch loop with Pilothouse: metrics, live lr, pause, checkpoints, stop.

    pip install -e '.[torch]'                    # what it needs: torch
    python examples/pytorch_loop.py [--steps 1200] [--pace 0.2] [--agent URL]
    pilothouse set pytorch-loop lr=0.01     # the optimizer follows at the next step

About four minutes by default (0.2 s a step), time to steer it; ``--steps 0`` runs until stopped,
``--pace 0`` at full speed.
"""

from __future__ import annotations

import argparse
import time

import torch

import pilothouse as ph


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=1200, help="steps to run (0: until stopped)")
    parser.add_argument("--pace", type=float, default=0.2, help="each step takes at least this many seconds")
    parser.add_argument("--agent", default=None, help="agent URL (default: the local agent, started if absent)")
    parser.add_argument("--checkpoint-dir", default="checkpoints")
    args = parser.parse_args()

    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(8, 32), torch.nn.Tanh(), torch.nn.Linear(32, 1))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    run = ph.init(project="examples", name="pytorch-loop", config={"lr": 0.05, "momentum": 0.9},
                     agent=args.agent)
    ph.torch.bind_optimizer(run, optimizer)  # lr and momentum follow run.config
    ph.torch.bind_checkpoints(run, model, optimizer, directory=args.checkpoint_dir)  # saved on request, paused too
    print(run.id, flush=True)
    target = torch.randn(8, 1)
    step = 0
    while not args.steps or step < args.steps:
        if run.sync(step).stop:
            break
        started = time.perf_counter()
        x = torch.randn(64, 8)
        loss = torch.nn.functional.mse_loss(model(x), x @ target)
        optimizer.zero_grad()
        loss.backward()
        grad_norm = torch.nn.utils.clip_grad_norm_(model.parameters(), 10.0)
        optimizer.step()
        run.log({"loss": loss.item(), "grad_norm": grad_norm.item(), "lr": optimizer.param_groups[0]["lr"],
                 "step_time": time.perf_counter() - started}, step=step)
        time.sleep(max(0.0, args.pace - (time.perf_counter() - started)))
        step += 1
    run.finish()


if __name__ == "__main__":
    main()
