"""pilothouse.torch with a real agent, real torch and commands sent through the real client.

The training loop runs on a thread of the test process, so the test can look at the very
optimizer and scheduler that the commands changed.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import torch
from support.runs import run_events as events
from support.waiting import wait_until

import pilothouse as ph
from pilothouse.client import Client
from pilothouse.torch import bind_optimizer, save_checkpoint


class Loop:
    """A small real training loop, on a thread, that calls ``run.sync`` every step until stopped."""

    def __init__(self, run: ph.Run, scheduler: Callable[[torch.optim.Optimizer], Any] | None = None,
                 on_checkpoint: Callable[[Loop, int], None] | None = None, max_steps: int = 3000):
        torch.manual_seed(0)
        self.run = run
        self.model = torch.nn.Linear(4, 1)
        self.optimizer = torch.optim.SGD([{"params": [self.model.weight], "weight_decay": 0.01},
                                          {"params": [self.model.bias], "weight_decay": 0.0}], lr=1.0)
        self.scheduler = scheduler(self.optimizer) if scheduler else None
        self.on_checkpoint = on_checkpoint or (lambda loop, step: None)
        self.max_steps = max_steps
        self.used_lr: dict[int, float] = {}  # step -> the lr its optimizer.step() used
        self.error: Exception | None = None
        self.step = -1
        self.thread = threading.Thread(target=self._train, daemon=True)

    def start(self) -> None:
        self.thread.start()

    def _train(self) -> None:
        try:
            x, y = torch.randn(16, 4), torch.randn(16, 1)
            for step in range(self.max_steps):
                self.step = step
                ctl = self.run.sync(step)
                if ctl.checkpoint:
                    self.on_checkpoint(self, step)
                if ctl.stop:
                    return
                loss = torch.nn.functional.mse_loss(self.model(x), y)
                self.optimizer.zero_grad()
                loss.backward()
                self.used_lr[step] = self.optimizer.param_groups[0]["lr"]
                self.optimizer.step()
                if self.scheduler is not None:
                    self.scheduler.step()
                self.run.log({"loss": loss.item()}, step=step)
                time.sleep(0.005)
        except Exception as exc:  # surfaced by finish()
            self.error = exc

    def finish(self, client: Client) -> None:
        ack = client.command(self.run.id, "stop", wait=10)
        assert ack["state"] == "applied", ack
        self.thread.join(timeout=10)
        assert not self.thread.is_alive() and self.error is None, self.error
        assert self.run.finish()


def start(agent_proc, name: str, config: dict, **loop_args) -> Loop:
    run = ph.init("steer", name=name, config=config, agent=agent_proc.url, heartbeat=0.2)
    with agent_proc.client() as c:  # commands name a run the agent knows
        wait_until(lambda: any(r["id"] == run.id for r in c.runs()), what="the run's hello")
    return Loop(run, **loop_args)


def test_bind_applies_config_keeping_group_ratios_and_follows_set(agent_proc):
    loop = start(agent_proc, "bind", {"lr": 0.1, "momentum": 0.9, "weight_decay": 0.02, "batch": 8})
    groups = loop.optimizer.param_groups
    groups[1]["lr"] = 0.5  # the bias learns at half the rate of the weight
    bind_optimizer(loop.run, loop.optimizer)
    assert [g["lr"] for g in groups] == [0.1, 0.05]
    assert [g["momentum"] for g in groups] == [0.9, 0.9]  # was 0: no ratio to keep
    assert [g["weight_decay"] for g in groups] == [0.02, 0.0]  # the no-decay group stays so
    loop.start()
    with agent_proc.client() as c:
        ack = c.command(loop.run.id, "set", {"lr": 0.02, "weight_decay": 0.04}, wait=10)
        assert ack["state"] == "applied", ack
        assert ack["applied"] == {"lr": 0.02, "weight_decay": 0.04}
        assert [g["lr"] for g in groups] == [0.02, 0.01]
        assert [g["weight_decay"] for g in groups] == [0.04, 0.0]
        assert loop.run.config["lr"] == 0.02
        loop.finish(c)
    assert {lr for s, lr in loop.used_lr.items() if s < ack["step"]} <= {0.1}
    assert {lr for s, lr in loop.used_lr.items() if s >= ack["step"]} == {0.02}


def test_bind_with_explicit_keys_maps_config_names(agent_proc):
    loop = start(agent_proc, "keys", {"learning_rate": 0.3, "wd": 0.5})
    bind_optimizer(loop.run, loop.optimizer, keys={"learning_rate": "lr", "wd": "weight_decay"})
    assert [(g["lr"], g["weight_decay"]) for g in loop.optimizer.param_groups] == [(0.3, 0.5), (0.3, 0.0)]
    with pytest.raises(KeyError, match="nesterov_typo"):
        bind_optimizer(loop.run, loop.optimizer, keys=["nesterov_typo"])
    assert loop.run.finish()


@pytest.mark.parametrize("scheduler, factor", [
    (lambda opt: torch.optim.lr_scheduler.LambdaLR(opt, lambda s: 0.99 ** s), lambda s: 0.99 ** s),
    (lambda opt: torch.optim.lr_scheduler.StepLR(opt, step_size=4, gamma=0.5), lambda s: 0.5 ** (s // 4)),
], ids=["LambdaLR", "StepLR"])
def test_new_lr_survives_the_scheduler_and_the_applied_lr_is_reported(agent_proc, scheduler, factor):
    loop = start(agent_proc, "sched", {"lr": 0.1}, scheduler=scheduler)
    bind_optimizer(loop.run, loop.optimizer, loop.scheduler)
    assert loop.scheduler.base_lrs == [0.1, 0.1]
    loop.start()
    with agent_proc.client() as c:
        ack = c.command(loop.run.id, "set", {"lr": 0.02}, wait=10)
        assert ack["state"] == "applied", ack
        at = ack["step"]  # scheduler.step() ran ``at`` times before the change
        assert ack["applied"]["lr"] == pytest.approx(0.02 * factor(at), rel=1e-12)
        assert f"lr={ack['applied']['lr']:.6g}" in ack["detail"]  # shown short; exact in ``applied``
        while loop.step < at + 12:  # the schedule goes on from the new base, for many steps
            time.sleep(0.01)
        loop.finish(c)
    assert loop.scheduler.base_lrs == [0.02, 0.02]
    assert loop.scheduler.get_last_lr()[0] == pytest.approx(loop.optimizer.param_groups[0]["lr"], rel=1e-12)
    for step, lr in loop.used_lr.items():
        assert lr == pytest.approx((0.02 if step >= at else 0.1) * factor(step), rel=1e-9), step


def test_save_checkpoint_answers_the_request_with_a_loadable_file(agent_proc, tmp_path):
    folder = tmp_path / "ckpt"
    saved: list[Path] = []
    loop = start(agent_proc, "ckpt", {"lr": 0.1},
                 on_checkpoint=lambda lp, step: saved.append(
                     save_checkpoint(lp.run, lp.model, lp.optimizer, step=step, directory=folder,
                                     extra={"note": "asked"})))
    loop.start()
    with agent_proc.client() as c:
        ack = c.command(loop.run.id, "checkpoint", wait=10)
        assert ack["state"] == "applied", ack
        path = folder / f"ckpt-step{ack['step']:08d}.pt"
        assert ack["applied"] == {"path": str(path)} and str(path) in ack["detail"]
        state = torch.load(path, weights_only=True)
        assert state["step"] == ack["step"] and state["config"] == {"lr": 0.1} and state["note"] == "asked"
        assert set(state["model"]) == {"weight", "bias"} and "param_groups" in state["optimizer"]
        assert sorted(p.name for p in folder.iterdir()) == [path.name]  # no temporary file left
        loop.finish(c)
        assert saved == [path]
        checkpoints = wait_until(lambda: events(c, loop.run.id, "checkpoint"), what="the checkpoint event")
        assert [(e["cmd"], e["state"], e["applied"]) for e in checkpoints] == \
            [("checkpoint", "applied", {"path": str(path)})]


def test_a_failed_save_leaves_the_previous_file_whole_and_no_partial_one(agent_proc, tmp_path):
    run = start(agent_proc, "atomic", {"lr": 0.1}).run
    folder = tmp_path / "ckpt"
    path = save_checkpoint(run, torch.nn.Linear(64, 64), step=7, directory=folder)
    assert path == folder / "ckpt-step00000007.pt"
    before = path.read_bytes()
    with pytest.raises(TypeError, match="pickle"):  # torch.save fails part-way: a lock can't be pickled
        save_checkpoint(run, torch.nn.Linear(64, 64), step=7, directory=folder, extra={"bad": threading.Lock()})
    assert path.read_bytes() == before and torch.load(path, weights_only=True)["step"] == 7
    assert [p.name for p in folder.iterdir()] == [path.name]
    assert run.finish()
    with Client(agent_proc.url) as c:  # the good save was an unsolicited checkpoint, recorded once
        checkpoints = wait_until(lambda: events(c, run.id, "checkpoint"), what="the checkpoint event")
        assert [(e["cid"], e["applied"]) for e in checkpoints] == [(None, {"path": str(path)})]


def test_rank_other_than_zero_saves_only_with_all_ranks(agent_proc, tmp_path):
    run = ph.init("steer", name="rank1", agent=agent_proc.url, rank=1)
    model, folder = torch.nn.Linear(2, 2), tmp_path / "ckpt"
    assert save_checkpoint(run, model, step=3, directory=folder) is None and not folder.exists()
    path = save_checkpoint(run, model, step=3, directory=folder, all_ranks=True)
    assert path == folder / "ckpt-step00000003-rank1.pt" and torch.load(path)["step"] == 3
    assert run.finish()


def test_checkpoint_request_answered_when_the_loop_saves_by_itself(agent_proc, tmp_path):
    def own_save(lp: Loop, step: int) -> None:
        target = tmp_path / f"mine-{step}.pt"
        torch.save(lp.model.state_dict(), target)
        lp.run.checkpoint_saved(str(target), step)

    loop = start(agent_proc, "own", {"lr": 0.1}, on_checkpoint=own_save)
    loop.start()
    with agent_proc.client() as c:
        ack = c.command(loop.run.id, "checkpoint", wait=10)
        assert ack["state"] == "applied", ack
        target = tmp_path / f"mine-{ack['step']}.pt"
        assert target.exists() and ack["applied"] == {"path": str(target)}
        loop.finish(c)
        acks = wait_until(lambda: [e for e in events(c, loop.run.id, "ack") if e["cmd"] == "checkpoint"],
                          what="the checkpoint's ack event")
        assert [(e["state"], e["detail"]) for e in acks] == [("applied", ack["detail"])]
