"""The trainer-side API: ``pilothouse.init`` and ``Run``.

``Run.log`` is on the training thread's hot path, so it only checks types, stamps the
time and appends to a deque; everything else happens on the outbox thread.
"""

from __future__ import annotations

import atexit
import logging
import math
import os
import secrets
import socket
import sys
import threading
import time
import types
import weakref
from collections.abc import Iterable, Mapping
from typing import Any, Self

import psutil

from pilothouse.trainer import launcher
from pilothouse.trainer.collective import Broadcaster, process_group
from pilothouse.trainer.helm import NOTHING, ChangeCallback, Control, Helm, Saver
from pilothouse.trainer.inbox import Inbox
from pilothouse.trainer.outbox import Outbox
from pilothouse.wire.alert_rules import check_rules
from pilothouse.wire.checks import (
    ENV_TOKEN,
    INT64_MAX,
    SCALARS,
    check_config,
    check_int,
    check_run_id,
    check_token,
    normal_name,
)
from pilothouse.wire.job import group_ranks
from pilothouse.wire.messages import MAX_ERROR_CHARS, MAX_HELLO_BYTES, MAX_INBOUND_BYTES, message, pack
from pilothouse.wire.records import (
    MAX_METRICS_PER_RUN,
    REC_CHECKPOINT,
    REC_METRICS,
    REC_ROLLOUTS,
    check_rollouts,
    metrics_packer,
)
from pilothouse.wire.tuning import build_schema
from pilothouse.wire.urls import DEFAULT_URL, ENV_AGENT, check_url

log = logging.getLogger("pilothouse")

_FLOATS = frozenset((float,))
_OPEN_RUNS: weakref.WeakSet[Run] = weakref.WeakSet()
_MAX_ROLLOUT_BYTES = MAX_INBOUND_BYTES // 2 - 4096  # packed, per call: one record always fits a batch


def init(project: str, name: str | None = None, config: Mapping[str, Any] | None = None,
         agent: str | None = None, *, id: str | None = None, rank: int | None = None,
         tunable: Mapping[str, Mapping[str, Any] | None] | None = None, frozen: Iterable[str] = (),
         sync_every: int = 1, buffer_mb: float = 256, heartbeat: float = 1.0,
         alerts: Iterable[Mapping[str, Any]] = (), token: str | None = None) -> Run:
    """Start a run.  ``agent=None``: $PILOTHOUSE_AGENT, else the local agent (started if absent).

    ``alerts``: rules the agent watches for this run only, e.g. ``[{"name": "nan-loss",
    "kind": "nonfinite", "metric": "loss", "pause": True}]`` (fields: see ``pilothouse.wire.alert_rules``);
    a bad rule raises here, before anything is sent.

    In a torch.distributed job every rank calls this with the same arguments (it is a
    collective): rank 0 picks the run id and receives commands, and ``sync`` shares
    its decisions with one small broadcast every ``sync_every`` steps.

    ``token``: the run's secret, which proves to the agent that a process belongs to the job that
    opened the run (another process of the same user cannot join a live run as a rank, nor take it
    over after an agent restart).  Rank 0 makes it; a torch.distributed job shares it with the run id;
    processes started otherwise (Ray actors, a launcher's own ranks) pass rank 0's ``run.token`` here
    or in $PILOTHOUSE_RUN_TOKEN."""
    project = normal_name(project, "project")
    cfg = check_config(dict(config or {}))
    schema = build_schema(cfg, tunable, frozen)
    rules = [dict(r) if isinstance(r, Mapping) else r for r in alerts]
    check_rules(rules, "alerts")
    check_int(sync_every, "sync_every", 1)
    dist = process_group()
    broadcaster = Broadcaster(dist) if dist is not None else None
    run_id = check_run_id(id or os.environ.get("PILOTHOUSE_RUN_ID") or _new_id())
    token = check_token(token or os.environ.get(ENV_TOKEN) or secrets.token_hex(16))
    if broadcaster is not None:
        run_id, token = broadcaster.share([run_id, token])
        rank = broadcaster.rank
    name = run_id if name is None else normal_name(name, "run name")
    if rank is None:
        rank = int(os.environ.get("RANK", "0"))
    check_int(rank, "rank")
    for what, value in (("buffer_mb", buffer_mb), ("heartbeat", heartbeat)):
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 < value < math.inf:
            raise ValueError(f"{what} must be a positive number, got {value!r}")
    url = agent or os.environ.get(ENV_AGENT) or _ray_node_agent()
    if url is None:
        url = check_url(DEFAULT_URL)
        launcher.ensure_local_agent(url)
    check_url(url)
    return Run(url, project=project, name=name, config=cfg, schema=schema, run_id=run_id, rank=rank, token=token,
               broadcaster=broadcaster, sync_every=sync_every, buffer_bytes=int(buffer_mb * (1 << 20)),
               heartbeat=heartbeat, alerts=rules, nodes=_job_nodes(broadcaster, rank, url))


