"""Demo trainers and the ``pilothouse demo`` launcher (the trainers import torch; ``import agent`` does not)."""
