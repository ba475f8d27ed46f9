"""OpenRLHF's TensorBoard dir followed live by a real ``pilothouse watch`` into a real agent (the
watcher killed and restarted while a restarted trainer writes), then imported into a second agent:
its scalars, and the sample it logs as text made a rollout row at each step, exactly once."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
from support.openrlhf_sample import reward, sample
from support.paths import ROOT
from support.processes import AgentProcess
from support.runs import run_of
from support.sockets import free_port
from support.waiting import wait_until
from support.watch_proc import WatchProcess, import_paths, row_count, rows_by_step

# OpenRLHF 0.11.0 (OpenRLHF/OpenRLHF @ 3c3be62) openrlhf/utils/logging_utils.py TensorboardLogger, as it is
# (torch's SummaryWriter at {tensorboard_dir}/{run_name}); the loop logs what PPOTrainer.train_step's status
# holds (openrlhf/trainer/ppo_trainer.py), flushed each step as a long-running trainer's writer is.
# ARGS: tensorboard_dir, run_name, first step, last step, the tests folder (for support.openrlhf_sample)
WRITER = r'''
import os, sys, time
from torch.utils.tensorboard import SummaryWriter

class TensorboardLogger:
    def __init__(self, tensorboard_dir, run_name):
        os.makedirs(tensorboard_dir, exist_ok=True)
        self.writer = SummaryWriter(log_dir=os.path.join(tensorboard_dir, run_name))

    def log_train(self, global_step, logs_dict):
        generated_samples = logs_dict.get("generated_samples")
        for k, v in logs_dict.items():
            if k == "generated_samples" and v is not None:
                text, reward = generated_samples
                formatted_text = f"Sample:\\n{text}\\n\\nReward: {reward:.4f}"
                self.writer.add_text("train/generated_samples", formatted_text, global_step)
            elif v is not None:
                self.writer.add_scalar(f"train/{k}", v, global_step)

    def log_eval(self, global_step, logs_dict):
        for k, v in logs_dict.items():
            if v is not None:
                self.writer.add_scalar(f"eval/{k}", v, global_step)

    def close(self):
        self.writer.close()

sys.path.insert(0, sys.argv[5])
from support.openrlhf_sample import reward, sample
logger = TensorboardLogger(sys.argv[1], sys.argv[2])
for step in range(int(sys.argv[3]), int(sys.argv[4]) + 1):
    logger.log_train(step, {"policy_loss": 1.0 / step, "reward": reward(step), "kl": None,
                            "rollout/reward_mean": reward(step), "generated_samples": [sample(step), reward(step)]})
    if step % 5 == 0:
        logger.log_eval(step, {"eval_gsm8k_pass1": step / 100})
    logger.writer.flush()
    time.sleep(0.02)
logger.close()
'''
RUN = "ppo_0101T00:00"  # OpenRLHF's default run name, "ppo_%m%dT%H:%M"


def _write(tmp_path, tensorboard_dir, first: int, last: int, wait: bool = True) -> subprocess.Popen:
    (tmp_path / "openrlhf_writer.py").write_text(WRITER)
    args = [str(tensorboard_dir), RUN, str(first), str(last), str(ROOT / "tests")]
    proc = subprocess.Popen([sys.executable, str(tmp_path / "openrlhf_writer.py"), *args], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    if wait:
        _, err = proc.communicate(timeout=120)
        assert proc.returncode == 0, err
    return proc


def _reward(step: int) -> float:
    return float(f"{reward(step):.4f}")  # as OpenRLHF writes it


def _check(client, run_id: str, last: int) -> None:
    assert rows_by_step(client, run_id) == {s: [{"completion": sample(s), "reward": _reward(s)}]
                                            for s in range(1, last + 1)}
    steps, vals, _ = client.series(run_id, "train/policy_loss")
    np.testing.assert_array_equal(steps, np.arange(1, last + 1))
    np.testing.assert_array_equal(vals, np.float32(1.0 / np.arange(1, last + 1)).astype(np.float64))
    steps, vals, _ = client.series(run_id, "eval/eval_gsm8k_pass1")
    np.testing.assert_array_equal(steps, np.arange(5, last + 1, 5))
    assert client.series(run_id, "train/kl")[0].size == 0  # OpenRLHF logs no None


def _rows(client) -> int:
    run = run_of(client, RUN)
    return row_count(client, run["id"] if run else None)


def test_openrlhf_tensorboard_dir_followed_live_restarted_and_imported(agent_proc, tmp_path):
    tensorboard_dir = tmp_path / "tensorboard"
    tensorboard_dir.mkdir()
    watcher = WatchProcess(tmp_path, agent_proc.url, tensorboard_dir, project="openrlhf").start()
    client = agent_proc.client()
    try:
        writer = _write(tmp_path, tensorboard_dir, 1, 12, wait=False)
        wait_until(lambda: _rows(client) >= 3, timeout=60, what="the first samples, while the trainer writes")
        writer.communicate(timeout=60)
        assert writer.returncode == 0
        wait_until(lambda: _rows(client) == 12, timeout=30, what="every sample of the first trainer")
        watcher.kill()
        _write(tmp_path, tensorboard_dir, 13, 20)  # the trainer resumed: a new event file in the same run folder
        watcher = WatchProcess(tmp_path, agent_proc.url, tensorboard_dir, project="openrlhf").start()
        wait_until(lambda: _rows(client) == 20, timeout=30, what="the resumed trainer's samples")
    finally:
        watcher.stop()
    run = run_of(client, RUN)
    _check(client, run["id"], 20)

    junk = tensorboard_dir / "ppo_0102T00:00" / "events.out.tfevents.1700000000.host"
    junk.parent.mkdir()
    junk.write_bytes(b"\x07" * 300)
    second = AgentProcess(tmp_path / "agent2", free_port(), ["--stale-after", "3"]).start()
    try:
        done = import_paths(tmp_path, second.url, tensorboard_dir, project="openrlhf")
        assert done.returncode == 1 and f"{junk} is not a TensorBoard event file" in done.stderr, done.stderr
        again = second.client()
        _check(again, run_of(again, RUN)["id"], 20)
        assert row_count(again, (run_of(again, "ppo_0102T00:00") or {}).get("id")) == 0  # nothing from the junk
    finally:
        second.stop()
