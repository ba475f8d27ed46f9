"""Demo trainers and the ``pilothouse demo`` launcher (the trainers import torch; ``import pilothouse`` does not)."""
