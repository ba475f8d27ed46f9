"""OpenRLHF's sample in its TensorBoard dir: the text ``train/generated_samples``.

Read from OpenRLHF's writer code (OpenRLHF/OpenRLHF @ 3c3be62, 0.11.0):
``openrlhf/utils/logging_utils.py`` ``TensorboardLogger.log_train`` writes, at each logged step,
``add_text("train/generated_samples", f"Sample:\\\\n{text}\\\\n\\\\nReward: {reward:.4f}", global_step)``
(torch's ``SummaryWriter``: the tag is stored as ``train/generated_samples/text_summary``); its
separators are the two characters backslash and n, not newlines, while ``text`` keeps its own.
``openrlhf/trainer/ppo_trainer.py`` ``PPOTrainer.train_step``: ``text`` is
``tokenizer.decode(experiences[0].sequences[0], skip_special_tokens=True)``, the first sample's
prompt and response decoded as one text, and ``reward`` ``experiences[0].info["reward"][0]``.

The sample holds no boundary between prompt and response (the chat template's special tokens are
gone), so the row is that text as its ``completion`` and its ``reward``; no prompt is made up.  The
step is the event's (OpenRLHF's 1-based global step).  Its scalars (``train/*``, ``eval/*``) are the
TensorBoard reader's.
"""

from __future__ import annotations

import re

from pilothouse.watch.formats.rows import row

_SAMPLE = re.compile(r"\ASample:\\n(?P<text>.*)\\n\\nReward: (?P<reward>[^\s\\]+)\Z", re.S)


def sample_rows(text: str) -> list[dict] | None:
    """The row of one OpenRLHF sample text; None when ``text`` is not one."""
    match = _SAMPLE.match(text)
    if match is None:
        return None
    try:
        reward = float(match["reward"])  # "nan" and "inf" too: {reward:.4f} writes them so
    except ValueError:
        return None
    return [row({}, completion=match["text"], reward=reward)]
