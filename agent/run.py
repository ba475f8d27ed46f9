"""The trainer-side API: ``agent.init`` and ``Run``.

``Run.log`` is on the training thread's hot path, so it only checks types, stamps the
time and appends to a deque; everything else happens on the outbox thread.
"""

from __future__ import annotations

import atexit
import math
import logging
import os
import secrets
import socket
import threading
import time
import types
import weakref
from collections.abc import Mapping
from typing import Any

import psutil

from . import launcher
from .outbox import Outbox
from .protocol import (DEFAULT_URL, ENV_AGENT, INT64_MAX, REC_METRICS, REC_ROLLOUTS, check_config, check_int,
                       check_name, check_run_id, check_url)
from .store import check_rollouts

log = logging.getLogger("pilothouse")

_CONFIG_TYPES = (str, int, float, bool, type(None))  # rollout values too
_FLOATS = frozenset((float,))
_OPEN_RUNS: "weakref.WeakSet[Run]" = weakref.WeakSet()
_MAX_ROLLOUT_TEXT = 16 << 20


def init(project: str, name: str | None = None, config: Mapping[str, Any] | None = None,
         agent: str | None = None, *, id: str | None = None, rank: int | None = None,
         buffer_mb: float = 256, heartbeat: float = 1.0) -> "Run":
    """Start a run.  ``agent=None``: $PILOTHOUSE_AGENT, else the local agent (started if absent)."""
    check_name(project, "project")
    run_id = check_run_id(id or os.environ.get("PILOTHOUSE_RUN_ID") or _new_id())
    name = run_id if name is None else check_name(name, "run name")
    cfg = check_config(dict(config or {}))
    if rank is None:
        rank = int(os.environ.get("RANK", "0"))
    check_int(rank, "rank")
    for what, value in (("buffer_mb", buffer_mb), ("heartbeat", heartbeat)):
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 < value < math.inf:
            raise ValueError(f"{what} must be a positive number, got {value!r}")
    url = agent or os.environ.get(ENV_AGENT)
    if url is None:
        url = check_url(DEFAULT_URL)
        launcher.ensure_local_agent(url)
    check_url(url)
    return Run(url, project=project, name=name, config=cfg, run_id=run_id, rank=rank,
               buffer_bytes=int(buffer_mb * (1 << 20)), heartbeat=heartbeat)


