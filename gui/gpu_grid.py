"""Every GPU of every followed node at once: the latest readings, a bounded history per GPU, and
what stands out (idle, hot, missing, memory nearly full), in plain Python.

Why a model of its own: a 64-node job has 512 GPUs; the System tab draws them as one grid
(``gui._qt.gpu_grid``) from this model, which is tested without a display.  Readings are the
agents' sampler metrics of their ``sys-HOST`` runs (``gpu3/util``, ``gpu3/temp_c``...).

What stands out, and why so:

- **missing**: nothing heard from a GPU for ``missing_after`` seconds (its node went away, or the
  GPU fell off the bus and NVML stopped answering for it).  A GPU once seen stays in the grid, so a
  node that comes back with fewer GPUs shows the gone ones as missing.  "Heard" is the app's clock
  when a reading arrived (``add(..., heard=)``), so a node whose clock is off is not called missing.
- **idle**: a job runs on the node (``set_busy``) and the GPU's utilization has stayed under
  ``idle_util`` for ``idle_after`` seconds of its own readings (a dip between steps is not idle).
- **hot**: the last temperature is at or over ``hot_temp``, or the GPU throttles its clocks
  (thermal or power-brake slowdown, the sampler's ``throttle`` reading).
- **memory**: memory used is at least ``mem_full`` of the total.

NaN or ±Inf readings are kept and shown as such, and never make a GPU idle or hot.
"""

from __future__ import annotations

import math
import re
import time
from collections.abc import Iterable
from dataclasses import dataclass, field

import numpy as np

from pilothouse.wire.checks import SYSTEM_RUN_PREFIX

NodeKey = tuple[str, str]  # (agent URL, its system run id)

# The sampler's per-GPU readings (``agent/node/sampler.py``).
UTIL, MEM_USED, MEM_TOTAL, POWER, TEMP, THROTTLE = ("util", "mem_used_gb", "mem_total_gb", "power_w", "temp_c",
                                                    "throttle")
READINGS = (UTIL, MEM_USED, MEM_TOTAL, POWER, TEMP, THROTTLE)

# What a cell can be colored by: the reading, or memory as a percentage of the total.
UTILIZATION, MEMORY, POWER_DRAW, TEMPERATURE = "utilization", "memory", "power", "temperature"
SHOWN = (UTILIZATION, MEMORY, POWER_DRAW, TEMPERATURE)

IDLE, HOT, MISSING, MEM_FULL = "idle", "hot", "missing", "memory full"

_MISSING_BIT, _HOT_BIT, _FULL_BIT, _IDLE_BIT = 1, 2, 4, 8
_FLAG_SETS = [frozenset(f for bit, f in ((1, MISSING), (2, HOT), (4, MEM_FULL), (8, IDLE)) if bits & bit)
              for bits in range(16)]

MAX_GPUS = 64  # per node: a malformed metric name cannot make a row of a million cells
_GPU_METRIC = re.compile(r"gpu(\d{1,3})/(\w+)")


@dataclass(frozen=True)
class Thresholds:
    idle_util: float = 5.0  # % utilization under which a GPU of a busy node counts as idle
    idle_after: float = 10.0  # seconds of such readings before it is called idle
    hot_temp: float = 85.0  # °C
    mem_full: float = 0.95  # fraction of memory used
    missing_after: float = 5.0  # seconds without a reading

    def __post_init__(self) -> None:
        for name, value in vars(self).items():
            if not math.isfinite(value) or value < 0:
                raise ValueError(f"threshold {name} must be a finite number >= 0, got {value!r}")


class Ring:
    """The last ``capacity`` (time, value) pairs of one reading, in numpy arrays."""

    def __init__(self, capacity: int) -> None:
        self.t = np.empty(capacity)
        self.v = np.empty(capacity)
        self.n = 0  # pairs held
        self.end = 0  # where the next pair goes

    def extend(self, times: np.ndarray, vals: np.ndarray) -> None:
        cap = len(self.t)
        times, vals = times[-cap:], vals[-cap:]
        idx = (self.end + np.arange(len(times))) % cap
        self.t[idx], self.v[idx] = times, vals
        self.end = (self.end + len(times)) % cap
        self.n = min(cap, self.n + len(times))

    def last(self) -> float:
        return float(self.v[self.end - 1]) if self.n else math.nan

    def arrays(self) -> tuple[np.ndarray, np.ndarray]:
        """(times, values), oldest first (copies)."""
        idx = (self.end - self.n + np.arange(self.n)) % len(self.t)
        return self.t[idx], self.v[idx]


@dataclass
class _Gpu:
    rings: dict[str, Ring] = field(default_factory=dict)
    latest: dict[str, float] = field(default_factory=lambda: dict.fromkeys(READINGS, math.nan))
    heard: float = -math.inf
    low_since: float | None = None  # sample time of the first reading of the current low-utilization streak
    last_util_t: float = -math.inf
    cell: Cell | None = None  # as last shown; made again on a new reading or when its flags change


