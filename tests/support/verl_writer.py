"""A verl run's files written by verl 0.9.1's own code, step by step as a test asks: its ``Tracking``
with the ``file`` backend (``verl/utils/tracking.py``, ``FileLogger``) and
``RayPPOTrainer._write_generations`` (``verl/trainer/ppo/ray_trainer.py``, the staticmethod its
``_dump_generations`` runs in a thread for ``trainer.rollout_data_dir`` and ``validation_data_dir``).

Run as a script (``python verl_writer.py ROOT``), it imports verl once (several seconds) and then
takes one command a line on stdin, answering ``ok`` when done:

- ``track``: a new ``Tracking`` (verl's trainer starting, or resuming: its file logger starts the
  file anew, ``ROOT/logs/verl/grpo.jsonl``);
- ``log S``: ``Tracking.log(metrics(S), step=S)``;
- ``torn S``: the same, its line written in two parts through the logger's own file (``half``
  after the first; the rest on the next line of stdin), as a reader may see a write in progress;
- ``gen DIR S ATTEMPT``: ``_write_generations`` of ``samples(S, DIR, ATTEMPT)`` into ``ROOT/DIR``;
- ``slowgen DIR S ATTEMPT``: the same file, appearing in two parts (``half``, then the rest on the
  next line of stdin), as verl's dump thread's buffered writes land.

``metrics`` and ``samples`` are what it logs: plain values, NaN and a numpy float32 among them.
``VerlWriter`` is the test's side: the script started, asked, and closed.
"""

from __future__ import annotations

import math
import os
import subprocess
import sys
from pathlib import Path

import numpy as np

PROJECT, EXPERIMENT = "verl", "grpo"
ROLLOUTS, VALIDATION = "rollouts", "val_generations"  # trainer.rollout_data_dir, trainer.validation_data_dir


def metrics(step: int) -> dict:
    """What verl's trainer logs at ``step``: validation's keys at step 0, training's after."""
    if step == 0:
        return {"val-core/openai/gsm8k/reward/mean@1": 0.25, "val-aux/openai/gsm8k/acc/mean@1": 0.5}
    return {"critic/score/mean": step / 8, "critic/advantages/max": 1.5 - step / 16,
            "actor/pg_loss": math.nan if step == 3 else -0.01 * step, "actor/entropy": np.float32(0.7 / step),
            "response_length/mean": 100.0 + step, "training/global_step": step, "timing_s/step": 1.25}


def samples(step: int, folder: str, attempt: int) -> tuple[list, list, list, list, dict]:
    """``_write_generations``'s inputs, gts, scores and reward extras for a step's dump (4 samples:
    GRPO's two prompts, two responses each)."""
    n = 4
    inputs = [f"问题 {step}.{i // 2}: what is {i // 2} + {step}?\n" for i in range(n)]
    outputs = [f"<think>attempt {attempt}</think>\nthe answer is {i + step}" for i in range(n)]
    gts = [str(step), {"answer": step, "units": None}, None, [1, step]]  # any JSON: verl's ground truth
    scores = [1.0, 0.0, -0.5, float(step)]
    extras = {"acc": [bool(i % 2) for i in range(n)], "pred": [str(i) for i in range(n)], "too_short": [1]}
    if folder == ROLLOUTS:
        extras["request_id"] = [f"req-{step}-{i}" for i in range(n)]
    else:
        extras["reward"] = scores  # verl's validation always has it, equal to the score
    return inputs, outputs, gts, scores, extras


class _Split:
    """A file whose next write lands in two parts: the first half, then (told on stdin) the rest."""

    def __init__(self, fp):
        self.fp = fp

    def write(self, data: bytes) -> int:
        self.fp.write(data[:len(data) // 2])
        self.fp.flush()
        _reply("half")
        sys.stdin.readline()
        return self.fp.write(data[len(data) // 2:])


def _reply(word: str) -> None:
    print(word, flush=True)


def main(root: Path) -> None:
    os.environ["VERL_FILE_LOGGER_ROOT"] = str(root / "logs")
    from verl.trainer.ppo.ray_trainer import RayPPOTrainer
    from verl.utils.tracking import Tracking

    tracking = None
    _reply("ready")
    for line in sys.stdin:
        cmd, *args = line.split()
        if cmd == "track":
            tracking = Tracking(PROJECT, EXPERIMENT, default_backend="file")
        elif cmd in ("log", "torn"):
            logger = tracking.logger["file"]
            if cmd == "torn":
                logger.fp = _Split(logger.fp)
            tracking.log(metrics(int(args[0])), step=int(args[0]))
            if cmd == "torn":
                logger.fp = logger.fp.fp
        elif cmd in ("gen", "slowgen"):
            folder, step, attempt = args[0], int(args[1]), int(args[2])
            target = root / folder
            dump = target if cmd == "gen" else root / "scratch"
            RayPPOTrainer._write_generations(*samples(step, folder, attempt), str(dump), step)
            if cmd == "slowgen":
                data = (dump / f"{step}.jsonl").read_bytes()
                with open(target / f"{step}.jsonl", "wb") as f:
                    _Split(f).write(data)
        _reply("ok")


class VerlWriter:
    """The writer script as a subprocess in ``root`` (its stderr in ``root/writer.err``)."""

    def __init__(self, root: Path):
        self.err = root / "writer.err"
        with open(self.err, "w") as err:
            self.proc = subprocess.Popen([sys.executable, "-W", "ignore", __file__, str(root)], stdin=subprocess.PIPE,
                                         stdout=subprocess.PIPE, stderr=err, text=True, cwd=root)

    def ask(self, line: str | None, want: str = "ok") -> None:
        """Send ``line`` (None: nothing) and wait for ``want`` (verl prints lines of its own between)."""
        if line is not None:
            self.proc.stdin.write(line + "\n")
            self.proc.stdin.flush()
        while (got := self.proc.stdout.readline()).strip() != want:
            assert got, f"the verl writer stopped: {self.err.read_text()[-3000:]}"

    def close(self) -> None:
        self.proc.stdin.close()
        assert self.proc.wait(timeout=30) == 0, self.err.read_text()[-3000:]

    def stop(self) -> None:
        """End it if a failed test left it running."""
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()


if __name__ == "__main__":
    main(Path(sys.argv[1]))