class Run:
    def __init__(self, url: str, *, project: str, name: str, config: dict, schema: dict, run_id: str,
                 rank: int, token: str, broadcaster: Broadcaster | None, sync_every: int, buffer_bytes: int,
                 heartbeat: float, alerts: list[dict] | None = None, nodes: list[dict] | None = None):
        self.id = run_id
        self.project = project
        self.name = name
        self.rank = rank
        self.token = token  # the run's secret: hand it to processes that join as other ranks
        self.url = url
        self._config = config
        self.config: Mapping[str, Any] = types.MappingProxyType(self._config)
        self._step = -1
        self._records = 0  # appended to the queue; what flush waits for
        # metric-name sets checked -> their NFC form and the packer of their values
        self._known: dict[tuple[str, ...], tuple[tuple[str, ...], Any]] = {}
        self._metric_names: set[str] = set()
        self._closed = False
        self._lock = threading.Lock()
        hello = {"run": run_id, "rank": rank, "session": secrets.token_hex(8), "token": token,
                 "project": project, "name": name,
                 "config": config,
                 "schema": schema, "host": socket.gethostname(), "pid": os.getpid(),
                 "pid_started": psutil.Process().create_time(), "created": time.time()}
        if alerts:
            hello["alerts"] = alerts
        if nodes:
            hello["nodes"] = nodes  # every agent of a multi-node job knows the others
        _check_hello(hello)
        self._broadcaster = broadcaster
        self._sync_every = sync_every
        self._inbox = Inbox()  # commands from the outbox thread to the helm, and the helm's paused state back
        self._outbox = Outbox(url, hello, max_buffer_bytes=buffer_bytes, heartbeat_interval=heartbeat,
                              inbox=self._inbox)
        self._helm = Helm(self._config, schema, self._inbox, self._outbox.ack if rank == 0 else None,
                          self._record_checkpoint)
        self._queue = self._outbox.queue
        _OPEN_RUNS.add(self)

    def log(self, metrics: Mapping[str, Any], step: int | None = None) -> None:
        """Record scalars at ``step`` (default: the last step + 1).  Never blocks."""
        if self._closed:
            raise RuntimeError(f"run {self.id} is finished; start a new one with pilothouse.init()")
        if type(metrics) is not dict and not isinstance(metrics, Mapping):
            raise TypeError(f"metrics must be a dict of name -> number, got {type(metrics).__name__}")
        names = tuple(metrics)
        known = self._known.get(names)
        if known is None:
            known = self._check_keys(names)
        values = metrics.values()
        if not _FLOATS.issuperset(map(type, values)):
            values = [_number(k, v) for k, v in zip(names, values)]
        step = self._next_step(step)
        # packed here, while the values are in cache: the I/O thread then only joins bytes
        self._queue.append((REC_METRICS, known[0], known[1](step, time.time(), *values)))
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
        size = len(pack(clean))
        if size > _MAX_ROLLOUT_BYTES:
            raise ValueError(f"rollouts for step {step} take {size} bytes; log them in several calls "
                             f"(limit {_MAX_ROLLOUT_BYTES} per call, all kept at the step)")
        self._queue.append((REC_ROLLOUTS, None, (self._next_step(step, advance=False), time.time(), clean)))
        self._records += 1

    def sync(self, step: int | None = None, *, wait: bool = True) -> Control:
        """A step boundary: apply what was asked (pause blocks here), say what the loop must do.

        Microseconds when nothing is pending; in a multi-rank job, one small broadcast
        every ``sync_every`` steps so all ranks act at the same step.  ``wait=False`` does not
        block while paused: the loop calls ``wait_while_paused`` once the step is logged."""
        helm = self._helm
        if self._broadcaster is None and helm.idle():
            return NOTHING
        step = self._sync_step(step)
        if self._broadcaster is not None and step % self._sync_every:
            return NOTHING
        self._outbox.last_step = max(self._outbox.last_step, step)  # the heartbeat says where the run is, logged or not
        helm.expire_checkpoints(step)
        ctl = helm.apply(self._take(), step)
        return helm.hold(ctl, self._take_waiting, step) if wait else ctl

    def wait_while_paused(self, step: int | None = None) -> Control:
        """Block while paused (after ``sync(wait=False)``), applying what arrives; returns what was asked."""
        if not self._helm.paused:
            return NOTHING
        return self._helm.hold(NOTHING, self._take_waiting, self._sync_step(step))

    def _take(self) -> list[dict]:
        bcast = self._broadcaster
        if bcast is None:
            return self._inbox.take()
        return bcast.share(self._inbox.take() if self.rank == 0 else None) or []

    def _take_waiting(self) -> list[dict]:
        bcast = self._broadcaster
        if bcast is None:
            return self._inbox.take(wait=0.2)
        return bcast.share(self._inbox.take(wait=0.2) if self.rank == 0 else None) or []

    def on_change(self, callback: ChangeCallback, keys: Iterable[str] | None = None) -> None:
        """Call ``callback(changes)`` on the training thread when hyperparameters change (only those in
        ``keys``, when given).  It returns what is now in effect where that differs from the request
        (``{key: value}`` or ``{key: Effect(value, why)}``), or raises ``Refused(reason)`` (a
        ``ValueError``): the whole change is then undone and refused with that reason."""
        self._helm.callbacks.append((callback, None if keys is None else frozenset(keys)))

    def on_checkpoint(self, save: Saver) -> None:
        """Register ``save(step) -> path``: called on the training thread when a checkpoint is asked
        for, at the next step boundary or at once while paused; the path answers the request.
        Returning None leaves the request to the loop (``Control.checkpoint``, then ``checkpoint_saved``)."""
        self._helm.saver = save

    def adapt(self, values: Mapping[str, Any], tunable: Mapping[str, Mapping[str, Any] | None]) -> None:
        """For framework adapters (the Hugging Face callback): ``values`` are settings of the training
        code, added to the config where it has none; afterwards only the keys in ``tunable`` (and those
        an ``on_change(keys=...)`` callback declared) stay tunable, with bounds the user declared kept.
        The agent hears of it at once, so it refuses other keys before they reach the trainer."""
        added = check_config({k: v for k, v in values.items() if k not in self._config})
        handled = self._helm.handled()  # None: a callback of the user's takes every key
        keep = set(tunable) | (set(self._helm.schema) if handled is None else handled)
        schema = {k: spec for k, spec in self._helm.schema.items() if k in keep}
        fresh = {k: tunable[k] for k in tunable if k in added and k not in schema}
        schema.update(build_schema({**self._config, **added}, fresh) if fresh else {})
        hello = {**self._outbox.hello, "config": {**self._config, **added}, "schema": schema}
        _check_hello(hello)
        self._config.update(added)
        self._helm.schema = schema
        self._outbox.rehello({**hello, "config": self._config})  # the live config: a later hello says what is set

    def checkpoint_saved(self, path: str, step: int | None = None) -> None:
        """Answer a checkpoint request (or record a checkpoint the loop took by itself)."""
        self._helm.saved(str(path), self._sync_step(step))

    @property
    def paused(self) -> bool:
        return self._helm.paused

    @property
    def step(self) -> int:
        """The last step logged or synced (0 before any)."""
        return max(self._step, 0)

    def _record_checkpoint(self, path: str, step: int) -> None:
        self._queue.append((REC_CHECKPOINT, None, (step, time.time(), path)))
        self._records += 1

    def _sync_step(self, step: Any) -> int:
        return max(self._step, 0) if step is None else self._next_step(step, advance=False)

    def flush(self, timeout: float = 10.0) -> bool:
        """Wait until the agent acknowledged everything logged so far."""
        return self._outbox.flush(timeout, self._records)

    def finish(self, timeout: float = 10.0, error: str | None = None) -> bool:
        """Deliver what is buffered and mark the run finished (``error``: crashed, and why); False if
        the agent did not confirm."""
        with self._lock:
            if self._closed:
                return True
            self._closed = True
        if error is not None:
            self._outbox.error = error[:MAX_ERROR_CHARS]
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

    def __enter__(self) -> Self:
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

    def _check_keys(self, names: tuple) -> tuple[tuple[str, ...], Any]:
        wire_names = tuple(normal_name(key, "metric name") for key in names)
        if len(set(wire_names)) != len(wire_names):
            raise ValueError(f"metric names {sorted(names)!r:.200} name one metric twice once normalized (NFC)")
        added = [name for name in wire_names if name not in self._metric_names]
        if len(self._metric_names) + len(added) > MAX_METRICS_PER_RUN:
            raise ValueError(f"run {self.id} would have {len(self._metric_names) + len(added)} distinct metrics; "
                             f"the limit is {MAX_METRICS_PER_RUN} (log per-sample values as rollouts, not as "
                             "metric names)")
        self._metric_names.update(added)
        known = self._known[names] = (wire_names, metrics_packer(len(wire_names)))
        return known


