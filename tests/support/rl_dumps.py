"""NeMo RL's and SkyRL's rollout dumps written as their own code writes them (neither installs on a
CPU beside this project's dependencies), and a watched run's series read back whole.

- ``nemo_log_batched_dict_as_jsonl``: NeMo RL's ``Logger.log_batched_dict_as_jsonl``
  (NVIDIA-NeMo/RL @ 7ea279a, ``nemo_rl/utils/logger.py``), its ``BatchedDataDict.make_microbatch_iterator(1)``
  being ``slice(i, i + 1)`` of every value (``nemo_rl/distributed/batched_data_dict.py``); the values
  as ``grpo_train`` and ``validate`` build them (``nemo_rl/algorithms/grpo.py``: ``log_data``, ``val_log_data``).
- ``skyrl_dump_per_dataset_eval_results``: SkyRL's ``dump_per_dataset_eval_results`` (NovaSky-AI/SkyRL
  @ a956457, ``skyrl/train/utils/trainer_utils.py``), the prompts and responses given decoded, as its
  ``tokenizer.decode`` would give them.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np
import torch

from pilothouse.wire.entries import KIND_METRIC


def nemo_log_batched_dict_as_jsonl(base_log_dir: Path, to_log: dict, filename: str) -> None:
    filepath = os.path.join(base_log_dir, filename)
    os.makedirs(os.path.dirname(filepath), exist_ok=True)
    first = next(iter(to_log.values()))
    size = first.shape[0] if torch.is_tensor(first) else len(first)  # BatchedDataDict.size
    with open(filepath, "w") as f:
        for i in range(size):
            sample = {k: v[i:i + 1] for k, v in to_log.items()}  # BatchedDataDict.slice(i, i + 1)
            for key, value in sample.items():
                if isinstance(value, torch.Tensor):
                    sample[key] = value.tolist()
                elif isinstance(value, np.ndarray):
                    sample[key] = value.tolist()
            f.write(json.dumps({**sample, "idx": i}, default=str) + "\n")


def skyrl_dump_per_dataset_eval_results(dump_dir_path: Path, input_prompts: list, output_responses: list,
                                        generator_outputs: dict, concat_data_sources: list, concat_all_envs: list,
                                        concat_env_extras: list, eval_metrics: dict) -> None:
    data_source_indices: dict = {}
    for i, data_source in enumerate(concat_data_sources):
        if data_source is None:
            data_source = "unknown"
        data_source_indices.setdefault(data_source, []).append(i)
    for data_source, indices in data_source_indices.items():
        filename = dump_dir_path / f"{data_source.replace('/', '_')}.jsonl"  # sanitize_data_source
        with open(filename, "w") as f:
            for i in indices:
                entry = {
                    "input_prompt": input_prompts[i],
                    "output_response": output_responses[i],
                    "score": generator_outputs["rewards"][i],
                    "stop_reason": generator_outputs.get("stop_reasons", [None] * len(input_prompts))[i],
                    "env_class": concat_all_envs[i],
                    "env_extras": concat_env_extras[i],
                    "data_source": data_source,
                }
                f.write(json.dumps(entry, ensure_ascii=False) + "\n")
    with open(dump_dir_path / "aggregated_results.jsonl", "w") as f:
        f.write(json.dumps(eval_metrics, ensure_ascii=False) + "\n")


def all_series(client, run_id: str) -> dict[str, tuple[list[int], list[float]]]:
    """Every series of a run, as (steps, values) lists (NaN as the string 'nan', to compare equal)."""
    names = {e.metric for page in client.history(run_id, [KIND_METRIC]) for e in page.entries}
    out = {}
    for name in sorted(names):
        steps, vals, _ = client.series(run_id, name)
        out[name] = (steps.tolist(), ["nan" if v != v else v for v in vals.tolist()])
    return out
