"""Steering a Hugging Face ``transformers.Trainer``: ``trainer.add_callback(PilothouseCallback(run))``.

Imported only on use: ``import pilothouse`` never imports transformers (nor torch).
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping
from typing import Any

from transformers import (
    TrainerCallback,
    TrainerControl,
    TrainerState,
    TrainingArguments,
)
from transformers.trainer_utils import PREFIX_CHECKPOINT_DIR

from pilothouse.torch import bind_optimizer
from pilothouse.trainer.run import Run


class PilothouseCallback(TrainerCallback):
    """Pause, hyperparameter changes, checkpoint and stop requests for a Trainer, plus its logs.

    ``run.sync`` is called in ``on_step_end``: after ``optimizer.step()`` and
    ``lr_scheduler.step()`` of step N, before that step's log/save phase.  So a change is
    used by the very next optimizer step and nothing overwrites it in between (the
    scheduler already stepped; its base lrs follow the change, see ``bind_optimizer``);
    a requested checkpoint is saved in step N's own save phase, holding exactly the state
    the acknowledgement names; and a stop ends training without one more forward/backward
    pass, which ``on_step_begin`` would still run.
    """

    def __init__(self, run: Run, log_metrics: bool = True, keys: Mapping[str, str] | Iterable[str] | None = None):
        self.run = run
        self.log_metrics = log_metrics
        self.keys = keys
        self._bound: Any = None  # the optimizer bound to the run's changes

    def on_train_begin(self, args: TrainingArguments, state: TrainerState, control: TrainerControl,
                       optimizer: Any = None, lr_scheduler: Any = None, **kwargs: Any) -> None:
        if optimizer is not None and optimizer is not self._bound:  # once per optimizer, not per train()
            bind_optimizer(self.run, optimizer, lr_scheduler, self.keys)
            self._bound = optimizer

    def on_step_end(self, args: TrainingArguments, state: TrainerState, control: TrainerControl,
                    **kwargs: Any) -> TrainerControl:
        ctl = self.run.sync(state.global_step)
        if ctl.checkpoint:
            control.should_save = True
        if ctl.stop:
            control.should_training_stop = True
        return control

    def on_save(self, args: TrainingArguments, state: TrainerState, control: TrainerControl, **kwargs: Any) -> None:
        """Every save the Trainer makes, requested or scheduled, is reported with its folder."""
        path = os.path.join(args.output_dir, f"{PREFIX_CHECKPOINT_DIR}-{state.global_step}")
        self.run.checkpoint_saved(path, state.global_step)

    def on_log(self, args: TrainingArguments, state: TrainerState, control: TrainerControl,
               logs: dict[str, Any] | None = None, **kwargs: Any) -> None:
        if not self.log_metrics or not logs:
            return
        numbers = {k: v for k, v in logs.items() if isinstance(v, (int, float)) and not isinstance(v, bool)}
        if numbers:
            self.run.log(numbers, step=state.global_step)
