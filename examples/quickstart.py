"""Three lines of Pilothouse in a training loop (a toy reward curve, no GPU needed).

    pip install -e .                       # nothing else needed
    python examples/quickstart.py          # starts the local agent if none is running
    pilothouse runs                        # the run, its status and last values
    pilothouse tail quickstart             # live metrics while it runs
    pilothouse pause quickstart            # steer it: pause, resume, set kl_coef=0.1, checkpoint, stop

It runs about four minutes (1200 steps at 0.2 s each), time to try every command from a second
terminal; ``--steps 0`` runs until you stop it, ``--pace 0`` at full speed.  Run it again and the
name ``quickstart`` means the new, live run.
"""

from __future__ import annotations

import argparse
import math
import random
import time

import pilothouse as ph


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=1200, help="steps to run (0: until stopped)")
    parser.add_argument("--pace", "--delay", type=float, default=0.2, help="seconds per step (0: full speed)")
    parser.add_argument("--agent", default=None, help="agent URL (default: local agent, started if absent)")
    args = parser.parse_args()

    run = ph.init(project="quickstart", name="quickstart", config={"lr": 3e-6, "kl_coef": 0.05},
                     agent=args.agent)
    print(f"run {run.id}: watch it with `pilothouse tail {run.id}`", flush=True)
    step = 0
    while not args.steps or step < args.steps:
        ctl = run.sync(step)  # pause blocks here; set/checkpoint/stop arrive here
        if ctl.checkpoint:
            run.checkpoint_saved(f"(the toy loop keeps no weights) step {step}", step)
        if ctl.stop:
            break
        reward = 1 - math.exp(-step / 300) + random.gauss(0, 0.05)
        run.log({"reward/mean": reward, "reward/std": 0.2 * math.exp(-step / 500),
                 "kl": run.config["kl_coef"] * step ** 0.5 / 25, "lr": run.config["lr"],
                 "loss": -reward + random.gauss(0, 0.02)}, step=step)
        if step % 25 == 0:
            run.log_rollouts(step, [{"prompt": "12+30=", "completion": str(42 if reward > 0.5 else 41),
                                     "reward": float(reward > 0.5)}])
        time.sleep(args.pace)
        step += 1
    delivered = run.finish()
    print(f"finished {run.id}: {run.stats['records']} records, delivered={delivered}; "
          f"now try `pilothouse runs` and `pilothouse export {run.id}`")


if __name__ == "__main__":
    main()