@dataclass
class _Node:
    host: str
    gpus: dict[int, _Gpu] = field(default_factory=dict)


@dataclass(frozen=True)
class Cell:
    """One GPU as the grid shows it: its latest readings and what stands out."""

    node: NodeKey
    host: str
    gpu: int
    readings: dict[str, float]  # reading -> latest value (NaN where none came yet)
    flags: frozenset[str]
    heard: float  # when its last reading arrived

    def value(self, shown: str) -> float:
        """The number a cell is colored by: utilization %, memory used %, power W or temperature °C."""
        if shown == MEMORY:
            used, total = self.readings[MEM_USED], self.readings[MEM_TOTAL]
            return 100.0 * used / total if total > 0 else math.nan
        return self.readings[{UTILIZATION: UTIL, POWER_DRAW: POWER, TEMPERATURE: TEMP}[shown]]

    def tooltip(self, now: float | None = None) -> str:
        """The exact values and why the cell stands out, one per line."""
        r = self.readings
        lines = [f"{self.host}  gpu{self.gpu}",
                 f"utilization {_fmt(r[UTIL], '.0f')} %",
                 f"memory {_fmt(r[MEM_USED], '.1f')} / {_fmt(r[MEM_TOTAL], '.1f')} GB "
                 f"({_fmt(self.value(MEMORY), '.0f')} %)",
                 f"power {_fmt(r[POWER], '.0f')} W",
                 f"temperature {_fmt(r[TEMP], '.0f')} °C"]
        if r[THROTTLE] > 0:
            lines.append(f"throttling (reasons 0x{int(r[THROTTLE]):x})")
        lines += [f"⚠ {flag}" for flag in sorted(self.flags)]
        silent = (time.time() if now is None else now) - self.heard
        lines.append(f"last reading {max(0.0, silent):.0f} s ago")
        return "\n".join(lines)


def _fmt(value: float, spec: str) -> str:
    return format(value, spec) if math.isfinite(value) else str(value)  # "nan", "inf": shown as such


def gpu_reading(metric: str) -> tuple[int, str] | None:
    """(GPU index, reading) of a sampler metric such as ``gpu3/temp_c``; None for anything else."""
    match = _GPU_METRIC.fullmatch(metric)
    if match is None or match[2] not in READINGS or int(match[1]) >= MAX_GPUS:
        return None
    return int(match[1]), match[2]


def natural(text: str) -> list:
    """node2 before node10."""
    return [int(part) if part.isdigit() else part for part in re.split(r"(\d+)", text)]


