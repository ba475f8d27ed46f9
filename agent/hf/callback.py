"""``PilothouseCallback``: watch and steer a Hugging Face Trainer or a TRL trainer.

The callback API hands a callback the model, optimizer and scheduler but not the trainer, and
its knobs (``beta``, the sampling settings, ``args.max_grad_norm``) live on the trainer.  Every
event is called by the trainer itself (``trainer.callback_handler.on_...``), so the trainer is
the frame up the stack whose ``self`` holds this callback in its ``callback_handler``: that works
whether the callback was given to the constructor or added later with ``add_callback``.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from transformers import TrainerCallback, TrainerControl, TrainerState, TrainingArguments
from transformers.trainer_utils import PREFIX_CHECKPOINT_DIR

from pilothouse.hf.knobs import Knob, trainer_knobs
from pilothouse.hf.rollouts import GRPORollouts
from pilothouse.torch import bind_optimizer
from pilothouse.trainer.run import Run, init
from pilothouse.wire.tuning import coerce, safe_bounds

DEFAULT_PROJECT = "huggingface"  # as W&B's callback: $PILOTHOUSE_PROJECT, else this
_OPTIMIZER_KEYS = {"learning_rate": "lr", "weight_decay": "weight_decay"}


class PilothouseCallback(TrainerCallback):
    """Pause, hyperparameter changes, checkpoint and stop for a Trainer; its logs; GRPO rollouts.

    ``PilothouseCallback()`` starts a run when training starts: project $PILOTHOUSE_PROJECT (else
    "huggingface"), name from ``args.run_name`` or the output folder, config from the training
    arguments.  ``PilothouseCallback(run)`` steers a run of your own.  Tunable: learning rate,
    weight decay and max grad norm on every Trainer; on ``GRPOTrainer`` also ``beta``, ``epsilon``,
    ``epsilon_high``, the sampling settings and each reward function's weight
    (``reward_weights/<name>``).  Other settings are shown, not tunable.

    Commands are applied in ``on_step_end``: after step N's optimizer and scheduler steps, before
    its log and save, so a change is used by the very next update, a requested checkpoint holds
    exactly the state the acknowledgement names, and a stop ends training with no extra step.  A
    pause holds the trainer after step N is logged (a log is forced on that step), and a checkpoint
    asked while paused is saved there at once.  ``rollouts_per_step`` limits the GRPO rollouts kept
    per step (default: all of them; 0: none); with a conversational dataset their prompts and
    completions are lists of messages, tool calls and tool results included.
    """

    def __init__(self, run: Run | None = None, *, project: str | None = None, log_metrics: bool = True,
                 rollouts_per_step: int | None = None,
                 keys: Mapping[str, str] | Iterable[str] | None = None):
        if rollouts_per_step is not None and (type(rollouts_per_step) is not int or rollouts_per_step < 0):
            raise ValueError(f"rollouts_per_step must be an int >= 0 or None (all), got {rollouts_per_step!r}")
        self.run = run
        self.project = project
        self.log_metrics = log_metrics
        self.rollouts_per_step = rollouts_per_step
        self.keys = keys
        self.trainer: Any = None
        self._bound: Any = None  # the optimizer bound to the run's changes
        self._optimizer_keys: dict[str, str] = {}
        self._rollouts: GRPORollouts | None = None
        self._hold_at: int | None = None  # paused at this step: hold once it is logged

    # --- attaching -------------------------------------------------------------------------

    def on_train_begin(self, args: TrainingArguments, state: TrainerState, control: TrainerControl,
                       optimizer: Any = None, lr_scheduler: Any = None, **kwargs: Any) -> None:
        if self.trainer is None:
            self.trainer = _calling_trainer(self)
            self._attach(args)
        if optimizer is not None and optimizer is not self._bound:  # once per optimizer, not per train()
            group = optimizer.param_groups[0]
            keys = self._optimizer_keys if self.keys is not None else \
                {k: v for k, v in self._optimizer_keys.items() if v in group}
            bind_optimizer(self.run, optimizer, lr_scheduler, keys)
            self._bound = optimizer

    def _attach(self, args: TrainingArguments) -> None:
        trainer = self.trainer
        knobs = trainer_knobs(trainer)
        settings = args.to_dict()
        if self.keys is None:
            optimizer_keys = {k: v for k, v in _OPTIMIZER_KEYS.items() if isinstance(settings.get(k), (int, float))}
        else:
            optimizer_keys = dict(self.keys) if isinstance(self.keys, Mapping) else {k: k for k in self.keys}
        self._optimizer_keys = optimizer_keys  # config key -> param_group key, bound when the optimizer exists
        values = {k: settings[k] for k in optimizer_keys if k in settings}
        values.update({name: knob.get() for name, knob in knobs.items()})
        if self.run is None:  # the arguments are shown; adapt() below adds the tunable ones
            shown = {k: v for k, v in _shown(args).items() if k not in values}
            self.run = init(self.project or os.environ.get("PILOTHOUSE_PROJECT") or DEFAULT_PROJECT,
                            name=_run_name(args), config=shown, tunable={})
        run = self.run
        run.adapt(values, {**{k: None for k in optimizer_keys}, **{n: k.spec for n, k in knobs.items()}})
        for name, knob in knobs.items():  # a value the run's config holds is the one to train with
            if name in run.config and run.config[name] != knob.get():
                knob.put(_checked(name, run.config[name], knob))
        run.on_change(lambda changes: {k: knobs[k].put(v) for k, v in changes.items()}, knobs)
        run.on_checkpoint(self._save_while_paused)
        if GRPORollouts.fits(trainer) and self.rollouts_per_step != 0:
            self._rollouts = GRPORollouts(trainer, self.rollouts_per_step)

    # --- each step -------------------------------------------------------------------------

    def on_step_end(self, args: TrainingArguments, state: TrainerState, control: TrainerControl,
                    **kwargs: Any) -> TrainerControl:
        run = self.run
        if self._rollouts is not None and run.rank == 0:
            self._rollouts.log_new(run, state.global_step)
        self._follow(run.sync(state.global_step, wait=False), control)
        if run.paused:
            self._hold_at = state.global_step
            control.should_log = True  # so the run's step and its last logged step agree while paused
        return control

    def on_step_begin(self, args: TrainingArguments, state: TrainerState, control: TrainerControl,
                      **kwargs: Any) -> None:
        if self._hold_at is not None:  # step N's log never came (another callback cancelled it): hold here,
            self._hold_at = None       # still at step N, before the next step's forward pass
            self._follow(self.run.wait_while_paused(state.global_step), control)

    def on_log(self, args: TrainingArguments, state: TrainerState, control: TrainerControl,
               logs: dict[str, Any] | None = None, **kwargs: Any) -> None:
        if self.log_metrics and logs:
            numbers = {k: v for k, v in logs.items() if isinstance(v, (int, float)) and not isinstance(v, bool)}
            if numbers:
                self.run.log(numbers, step=state.global_step)
        if self._hold_at == state.global_step:
            self._hold_at = None
            self._follow(self.run.wait_while_paused(state.global_step), control)

    def on_evaluate(self, args: TrainingArguments, state: TrainerState, control: TrainerControl,
                    **kwargs: Any) -> None:
        if self._rollouts is not None:
            self._rollouts.skip()  # evaluation completions are not a training step's

    def on_save(self, args: TrainingArguments, state: TrainerState, control: TrainerControl, **kwargs: Any) -> None:
        """Every save the Trainer makes, requested or scheduled, is reported with its folder."""
        self.run.checkpoint_saved(_checkpoint_dir(args, state), state.global_step)

    @staticmethod
    def _follow(ctl: Any, control: TrainerControl) -> None:
        if ctl.checkpoint:
            control.should_save = True
        if ctl.stop:
            control.should_training_stop = True

    def _save_while_paused(self, step: int) -> str | None:
        """Running, the Trainer's own save phase of this step takes the checkpoint (``on_save``
        answers); paused, nothing else will run, so it is saved now, at the paused step."""
        if not self.run.paused:
            return None
        trainer = self.trainer
        trainer._save_checkpoint(trainer.model, trial=None)
        return _checkpoint_dir(trainer.args, trainer.state)


def _checked(name: str, value: Any, knob: Knob) -> Any:
    """A start value from the run's config, held to the knob's bounds as a live change would be."""
    kind = "float" if isinstance(knob.get(), float) else "int"
    try:
        return coerce(name, value, {"type": kind, **(knob.spec or safe_bounds(name))})
    except ValueError as exc:
        raise ValueError(f"the run's config cannot start this trainer: {exc}") from None


def _calling_trainer(callback: PilothouseCallback) -> Any:
    frame = sys._getframe(1)
    while frame is not None:
        owner = frame.f_locals.get("self")
        handler = getattr(owner, "callback_handler", None)
        if any(cb is callback for cb in getattr(handler, "callbacks", ())):
            return owner
        frame = frame.f_back
    raise RuntimeError("PilothouseCallback found no Trainer calling it: give it to a transformers Trainer "
                       "(callbacks=[...] or trainer.add_callback(...))")


def _checkpoint_dir(args: TrainingArguments, state: TrainerState) -> str:
    return os.path.join(args.output_dir, f"{PREFIX_CHECKPOINT_DIR}-{state.global_step}")


def _run_name(args: TrainingArguments) -> str:
    return args.run_name or Path(args.output_dir or "trainer").resolve().name


def _shown(args: TrainingArguments) -> dict[str, Any]:
    """The training arguments (a TRL config is a subclass: its fields come too), as plain values."""
    return {k: v for k, v in args.to_dict().items() if not k.startswith("_") and not k.endswith("_token")}
