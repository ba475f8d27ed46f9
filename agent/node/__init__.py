"""The node agent's process (``pilothouse agent``): sockets and the turn loop, the journal, trainer
liveness, the reader feed, the command desk, alert engine, desk and hooks, the GPU/host sampler."""
