"""GRPO on Ray, steerable from the app: a driver, rollout actors, a learner actor (the demo's toy task).

    pip install -e '.[ray,torch]'                # what it needs: ray, torch
    python examples/ray_grpo.py [--address auto] [--workers 2] [--steps 900] [--pace 0.2]

``pilothouse.ray.start_agents()`` puts an agent on every node; each actor's ``ph.init()`` finds the
one on its node by itself and logs there as a rank of the same run.  The driver holds rank 0: it
steps the job, so a pause holds every worker at one step, and a change or a checkpoint reaches
every actor before the step's work starts.  "applied" reports the actors' own values.  By default it
runs three minutes or more (900 steps of at least 0.2 s), time to steer it; ``--steps 0`` runs
until stopped, ``--pace 0`` at full speed.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import ray
import torch
from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

import pilothouse as ph
import pilothouse.ray as ph_ray
from pilothouse.demo.grpo import (
    Policy,
    completion_mask,
    decode,
    encode,
    reward,
    sample,
    step_prompts,
    token_logprobs,
)

GROUP = 8


@ray.remote(num_cpus=0)
class RolloutWorker:
    """Samples completions with the learner's latest weights, at its own temperature."""

    def __init__(self, run_id: str, token: str, rank: int, temperature: float):
        torch.set_num_threads(1)
        self.policy = Policy()
        self.temperature = temperature
        # this node's agent; the run's token proves to it that this actor is of the driver's job
        self.run = ph.init(project="examples", name="ray-grpo", id=run_id, rank=rank, token=token)

    def set_temperature(self, value: float) -> float:
        self.temperature = float(value)
        return self.temperature

    def generate(self, step: int, weights: dict, texts: list[str]) -> tuple[torch.Tensor, torch.Tensor, list[float]]:
        self.policy.load_state_dict(weights)
        prompts = torch.tensor([encode(t) for t in texts]).repeat_interleave(GROUP, dim=0)
        completions = sample(self.policy, prompts, self.temperature)
        answers = [decode(row) for row in completions.tolist()]
        rewards = [reward(texts[i // GROUP], a) for i, a in enumerate(answers)]
        self.run.log({"worker/temperature": self.temperature, "worker/reward": sum(rewards) / len(rewards)}, step=step)
        self.run.log_rollouts(step, [{"prompt": texts[i], "completion": answers[i * GROUP],
                                      "reward": rewards[i * GROUP]} for i in range(len(texts))])
        return prompts, completions, rewards

    def node(self) -> str:
        return ray.get_runtime_context().get_node_id()

    def finish(self) -> None:
        self.run.finish()


@ray.remote(num_cpus=0)
class Learner:
    """Owns the policy, its frozen reference and the optimizer."""

    def __init__(self, run_id: str, token: str, rank: int, lr: float, kl_coef: float):
        torch.set_num_threads(1)
        torch.manual_seed(0)
        self.policy = Policy()
        self.reference = Policy()
        self.reference.load_state_dict(self.policy.state_dict())
        self.optimizer = torch.optim.Adam(self.policy.parameters(), lr=lr)
        self.kl_coef = kl_coef
        self.run = ph.init(project="examples", name="ray-grpo", id=run_id, rank=rank, token=token)

    def weights(self) -> dict:
        return {k: v.detach().clone() for k, v in self.policy.state_dict().items()}

    def set_lr(self, value: float) -> float:
        for group in self.optimizer.param_groups:
            group["lr"] = float(value)
        return self.optimizer.param_groups[0]["lr"]

    def update(self, step: int, batches: list, temperature: float) -> dict[str, float]:
        prompts = torch.cat([b[0] for b in batches])
        completions = torch.cat([b[1] for b in batches])
        rewards = torch.tensor([r for b in batches for r in b[2]])
        mask = completion_mask(completions)
        grouped = rewards.view(-1, GROUP)
        advantages = ((grouped - grouped.mean(1, keepdim=True)) / (grouped.std(1, keepdim=True) + 1e-4)).view(-1, 1)
        logprobs = token_logprobs(self.policy, prompts, completions, temperature)
        with torch.no_grad():
            ref = token_logprobs(self.reference, prompts, completions, temperature)
        chosen = logprobs.gather(2, completions.unsqueeze(2)).squeeze(2)
        ref_chosen = ref.gather(2, completions.unsqueeze(2)).squeeze(2)
        kl = torch.exp(ref_chosen - chosen) - (ref_chosen - chosen) - 1
        tokens = mask.sum()
        loss = ((-advantages * chosen + self.kl_coef * kl) * mask).sum() / tokens
        self.optimizer.zero_grad(set_to_none=True)
        loss.backward()
        self.optimizer.step()
        lr = self.optimizer.param_groups[0]["lr"]
        self.run.log({"learner/lr": lr}, step=step)
        return {"reward/mean": rewards.mean().item(), "kl": ((kl * mask).sum() / tokens).item(),
                "loss": loss.item(), "response/length": tokens.item() / len(rewards), "lr": lr}

    def save(self, step: int, directory: str) -> str:
        path = Path(directory) / f"step-{step}.pt"
        path.parent.mkdir(parents=True, exist_ok=True)
        torch.save({"step": step, "policy": self.policy.state_dict(), "optimizer": self.optimizer.state_dict()}, path)
        return str(path)

    def finish(self) -> None:
        self.run.finish()


def spread(i: int, nodes: list[str]) -> NodeAffinitySchedulingStrategy:
    """Worker i on node i (round robin), so the job really spans the cluster."""
    return NodeAffinitySchedulingStrategy(nodes[i % len(nodes)], soft=False)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--address", default=None, help="Ray cluster address (default: start a local one)")
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--steps", type=int, default=900, help="0: until stopped")
    p.add_argument("--pace", type=float, default=0.2, help="each step takes at least this many seconds")
    p.add_argument("--agent-port", type=int, default=ph_ray.DEFAULT_PORT,
                   help="each node's agent port (0: a free one per node, for several nodes on one machine)")
    p.add_argument("--agent-data", default=None, help="each node's agent data dir ({node}: the node id)")
    p.add_argument("--checkpoint-dir", default="checkpoints")
    args = p.parse_args()

    ray.init(address=args.address)
    agents = ph_ray.start_agents(port=args.agent_port, data_dir=args.agent_data)
    nodes = sorted(agents)
    config = {"lr": 3e-3, "kl_coef": 0.05, "temperature": 1.0, "workers": args.workers}
    run = ph.init(project="examples", name="ray-grpo", config=config,  # rank 0, on the driver's node agent
                  tunable={"lr": {"above": 0.0, "max": 1.0}, "temperature": {"min": 0.05, "max": 5.0}})
    learner = Learner.options(scheduling_strategy=spread(0, nodes)).remote(run.id, run.token, 1, config["lr"],
                                                                           config["kl_coef"])
    workers = [RolloutWorker.options(scheduling_strategy=spread(i + 1, nodes)).remote(run.id, run.token, i + 2, 1.0)
               for i in range(args.workers)]
    print(json.dumps({"run": run.id, "agents": agents, "here": ph_ray.agent_here(),
                      "workers": ray.get([w.node.remote() for w in workers])}), flush=True)

    def change(values: dict) -> dict:
        """At a step boundary, before any actor works on the step: the actors' own values back."""
        now = {}
        if "lr" in values:
            now["lr"] = ray.get(learner.set_lr.remote(values["lr"]))
        if "temperature" in values:
            used = set(ray.get([w.set_temperature.remote(values["temperature"]) for w in workers]))
            if len(used) != 1:
                raise ph.Refused(f"the workers disagree on the temperature: {sorted(used)}")
            now["temperature"] = used.pop()
        return now

    run.on_change(change)
    run.on_checkpoint(lambda step: ray.get(learner.save.remote(step, str(Path(args.checkpoint_dir) / run.id))))

    due = time.monotonic()
    step = 0
    while not args.steps or step < args.steps:
        if run.sync(step).stop:
            break
        time.sleep(max(0.0, due - time.monotonic()))
        due = time.monotonic() + args.pace
        weights = ray.put(ray.get(learner.weights.remote()))
        texts = step_prompts(step)
        share = len(texts) // len(workers)
        batches = ray.get([w.generate.remote(step, weights, texts[i * share:(i + 1) * share])
                           for i, w in enumerate(workers)])
        run.log(ray.get(learner.update.remote(step, batches, run.config["temperature"])), step=step)
        step += 1
    ray.get([a.finish.remote() for a in [learner, *workers]])
    run.finish()


if __name__ == "__main__":
    main()
