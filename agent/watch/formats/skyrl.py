"""SkyRL's own files: the eval dumps ``{export_path}/dumped_evals/global_step_{N}_evals/{data_source}.jsonl``.

Read from SkyRL's writer code (NovaSky-AI/SkyRL @ a956457, 0.3.0):

- ``skyrl/train/evaluate.py``, ``evaluate`` and ``evaluate_step_wise``: with ``trainer.dump_eval_results``
  (on by default) the folder is ``{trainer.export_path}/dumped_evals/global_step_{global_step}_evals``
  (0 for the eval before training), or ``eval_only`` for a run with no step, which is not read: its
  rows have no step to stand at.
- ``skyrl/train/utils/trainer_utils.py``, ``dump_per_dataset_eval_results``: one file per data source
  (``sanitize_data_source``: ``/`` as ``_``), opened ``"w"`` and written whole, one
  ``json.dumps(entry, ensure_ascii=False)`` line per sample: ``input_prompt`` and ``output_response``
  (``tokenizer.decode`` of the ids, special tokens and chat template included), ``score`` (a float,
  or a list of token-level rewards), ``stop_reason``, ``env_class``, ``env_extras`` (a map: the
  reward spec, ...), ``data_source``; no advantage (eval samples are not trained on).  Then
  ``aggregated_results.jsonl``: one line of the eval's metrics, not samples, left out (the same
  metrics reach SkyRL's tracker: its TensorBoard dir holds them).

A line becomes a row at the folder's step, ``split`` ``eval``: ``prompt`` ``input_prompt``,
``completion`` ``output_response``, ``reward`` ``score`` (a list of token-level rewards summed: the
sample's return; the list kept as ``score``), every other field kept (``env_extras`` as its JSON text).
"""

from __future__ import annotations

import re
from pathlib import Path

from pilothouse.watch.formats.rows import at_step, row, samples
from pilothouse.watch.sources import Parsed

FOLDER = "dumped_evals"
STEP_FOLDER = re.compile(r"^global_step_(\d+)_evals$")
AGGREGATE = "aggregated_results.jsonl"
FILE = re.compile(r"^.+\.jsonl$")


def is_eval_file(path: Path) -> bool:
    """Whether ``path`` is a data source's samples in ``dumped_evals/global_step_N_evals/``."""
    return path.name != AGGREGATE and path.parent.parent.name == FOLDER and bool(STEP_FOLDER.match(path.parent.name))


def has_evals(folder: Path) -> bool:
    """Whether ``folder`` (an export path's ``dumped_evals``) holds a step's eval folder."""
    try:
        return any(STEP_FOLDER.match(p.name) and p.is_dir() for p in folder.iterdir())
    except OSError:
        return False


class Evals:
    """One data source's samples of one eval."""

    name = "SkyRL eval dump"

    def file(self, path: Path) -> Parsed:
        step = int(STEP_FOLDER.match(path.parent.name).group(1))  # type: ignore[union-attr]
        rows = []
        for _, sample in samples(path, ("input_prompt", "output_response")):
            score = sample.get("score")
            tokens = isinstance(score, list) and len(score) > 1 and all(isinstance(s, (int, float)) for s in score)
            rows.append(row(sample, prompt=sample["input_prompt"], completion=sample["output_response"],
                            reward=sum(score) if tokens else score, split="eval",
                            used=("input_prompt", "output_response", *(() if tokens else ("score",)))))
        return at_step(path, step, rows)
