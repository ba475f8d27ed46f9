"""Multi-rank: every rank calls ph.init and run.sync; all ranks pause, change lr and stop together.

    pip install -e '.[torch]'                    # what it needs: torch (torchrun comes with it)
    torchrun --nproc_per_node 2 examples/torchrun_ddp.py [--steps 1200] [--pace 0.2] [--agent URL]
    pilothouse pause ddp      # every rank holds at the same step

About four minutes by default (0.2 s a step), time to steer it; ``--steps 0`` runs until stopped,
``--pace 0`` at full speed.
"""

from __future__ import annotations

import argparse
import time

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel

import pilothouse as ph


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=1200, help="steps to run (0: until stopped)")
    parser.add_argument("--pace", type=float, default=0.2, help="each step takes at least this many seconds")
    parser.add_argument("--agent", default=None)
    args = parser.parse_args()

    dist.init_process_group("gloo")
    torch.manual_seed(dist.get_rank())
    run = ph.init(project="examples", name="ddp", config={"lr": 0.05}, agent=args.agent)  # on every rank
    model = DistributedDataParallel(torch.nn.Linear(16, 1))
    optimizer = torch.optim.SGD(model.parameters(), lr=run.config["lr"])
    ph.torch.bind_optimizer(run, optimizer)
    if run.rank == 0:
        print(run.id, flush=True)
    step = 0
    while not args.steps or step < args.steps:
        if run.sync(step).stop:  # one tiny broadcast: the same decision on every rank
            break
        started = time.perf_counter()
        x = torch.randn(32, 16)
        loss = model(x).pow(2).mean()
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        run.log({"loss": loss.item(), "lr": optimizer.param_groups[0]["lr"]}, step=step)
        time.sleep(max(0.0, args.pace - (time.perf_counter() - started)))  # same on every rank: none waits long
        step += 1
    run.finish()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
