"""Following runs a framework already writes to disk (TensorBoard event files) into an agent, with
no change to the training code: ``pilothouse watch``, ``pilothouse agent --watch`` and
``pilothouse import LOGDIR``.  Needs ``pilothouse[tensorboard]``."""