class Run:
    def __init__(self, url: str, *, project: str, name: str, config: dict, run_id: str, rank: int,
                 buffer_bytes: int, heartbeat: float):
        self.id = run_id
        self.project = project
        self.name = name
        self.rank = rank
        self.url = url
        self._config = config
        self.config: Mapping[str, Any] = types.MappingProxyType(self._config)
        self._step = -1
        self._records = 0  # appended to the queue; what flush waits for
        self._known: set[tuple[str, ...]] = set()  # metric-name sets already checked
        self._closed = False
        self._lock = threading.Lock()
        hello = {"run": run_id, "rank": rank, "project": project, "name": name, "config": config,
                 "host": socket.gethostname(), "pid": os.getpid(),
                 "pid_started": psutil.Process().create_time(), "created": time.time()}
        self._outbox = Outbox(url, hello, max_buffer_bytes=buffer_bytes, heartbeat_interval=heartbeat)
        self._queue = self._outbox.queue
        _OPEN_RUNS.add(self)

    def log(self, metrics: Mapping[str, Any], step: int | None = None) -> None:
        """Record scalars at ``step`` (default: the last step + 1).  Never blocks."""
        if self._closed:
            raise RuntimeError(f"run {self.id} is finished; start a new one with agent.init()")
        if type(metrics) is not dict and not isinstance(metrics, Mapping):
            raise TypeError(f"metrics must be a dict of name -> number, got {type(metrics).__name__}")
        names = tuple(metrics)
        if names not in self._known:
            self._check_keys(names)
        values = list(metrics.values())
        if not _FLOATS.issuperset(map(type, values)):
            values = [_number(k, v) for k, v in zip(names, values)]
        step = self._next_step(step)
        self._queue.append((REC_METRICS, step, time.time(), names, values))
        self._records += 1
        self._outbox.last_step = step

    def log_rollouts(self, step: int, rows: list[Mapping[str, Any]]) -> None:
        """Append sample rollouts (prompt, completion, reward, ...) for ``step``; every step is kept."""
        if self._closed:
            raise RuntimeError(f"run {self.id} is finished")
        if not isinstance(rows, (list, tuple)):
            raise TypeError(f"rollouts must be a list of dicts, got {type(rows).__name__}")
        for i, row in enumerate(rows):
            if not isinstance(row, Mapping):
                raise TypeError(f"rollout row {i} must be a dict, got {type(row).__name__}")
        clean = [{k: _rollout_value(k, v) for k, v in row.items()} for row in rows]
        check_rollouts(clean)
        size = sum(len(v) for row in clean for v in row.values() if isinstance(v, str))
        if size > _MAX_ROLLOUT_TEXT:
            raise ValueError(f"rollouts for step {step} hold {size} characters; split them (limit {_MAX_ROLLOUT_TEXT})")
        self._queue.append((REC_ROLLOUTS, self._next_step(step, advance=False), time.time(), clean))
        self._records += 1

    def flush(self, timeout: float = 10.0) -> bool:
        """Wait until the agent acknowledged everything logged so far."""
        return self._outbox.flush(timeout, self._records)

    def finish(self, timeout: float = 10.0) -> bool:
        """Deliver what is buffered and mark the run finished; False if the agent did not confirm."""
        with self._lock:
            if self._closed:
                return True
            self._closed = True
        delivered = self._outbox.close(timeout)
        _OPEN_RUNS.discard(self)
        if not delivered:
            st = self._outbox.stats
            log.warning("pilothouse: run %s finished without the agent's confirmation "
                        "(%d records unacknowledged, %d dropped)", self.id, st.buffered_records,
                        st.dropped_records)
        return delivered

    @property
    def stats(self) -> dict[str, int | str]:
        """Counters of what was logged, acknowledged, buffered and dropped."""
        return dict(vars(self._outbox.stats))

    def __enter__(self) -> "Run":
        return self

    def __exit__(self, *exc: object) -> None:
        self.finish()

    def _next_step(self, step: Any, advance: bool = True) -> int:
        if step is None:
            step = self._step + 1 if advance else max(self._step, 0)
        elif type(step) is not int:
            if isinstance(step, bool) or not hasattr(step, "__index__"):
                raise TypeError(f"step must be an int, got {type(step).__name__}")
            step = step.__index__()
        if not 0 <= step <= INT64_MAX:
            raise ValueError(f"step must be in [0, {INT64_MAX}], got {step}")
        if advance:
            self._step = step
        return step

    def _check_keys(self, names: tuple) -> None:
        for key in names:
            check_name(key, "metric name")
        self._known.add(names)


def _number(key: str, value: Any) -> float | int:
    if type(value) is int:
        if not -INT64_MAX - 1 <= value <= INT64_MAX:
            raise ValueError(f"metric {key!r} = {value} does not fit in int64; log it as a float")
        return value
    if isinstance(value, (str, bytes)) or not hasattr(value, "__float__"):
        raise TypeError(f"metric {key!r} must be a number, got {type(value).__name__}")
    try:
        return float(value)
    except (TypeError, ValueError, RuntimeError):  # a multi-element array or tensor
        raise TypeError(f"metric {key!r} must be a scalar number, got {type(value).__name__} "
                        f"of shape {getattr(value, 'shape', '?')}") from None


def _rollout_value(key: Any, value: Any) -> Any:
    if isinstance(value, _CONFIG_TYPES) or not hasattr(value, "__float__"):
        return value
    return _number(key, value)  # numpy and torch scalars


def _new_id() -> str:
    alphabet = "0123456789abcdefghijklmnopqrstuvwxyz"
    return "".join(secrets.choice(alphabet) for _ in range(8))


@atexit.register
def _finish_open_runs() -> None:
    for run in list(_OPEN_RUNS):
        run.finish(timeout=5.0)
