"""Runs inside the user's training process: ``Run`` (log, sync), the outbox thread that ships
records, the helm that applies commands at step boundaries, the rank collective, and the
launcher that starts a local agent when none answers.  Never blocks training; no SQLite, no Qt."""