def _check_hello(hello: dict) -> None:
    """At init and whenever an adapter adds settings: the agent refuses a larger hello."""
    if len(pack(message("hello", **hello))) > MAX_HELLO_BYTES:
        raise ValueError(f"config, tunable schema and alert rules take more than {MAX_HELLO_BYTES} bytes "
                         "packed; keep large values (datasets, prompts) out of the config")


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
    if isinstance(value, SCALARS) or not hasattr(value, "__float__"):
        return value
    return _number(key, value)  # numpy and torch scalars


def _job_nodes(broadcaster: Broadcaster | None, rank: int, url: str) -> list[dict] | None:
    """The job's (host, agent) pairs with their ranks, gathered over torch.distributed; in a Ray job the
    cluster's agents (``pilothouse.ray``); None for a single process."""
    if broadcaster is not None:
        return group_ranks(broadcaster.gather([socket.gethostname(), url, rank]))
    if "ray" not in sys.modules:
        return None
    from pilothouse.ray import cluster_nodes

    return cluster_nodes()


def _ray_node_agent() -> str | None:
    """In a Ray driver or actor, the agent ``pilothouse.ray.start_agents`` put on this node."""
    if "ray" not in sys.modules:
        return None
    from pilothouse.ray import agent_here

    return agent_here()


def _new_id() -> str:
    alphabet = "0123456789abcdefghijklmnopqrstuvwxyz"
    return "".join(secrets.choice(alphabet) for _ in range(8))


_CRASHES: list[str] = []  # the uncaught exception the process is exiting with, if any
_previous_excepthook = sys.excepthook


def _note_crash(kind: type[BaseException], exc: BaseException, tb: Any) -> None:
    """Python calls this for an uncaught exception, before the atexit handlers: runs still open then
    end "crashed" with the error, not "finished" (which would hide a crash from on-call)."""
    _CRASHES.append(f"{kind.__name__}: {exc}")
    _previous_excepthook(kind, exc, tb)


sys.excepthook = _note_crash


@atexit.register
def _finish_open_runs() -> None:
    error = _CRASHES[-1] if _CRASHES else None
    for run in list(_OPEN_RUNS):
        run.finish(timeout=5.0, error=error)