class GpuGrid:
    """The latest readings and a bounded history of every GPU of every node; see the module docstring."""

    def __init__(self, thresholds: Thresholds = Thresholds(), history: int = 600) -> None:
        if history < 1:
            raise ValueError(f"history must hold at least one reading, got {history!r}")
        self.thresholds = thresholds
        self.history = history  # readings kept per GPU and reading: 10 minutes at the agent's 1 Hz
        self._nodes: dict[NodeKey, _Node] = {}
        self._busy: set[str] = set()  # agents with a running job

    def __len__(self) -> int:
        return len(self._nodes)

    def nodes(self) -> list[NodeKey]:
        """Nodes with at least one GPU, ordered by host name (node2 before node10)."""
        shown = [k for k, n in self._nodes.items() if n.gpus]
        return sorted(shown, key=lambda k: (natural(self._nodes[k].host), k))

    def add(self, node: NodeKey, metric: str, times: np.ndarray, vals: np.ndarray, *,
            host: str | None = None, heard: float | None = None) -> bool:
        """Readings of one system metric (a journal entry's points, oldest first); ``heard``: when
        they arrived (default: the newest sample time).  Whether it was a GPU reading."""
        parsed = gpu_reading(metric)
        if parsed is None or not node[1].startswith(SYSTEM_RUN_PREFIX):
            return False
        times = np.asarray(times, dtype=np.float64)
        vals = np.asarray(vals, dtype=np.float64)
        if times.shape != vals.shape or times.ndim != 1:
            raise ValueError(f"{metric}: times and values differ in shape ({times.shape} vs {vals.shape})")
        if not len(times):
            return True
        index, reading = parsed
        entry = self._nodes.get(node)
        if entry is None:
            entry = self._nodes[node] = _Node(host or node[1].removeprefix(SYSTEM_RUN_PREFIX))
        gpu = entry.gpus.get(index)
        if gpu is None:
            gpu = entry.gpus[index] = _Gpu()
        ring = gpu.rings.get(reading)
        if ring is None:
            ring = gpu.rings[reading] = Ring(self.history)
        ring.extend(times, vals)
        gpu.latest[reading] = ring.last()
        gpu.cell = None
        gpu.heard = max(gpu.heard, float(times[-1]) if heard is None else heard)
        if reading == UTIL:
            self._track_low(gpu, times, vals)
        return True

    def _track_low(self, gpu: _Gpu, times: np.ndarray, vals: np.ndarray) -> None:
        """Start (or end) the low-utilization streak; NaN ends it (unknown is not idle)."""
        limit = self.thresholds.idle_util
        for t, v in zip(times.tolist(), vals.tolist()):
            if t < gpu.last_util_t:
                continue  # an older page delivered again
            gpu.last_util_t = t
            if v < limit:  # False for NaN
                gpu.low_since = t if gpu.low_since is None else gpu.low_since
            else:
                gpu.low_since = None

    def set_busy(self, agent: str, busy: bool) -> None:
        """Whether a job runs on this agent's node: only then is a GPU of it called idle."""
        (self._busy.add if busy else self._busy.discard)(agent)

    def note_runs(self, agent: str, runs: Iterable[dict]) -> None:
        """The agent's run list (``Client.runs()``): its node is busy while a training run runs."""
        self.set_busy(agent, any(r.get("kind", "train") == "train" and r.get("status") == "running"
                                 for r in runs))

    def clear(self) -> None:
        self._nodes.clear()
        self._busy.clear()

    def forget(self, agent: str) -> None:
        """Drop an agent's nodes (the agent was removed from the app)."""
        self._nodes = {k: n for k, n in self._nodes.items() if k[0] != agent}
        self._busy.discard(agent)

    def cell(self, node: NodeKey, gpu: int, now: float | None = None) -> Cell:
        """One GPU as shown now (KeyError for one never seen); the same object until it changes, so a
        refresh of 512 GPUs allocates only for those that did."""
        now = time.time() if now is None else now
        entry = self._nodes[node]
        g = entry.gpus[gpu]
        flags = self._flags(node, g, g.latest, now)
        if g.cell is None or g.cell.flags is not flags:
            g.cell = Cell(node, entry.host, gpu, dict(g.latest), flags, g.heard)
        return g.cell

    def rows(self, now: float | None = None) -> list[tuple[NodeKey, str, list[Cell]]]:
        """(node, host, its GPUs by index) for every node with GPUs, as ``nodes()`` orders them."""
        now = time.time() if now is None else now
        return [(key, self._nodes[key].host, [self.cell(key, i, now) for i in sorted(self._nodes[key].gpus)])
                for key in self.nodes()]

    def _flags(self, node: NodeKey, gpu: _Gpu, r: dict[str, float], now: float) -> frozenset[str]:
        """One of the shared ``_FLAG_SETS`` (compared by identity in ``cell``)."""
        limits = self.thresholds
        if now - gpu.heard > limits.missing_after:
            return _FLAG_SETS[_MISSING_BIT]  # its last readings are stale: nothing else is claimed
        # comparisons with NaN are False: an unknown reading raises no flag (an infinite one is no reading)
        hot = math.isfinite(r[TEMP]) and r[TEMP] >= limits.hot_temp or math.isfinite(r[THROTTLE]) and r[THROTTLE] > 0
        full = math.isfinite(r[MEM_USED]) and math.isfinite(r[MEM_TOTAL]) and r[MEM_TOTAL] > 0 \
            and r[MEM_USED] >= limits.mem_full * r[MEM_TOTAL]
        idle = node[0] in self._busy and gpu.low_since is not None \
            and gpu.last_util_t - gpu.low_since >= limits.idle_after
        return _FLAG_SETS[hot * _HOT_BIT | full * _FULL_BIT | idle * _IDLE_BIT]

    def series(self, node: NodeKey, gpu: int, shown: str) -> tuple[np.ndarray, np.ndarray]:
        """(sample times, values) of one GPU's history of a shown metric (memory as % of the total)."""
        rings = self._nodes[node].gpus[gpu].rings
        if shown != MEMORY:
            name = {UTILIZATION: UTIL, POWER_DRAW: POWER, TEMPERATURE: TEMP}[shown]
            return rings[name].arrays() if name in rings else (np.empty(0), np.empty(0))
        if MEM_USED not in rings or MEM_TOTAL not in rings:
            return np.empty(0), np.empty(0)
        t, used = rings[MEM_USED].arrays()
        total_t, total = rings[MEM_TOTAL].arrays()
        # the total read at the same sample, else the latest one before it (readings come in separate entries)
        at = np.clip(np.searchsorted(total_t, t, side="right") - 1, 0, None)
        with np.errstate(divide="ignore", invalid="ignore"):
            return t, np.where(total[at] > 0, 100.0 * used / total[at], np.nan)
