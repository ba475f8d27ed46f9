"""NeMo RL's own files: the ``train_data_step{N}.jsonl`` and ``val_data_step{N}.jsonl`` of its log dir.

Read from NeMo RL's writer code (NVIDIA-NeMo/RL @ 7ea279a, 0.6.0):

- ``nemo_rl/utils/logger.py``, ``Logger.log_batched_dict_as_jsonl``: ``{log_dir}/{filename}`` opened
  ``"w"`` and written whole, one line per sample of ``BatchedDataDict.make_microbatch_iterator(1)``
  (a ``slice(i, i + 1)``: every value a one-element list, tensors as nested lists), then
  ``json.dumps({**sample, "idx": i}, default=str)``.  A file written again (``val_data_step0`` on a
  resume) is said and not sent twice (``sources.WholeSource``).
- ``nemo_rl/algorithms/grpo.py``, ``grpo_train`` (training, ``train_data_step{total_steps + 1}``):
  ``content`` the sample's message-log turns as chat-template-rendered text, without roles; ``rewards``;
  ``filtered_rewards`` (dynamic sampling); ``input_lengths``; ``token_ids``, ``token_loss_mask``,
  ``advantages``, ``generation_logprobs``, ``prev_logprobs`` per token; ``sample_loss_mask``; ``agent_ref``
  where the batch has one.  ``validate`` (``val_data_step{step}``, 0 before training): ``content`` the
  chat (``role``, ``content``), ``rewards``.  ``examples/run_*.py`` make the log dir
  ``logs/exp_NNN`` (``get_next_experiment_dir``), its TensorBoard events in ``tensorboard/``.  A folder
  holding step dumps, or an ``exp_NNN`` holding ``tensorboard/`` (a run's first minutes, before its
  first dump), is one run with its events (``layouts.LAYOUTS``), not a TensorBoard run of its own
  that the run folder would take over once the first dump appears.

A line becomes a row at the step of its file's name.  Training: ``prompt`` the turns before the last,
joined (each turn is its rendered chunk, template markers included, so joined they are the prompt as
the model read it), ``completion`` the last turn; earlier assistant turns of a multi-turn sample are
in the prompt text, as no role tells them apart.  ``reward`` is ``rewards``.  ``advantage``: the
advantages on the tokens ``token_loss_mask`` marks (the response tokens; all, without a mask): their
one value where they hold one (GRPO's per-sample advantage broadcast), else their mean.
``completion_tokens`` counts those tokens.  The per-token arrays themselves are left out: they are
most of a file's size and no row shows them.  Validation: ``split`` ``val``, ``prompt`` the messages
before the first assistant message, ``completion`` that one and all after it, both chats.  Every other
field is kept, its one-element list unwrapped.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from pilothouse.watch.formats.rows import at_step, row, samples
from pilothouse.watch.sources import Parsed

STEP_FILE = re.compile(r"^(train|val)_data_step(\d+)\.jsonl$")
EXP_FOLDER = re.compile(r"^exp_\d{3,}$")  # get_next_experiment_dir's: a log dir before its first step dump
PER_TOKEN = ("token_ids", "token_loss_mask", "advantages", "generation_logprobs", "prev_logprobs")


def has_step_files(files: list[str]) -> bool:
    """Whether a folder's ``files`` hold a NeMo RL step dump (the folder is a log dir)."""
    return any(STEP_FILE.match(name) for name in files)


def _one(value: Any) -> Any:
    """A BatchedDataDict slice's value: its one element."""
    return value[0] if isinstance(value, list) and len(value) == 1 else value


def advantage(advantages: Any, mask: Any) -> tuple[float | None, int]:
    """The sample's advantage on its masked tokens (their one value, else their mean) and their count."""
    if not isinstance(advantages, list) or not all(isinstance(a, (int, float)) for a in advantages):
        return None, 0
    if isinstance(mask, list) and len(mask) == len(advantages):
        values = [a for a, m in zip(advantages, mask) if m]
    else:
        values = advantages
    if not values:
        return None, 0
    first = float(values[0])
    if all(v == first for v in values):
        return first, len(values)
    return sum(values) / len(values), len(values)


def _train(fields: dict[str, Any], n: int) -> dict[str, Any]:
    turns = fields["content"]
    if not turns or not all(isinstance(t, str) for t in turns):
        raise ValueError(f"line {n}: a training sample's content is not its turns' text")
    adv, tokens = advantage(fields.get("advantages"), fields.get("token_loss_mask"))
    extra = {"completion_tokens": tokens} if tokens else {}
    return row({**fields, **extra}, prompt="".join(turns[:-1]), completion=turns[-1], reward=fields.get("rewards"),
               advantage=adv, used=("content", "rewards", *PER_TOKEN))


def _val(fields: dict[str, Any], n: int) -> dict[str, Any]:
    chat = fields["content"]
    if not chat or not all(isinstance(m, dict) and isinstance(m.get("role"), str) for m in chat):
        raise ValueError(f"line {n}: a validation sample's content is not a list of messages with roles")
    first = next((i for i, m in enumerate(chat) if m["role"] == "assistant"), len(chat))
    return row(fields, prompt=chat[:first], completion=chat[first:] or None, reward=fields.get("rewards"),
               split="val", used=("content", "rewards"))


class StepData:
    """One ``train_data_step{N}.jsonl`` or ``val_data_step{N}.jsonl``: a step's samples."""

    name = "NeMo RL step data"

    def file(self, path: Path) -> Parsed:
        kind, step = STEP_FILE.match(path.name).groups()  # type: ignore[union-attr]
        rows = []
        for n, sample in samples(path, ("content",)):
            if not isinstance(sample["content"], list) or len(sample["content"]) != 1:
                raise ValueError(f"line {n}: its content is not a one-element list, as NeMo RL writes each value")
            fields = {k: _one(v) for k, v in sample.items()}
            rows.append(_train(fields, n) if kind == "train" else _val(fields, n))
        return at_step(path, int(step), rows)
