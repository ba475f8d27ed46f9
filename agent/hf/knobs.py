"""What a Hugging Face Trainer (and TRL's GRPOTrainer) can change while it trains, and where.

Each knob writes every place the trainer reads its setting from and reads it back, so an
acknowledgement reports what the trainer now uses, not what was asked.  Nothing here imports
transformers or TRL: the trainer is reached through its attributes, which is also what keeps
an unknown TRL version from being steered by guesswork (a missing attribute means no knob).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any, NamedTuple

from pilothouse.trainer.helm import Effect, Refused

REWARD_WEIGHT = "reward_weights/"  # + a reward function's name
_WEIGHT_RANGE = {"min": -1000.0, "max": 1000.0}  # finite; a weight's sign is the user's choice


class Knob(NamedTuple):
    get: Callable[[], Any]
    put: Callable[[Any], Any]  # returns the value in effect (or an Effect); raises Refused
    spec: dict[str, Any] | None = None  # bounds; None: the safe range of the name (pilothouse.wire.tuning)


class _Setting(NamedTuple):
    """A sampling setting as the trainer, its generation config and its vLLM client each hold it."""

    spec: dict[str, Any]
    read: Callable[[Any], Any]
    write: Callable[[Any, Any], None]


_SAMPLING = {
    "temperature": _Setting({"above": 0}, lambda o: o.temperature, lambda o, v: setattr(o, "temperature", v)),
    "top_p": _Setting({"above": 0, "max": 1}, lambda o: o.top_p, lambda o, v: setattr(o, "top_p", v)),
    "top_k": _Setting({"min": 0}, lambda o: o.top_k, lambda o, v: setattr(o, "top_k", v)),
    "min_p": _Setting({"min": 0, "max": 1}, lambda o: o.min_p, lambda o, v: setattr(o, "min_p", v)),
    "repetition_penalty": _Setting({"above": 0}, lambda o: o.repetition_penalty,
                                   lambda o, v: setattr(o, "repetition_penalty", v)),
}


def trainer_knobs(trainer: Any) -> dict[str, Knob]:
    """Every setting of ``trainer`` that can change between two optimizer steps (the optimizer's
    own, learning rate and weight decay, are bound separately with ``bind_optimizer``)."""
    args = trainer.args

    def put_max_grad_norm(value: float) -> float:
        args.max_grad_norm = value  # read by the Trainer at every optimizer step
        return args.max_grad_norm

    knobs = {"max_grad_norm": Knob(lambda: args.max_grad_norm, put_max_grad_norm)}
    if any(cls.__name__ == "GRPOTrainer" for cls in type(trainer).__mro__):
        knobs.update(_grpo_knobs(trainer))
    return knobs


def _grpo_knobs(trainer: Any) -> Iterator[tuple[str, Knob]]:
    yield "beta", Knob(lambda: trainer.beta, lambda v: _put_beta(trainer, v))
    symmetric = [trainer.args.epsilon_high is None]  # epsilon_high follows epsilon until set itself

    def put_epsilon(value: float) -> Any:
        trainer.epsilon_low = value
        if symmetric[0]:
            trainer.epsilon_high = value
            return Effect(trainer.epsilon_low, "epsilon_high follows: the clip range is symmetric")
        return trainer.epsilon_low

    def put_epsilon_high(value: float) -> Any:
        symmetric[0] = False
        trainer.epsilon_high = value
        return trainer.epsilon_high

    yield "epsilon", Knob(lambda: trainer.epsilon_low, put_epsilon)
    yield "epsilon_high", Knob(lambda: trainer.epsilon_high, put_epsilon_high)
    for name, setting in _SAMPLING.items():
        if isinstance(setting.read(trainer), (int, float)):  # None (min_p off) stays off
            yield name, Knob(lambda s=setting: s.read(trainer),
                             lambda v, n=name, s=setting: _put_sampling(trainer, n, s, v), setting.spec)
    for i, func in enumerate(trainer.reward_func_names):
        yield REWARD_WEIGHT + func, Knob(lambda i=i: float(trainer.reward_weights[i]),
                                         lambda v, i=i: _put_weight(trainer, i, v), _WEIGHT_RANGE)


def _put_beta(trainer: Any, value: float) -> float:
    if value != 0 and trainer.beta == 0 and trainer.ref_model is None and not _is_peft(trainer.model):
        raise Refused("beta stays 0: the run started with beta=0, so TRL loaded no reference model to measure "
                      "the KL against; start the run with beta > 0 to tune it")
    trainer.beta = value
    return trainer.beta


def _put_sampling(trainer: Any, name: str, setting: _Setting, value: Any) -> Any:
    """The next generation reads the setting from the generation config (transformers) or the vLLM
    client; the temperature also scales the log-probs of the loss, fixed in TRL's fused LM head."""
    holders = [obj for obj in (getattr(trainer, "generation_config", None), getattr(trainer, "vllm_generation", None))
               if obj is not None and _holds(setting, obj)]
    if not holders:
        raise Refused(f"found no generation settings holding {name} on this trainer")
    if name == "temperature":
        heads = [_closure_cell(m.forward, "_fused_forward", "temperature")
                 for m in (trainer.model, trainer.ref_model) if m is not None]
        if not heads or None in heads:
            raise Refused("this TRL version fixes the log-prob temperature when training starts; changing "
                          "only the sampling temperature would make the loss use other log-probs")
        for cell in heads:
            cell.cell_contents = value
    setting.write(trainer, value)
    for obj in holders:
        setting.write(obj, value)
    kwargs = getattr(trainer, "generation_kwargs", None)
    if isinstance(kwargs, dict) and name in kwargs:
        kwargs[name] = value
    return setting.read(holders[0])


def _holds(setting: _Setting, obj: Any) -> bool:
    try:
        setting.read(obj)
    except AttributeError:
        return False
    return True


def _put_weight(trainer: Any, index: int, value: float) -> float:
    trainer.reward_weights[index] = value  # in place: the tensor the reward sum reads
    return float(trainer.reward_weights[index])


def _is_peft(model: Any) -> bool:
    return hasattr(getattr(model, "module", model), "peft_config")  # DDP wraps it in .module


def _closure_cell(fn: Any, code_name: str, var: str, depth: int = 0) -> Any:
    """The cell holding ``var`` in the function called ``code_name`` among the wrappers of ``fn``
    (accelerate and transformers wrap a model's forward in closures and ``__wrapped__``)."""
    fn = getattr(fn, "__func__", fn)
    code = getattr(fn, "__code__", None)
    if code is not None and code.co_name == code_name and var in code.co_freevars:
        return fn.__closure__[code.co_freevars.index(var)]
    if depth > 8:
        return None
    inner = [c.cell_contents for c in (getattr(fn, "__closure__", None) or ()) if _filled(c)]
    for candidate in [getattr(fn, "__wrapped__", None), *inner]:
        if callable(candidate):
            found = _closure_cell(candidate, code_name, var, depth + 1)
            if found is not None:
                return found
    return None


def _filled(cell: Any) -> bool:
    try:
        cell.cell_contents
    except ValueError:
        return False
    return True
