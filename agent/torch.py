"""PyTorch helpers: an optimizer (and its LR scheduler) that follows steered hyperparameters,
and checkpoints that answer a checkpoint request.

torch is imported inside the functions only: ``import pilothouse`` must stay cheap on nodes
where it is slow to import or absent.
"""

from __future__ import annotations

import operator
import os
import tempfile
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pilothouse.trainer.helm import Effect

if TYPE_CHECKING:
    import torch

    from pilothouse.trainer.run import Run

# Config names that mean a param_group key: TrainingArguments calls the learning rate this.
_ALIASES = {"learning_rate": "lr"}


def bind_optimizer(run: Run, optimizer: torch.optim.Optimizer, scheduler: Any = None,
                   keys: Mapping[str, str] | Iterable[str] | None = None) -> None:
    """Apply ``run.config`` to ``optimizer`` now and after every change.

    ``keys`` maps config keys to param_group keys (a list means the same names); by default
    every config key that is a key of the first param group (``learning_rate`` meaning ``lr``).
    A value is the first group's; other groups keep their ratio to it, so a no-decay group
    keeps weight_decay 0 and per-layer learning rates keep their spread.  With ``scheduler``,
    ``lr`` is the schedule's base: the scheduler would overwrite a plain param_group change
    at its next step, so its ``base_lrs`` change too and the current factor of the schedule
    is kept (an accelerate ``AcceleratedScheduler`` is unwrapped).
    """
    hyper = set(optimizer.param_groups[0]) - {"params"}
    if keys is None:
        keys = {k: _ALIASES.get(k, k) for k in run.config if _ALIASES.get(k, k) in hyper}
    keys = dict(keys) if isinstance(keys, Mapping) else {k: k for k in keys}
    unknown = sorted(set(keys.values()) - hyper)
    if unknown:
        raise KeyError(f"not hyperparameters of this optimizer's param groups: {unknown}")
    scheduler = getattr(scheduler, "scheduler", scheduler)

    def follow(changes: Mapping[str, Any]) -> dict[str, Any]:
        now = _apply(optimizer, scheduler, changes, keys)
        return {k: Effect(v, f"base {changes[k]:g}; with the schedule, {v:.3g} at this step")
                if keys[k] == "lr" and v != changes[k] else v for k, v in now.items()}

    _apply(optimizer, scheduler, {k: v for k, v in run.config.items() if k in keys}, keys)
    run.on_change(follow, keys)


def _apply(optimizer: Any, scheduler: Any, values: Mapping[str, Any], keys: Mapping[str, str]) -> dict[str, Any]:
    """Write config values into the param groups; returns the first group's value per config key."""
    groups = optimizer.param_groups
    for name, value in values.items():
        key = keys[name]
        if key == "lr" and getattr(scheduler, "base_lrs", None) is not None:
            _set_base_lr(groups, scheduler, value)
        else:
            for group, new in zip(groups, _rescaled([g[key] for g in groups], value)):
                _put(group, key, new)
        if key == "lr" and hasattr(scheduler, "_last_lr"):  # get_last_lr() is what trainers log
            scheduler._last_lr = [_plain(g["lr"]) for g in groups]
    return {name: _plain(groups[0][keys[name]]) for name in values}


def _set_base_lr(groups: list[dict], scheduler: Any, lr: float) -> None:
    """New base lrs for the schedule, each group's current lr scaled the same way."""
    bases = [_plain(b) for b in scheduler.base_lrs]
    for i, (group, old, new) in enumerate(zip(groups, bases, _rescaled(bases, lr))):
        current = _plain(group["lr"])
        _put(group, "lr", new * (current / old) if old else new)
        if "initial_lr" in group:  # what a scheduler built on this optimizer later starts from
            _put(group, "initial_lr", new)
        scheduler.base_lrs[i] = new


def _rescaled(values: list[Any], first: Any) -> list[Any]:
    """``values`` with the first replaced by ``first`` and the rest keeping their ratio to it."""
    old = _plain(values[0])
    numbers = all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in (old, first))
    if not numbers or old == 0:
        return [first] * len(values)
    return [first * (_plain(v) / old) for v in values]


def _put(group: dict, key: str, value: Any) -> None:
    """Set in place when the optimizer keeps the value as a tensor (capturable/fused optimizers)."""
    if hasattr(group[key], "fill_"):
        group[key].fill_(value)
    else:
        group[key] = value


def _plain(value: Any) -> Any:
    return value.item() if hasattr(value, "item") else value


def save_checkpoint(run: Run, model: torch.nn.Module, optimizer: torch.optim.Optimizer | None = None,
                    step: int | None = None, directory: str | os.PathLike | None = None,
                    extra: Mapping[str, Any] | None = None, all_ranks: bool = False) -> Path | None:
    """Save ``{"model", "optimizer", "step", "config", **extra}`` and report the path to the run.

    Written to a temporary file in the same directory, fsynced, then renamed, so the final
    name never holds a partial file (a crash mid-save leaves only a ``.tmp``).  Only rank 0
    saves unless ``all_ranks`` (then other ranks add ``-rank{N}`` to the name).  ``step``
    defaults to the run's last step.
    """
    step = run.step if step is None else operator.index(step)
    path = _write_checkpoint(run, model, optimizer, step, directory, extra, all_ranks)
    if path is not None:
        run.checkpoint_saved(str(path), step)
    return path


def bind_checkpoints(run: Run, model: torch.nn.Module, optimizer: torch.optim.Optimizer | None = None,
                     directory: str | os.PathLike | None = None, extra: Mapping[str, Any] | None = None,
                     all_ranks: bool = False) -> None:
    """Answer every checkpoint request with ``save_checkpoint``'s file, at the next ``run.sync``
    or at once while paused; the loop needs no ``ctl.checkpoint`` branch."""
    def save(step: int) -> str:
        path = _write_checkpoint(run, model, optimizer, step, directory, extra, all_ranks)
        return str(path) if path is not None else f"(rank {run.rank} saves nothing; rank 0 answers)"

    run.on_checkpoint(save)


def _write_checkpoint(run: Run, model: Any, optimizer: Any, step: int, directory: str | os.PathLike | None,
                      extra: Mapping[str, Any] | None, all_ranks: bool) -> Path | None:
    if run.rank != 0 and not all_ranks:
        return None
    import torch

    folder = Path(directory) if directory is not None else Path("checkpoints") / run.id
    folder.mkdir(parents=True, exist_ok=True)
    suffix = f"-rank{run.rank}" if run.rank else ""
    path = folder / f"ckpt-step{step:08d}{suffix}.pt"
    state = {"model": model.state_dict(), "step": step, "config": dict(run.config)}
    if optimizer is not None:
        state["optimizer"] = optimizer.state_dict()
    state.update(extra or {})
    fd, tmp = tempfile.mkstemp(dir=folder, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            torch.save(state, f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        os.unlink(tmp)
        raise
    _fsync_dir(folder)
    return path


def _fsync_dir(folder: Path) -> None:
    """Make the rename itself durable (POSIX; a no-op where directories can't be opened)."""
    try:
        fd = os.open(folder, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
