"""Runs the agent follows from files a framework writes (TensorBoard event files, W&B offline runs,
MLflow's file store), kind "watched".

They are stored like any run, but no process of theirs listens to the agent: they cannot be
paused, changed or checkpointed, and every reader (agent, CLI, app) says so with the same line.
"""

from __future__ import annotations

WATCHED = "watched"  # a run's kind, beside "train" (a trainer's) and "system" (the node's samples)
USER_KINDS = ("train", WATCHED)  # runs a user logged, shown by default
SOURCES = ("tensorboard", "wandb", "mlflow")  # what a watcher's hello may say it reads
STEER_HOW = ("to steer a run, add pilothouse.hf.PilothouseCallback() to the Trainer's callbacks, or call "
             "pilothouse.init(...) and run.sync(step) in the training loop")


def how_to_steer(run: str) -> str:
    """Why a watched run refuses a command, and how to make a run steerable."""
    return f"run {run} is watched from its framework's files: it cannot be steered from here; {STEER_HOW}"
