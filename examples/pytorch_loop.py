"""A plain PyTorch loop with Pilothouse: metrics, live lr, pause, checkpoints, stop.

    pip install -e '.[torch]'                    # what it needs: torch
    python examples/pytorch_loop.py [--steps 500] [--agent URL]
    pilothouse set pytorch-loop lr=0.01     # the optimizer follows at the next step
"""

from __future__ import annotations

import argparse
import time

import torch

import pilothouse as ph


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=500)
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
    for step in range(args.steps):
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
    run.finish()


if __name__ == "__main__":
    main()
