"""Steering a Hugging Face ``transformers.Trainer`` or a TRL trainer:
``trainer.add_callback(PilothouseCallback())``.

Imported only on use: ``import pilothouse`` never imports transformers (nor torch).
"""

from pilothouse.hf.callback import PilothouseCallback

__all__ = ["PilothouseCallback"]
