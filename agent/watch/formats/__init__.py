"""Readers of the RL frameworks' own files (TRL, verl, NeMo RL, prime-rl, SkyRL, ART): what a line or a file
of each holds, as scalars and rollout rows at steps (``pilothouse.watch.sources`` reads the files)."""
