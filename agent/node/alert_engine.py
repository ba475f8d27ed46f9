"""The alert engine: rule conditions evaluated on each incoming chunk, as episodes.

Pure state and numpy, no I/O: the agent feeds it every metric chunk it stores (and its
liveness view once a second) and acts on the transitions it returns.  A condition is an
array over the chunk's points; only its edges matter, so a rule fires once when its
episode starts and clears once when it ends, however many points keep it true.
"""

from __future__ import annotations

import fnmatch
import math
import time
from dataclasses import dataclass, field

import numpy as np

from pilothouse.wire.alert_rules import Rule

RuleKey = tuple[str, str, str]  # (source, scope: a run id or "" for every run, name)
METRIC_KINDS = ("nonfinite", "above", "below", "drop")


@dataclass
class Alert:
    """One edge of an episode: a rule started firing, or stopped."""

    key: RuleKey
    rule: Rule
    run: str
    metric: str | None
    state: str  # firing | cleared
    step: int | None
    value: float | None
    detail: str
    time: float = field(default_factory=time.time)

    def body(self) -> dict:
        return {"event": "alert", "time": self.time, "rule": self.rule.name, "kind": self.rule.kind,
                "state": self.state, "metric": self.metric, "step": self.step, "value": self.value,
                "detail": self.detail, "source": self.key[0], "actions": self.actions()}

    def actions(self) -> list[str]:
        if self.state != "firing":
            return ["exec"] if self.rule.exec else []
        return [a for a, on in (("pause", self.rule.pause), ("exec", bool(self.rule.exec))) if on]


@dataclass
class _State:
    firing: bool = False
    count: int = 0  # above/below: consecutive points so far
    tail: np.ndarray | None = None  # drop: the last window-1 values
    since: float | None = None  # gpu_idle: when the GPU went idle
    ref: float = 0.0  # drop: the best the metric fell from
    last: Alert | None = None  # the edge that set ``firing``


@dataclass(frozen=True)
class RunView:
    """What the engine needs of a run for liveness and GPU rules."""

    id: str
    name: str
    status: str
    silent: float


class AlertEngine:
    def __init__(self) -> None:
        self._rules: dict[RuleKey, Rule] = {}
        self._states: dict[tuple[RuleKey, str, str | None], _State] = {}
        self._matches: dict[tuple[str, str], list[tuple[RuleKey, Rule]]] = {}
        self._gpu_idle: dict[tuple[RuleKey, str], _State] = {}  # (rule, gpu metric) -> since when idle

    # --- rules -------------------------------------------------------------------------------

    def rules(self) -> list[tuple[RuleKey, Rule]]:
        return sorted(self._rules.items(), key=lambda kv: kv[0])

    def replace(self, source: str, scope: str, rules: list[Rule]) -> None:
        """All rules of one source and scope at once (a reloaded file, a trainer's hello)."""
        for key in [k for k in self._rules if k[:2] == (source, scope)]:
            self._drop(key)
        for rule in rules:
            self._rules[(source, scope, rule.name)] = rule
        self._matches.clear()

    def add(self, source: str, scope: str, rule: Rule) -> None:
        key = (source, scope, rule.name)
        if key in self._rules:
            self._drop(key)
        self._rules[key] = rule
        self._matches.clear()

    def remove(self, source: str, scope: str, name: str) -> bool:
        key = (source, scope, name)
        if key not in self._rules:
            return False
        self._drop(key)
        self._matches.clear()
        return True

    def _drop(self, key: RuleKey) -> None:
        del self._rules[key]
        for state_key in [k for k in self._states if k[0] == key]:
            del self._states[state_key]
        for idle_key in [k for k in self._gpu_idle if k[0] == key]:
            del self._gpu_idle[idle_key]

    def forget(self, run: str) -> None:
        """A removed run: its own rules and every episode on it go."""
        for key in [k for k in self._rules if k[0] != "file" and k[1] == run]:
            self._drop(key)
        for state_key in [k for k in self._states if k[1] == run]:
            del self._states[state_key]
        self._matches.clear()

    def firing(self) -> list[Alert]:
        """The alert that started each episode still going on."""
        return [s.last for s in self._states.values() if s.firing and s.last is not None]

    def carry(self, alert: Alert) -> float | None:
        """What an episode needs to go on after a restart: a drop's reference best."""
        state = self._states.get((alert.key, alert.run, alert.metric))
        return state.ref if state is not None and alert.rule.kind == "drop" else None

    def restore(self, alert: Alert, ref: float | None) -> bool:
        """Resume an episode that was firing when the agent stopped (metric rules only: liveness
        and GPU rules start over with the agent's fresh view), so a restart does not page twice."""
        if self._rules.get(alert.key) is not alert.rule or alert.rule.kind not in METRIC_KINDS:
            return False
        state = self._states.setdefault((alert.key, alert.run, alert.metric), _State())
        state.firing, state.count, state.ref = True, alert.rule.for_steps, ref if ref is not None else 0.0
        state.last = alert
        return True

    def _remember(self, edges: list[Alert]) -> list[Alert]:
        for alert in edges:
            self._states[(alert.key, alert.run, alert.metric)].last = alert
        return edges

    # --- metrics -----------------------------------------------------------------------------

    def watches(self, run: str, name: str, metric: str) -> bool:
        """Whether a rule looks at this metric of this run (most chunks have none: not decoded)."""
        return bool(self._matching(run, name, metric))

    def _matching(self, run: str, name: str, metric: str) -> list[tuple[RuleKey, Rule]]:
        matches = self._matches.get((run, metric))
        if matches is None:
            matches = self._matches[(run, metric)] = [
                (key, rule) for key, rule in self._rules.items()
                if rule.kind in METRIC_KINDS and _applies(key, rule, run, name)
                and fnmatch.fnmatchcase(metric, rule.metric or "*")]
        return matches

    def observe(self, run: str, name: str, metric: str, steps: np.ndarray, vals: np.ndarray) -> list[Alert]:
        """One stored chunk of one metric: the edges it makes, in order."""
        out: list[Alert] = []
        for key, rule in self._matching(run, name, metric):
            state = self._states.get((key, run, metric))
            if state is None:
                state = self._states[(key, run, metric)] = _State()
            cond, best = _condition(rule, state, vals)
            for i, on in _edges(state.firing, cond):
                out.append(Alert(key, rule, run, metric, "firing" if on else "cleared", int(steps[i]),
                                 float(vals[i]), _metric_detail(rule, metric, int(steps[i]), float(vals[i]),
                                                                on, None if best is None else float(best[i]))))
            state.firing = bool(cond[-1]) if len(cond) else state.firing
        return self._remember(out)

    # --- liveness and GPUs -------------------------------------------------------------------------

    def tick(self, runs: list[RunView]) -> list[Alert]:
        """Stale or crashed runs, from the agent's liveness view (called once a second)."""
        out = []
        for key, rule in self._rules.items():
            if rule.kind != "stale":
                continue
            for run in runs:
                if not _applies(key, rule, run.id, run.name):
                    continue
                on = run.status in ("running", "stale", "crashed") and run.silent >= (rule.seconds or 0)
                state = self._states.setdefault((key, run.id, None), _State())
                if on != state.firing:
                    state.firing = on
                    gone = "; its process is gone (crashed)" if run.status == "crashed" else ""
                    detail = (f"no heartbeat for {run.silent:.1f} s{gone}" if on
                              else f"heartbeats again, the run is {run.status}")
                    out.append(Alert(key, rule, run.id, None, "firing" if on else "cleared", None, None, detail))
        return self._remember(out)

    def observe_gpus(self, sample: dict[str, float], now: float, running: list[RunView]) -> list[Alert]:
        """One host sample: a GPU under ``util`` % for ``seconds`` while a job runs here fires on each
        such job; it clears when the GPU works again or the job stops running."""
        out = []
        for key, rule in self._rules.items():
            if rule.kind != "gpu_idle":
                continue
            for metric, util in sample.items():
                if not (metric.startswith("gpu") and metric.endswith("/util")):
                    continue
                idle = self._gpu_idle.setdefault((key, metric), _State())
                idle.since = (idle.since or now) if util < (rule.util or 0) else None
                idle_for = 0.0 if idle.since is None else now - idle.since
                jobs = {r.id: r for r in running if _applies(key, rule, r.id, r.name)}
                watched = set(jobs) | {k[1] for k, s in self._states.items() if k[0] == key and k[2] == metric}
                for run in sorted(watched):
                    on = run in jobs and idle_for >= (rule.seconds or 0)
                    state = self._states.setdefault((key, run, metric), _State())
                    if on != state.firing:
                        state.firing = on
                        detail = (f"{metric} below {rule.util:g}% for {idle_for:.0f} s while the run is running"
                                  if on else f"{metric} at {util:g}% or the run stopped running")
                        out.append(Alert(key, rule, run, metric, "firing" if on else "cleared", None, util, detail))
        return self._remember(out)


def _applies(key: RuleKey, rule: Rule, run: str, name: str) -> bool:
    if key[1] and key[1] != run:
        return False
    return rule.runs == "*" or fnmatch.fnmatchcase(name, rule.runs) or fnmatch.fnmatchcase(run, rule.runs)


def _condition(rule: Rule, state: _State, vals: np.ndarray) -> tuple[np.ndarray, np.ndarray | None]:
    """The rule's condition at each point of the chunk, carrying what it needs across chunks."""
    if rule.kind == "nonfinite":
        return ~np.isfinite(vals), None
    if rule.kind in ("above", "below"):
        raw = vals > rule.threshold if rule.kind == "above" else vals < rule.threshold
        if not raw.any():  # the common case, made cheap: nothing past the threshold
            state.count = 0
            return raw, None
        idx = np.arange(len(raw))
        last_off = np.maximum.accumulate(np.where(raw, -1, idx))
        count = idx - last_off + np.where(last_off < 0, state.count, 0)
        state.count = int(count[-1]) if len(count) else state.count
        return count >= rule.for_steps, None
    # drop: below the best of the last `window` values by more than pct %
    tail = state.tail if state.tail is not None else np.empty(0)
    best = window_best(tail, vals, rule.window)
    state.tail = np.concatenate([tail, vals])[-(rule.window - 1):]
    frac = rule.pct / 100.0
    with np.errstate(invalid="ignore"):
        dropped = np.isfinite(best) & (vals < best - np.abs(best) * frac)
    return _hold_drop(state, vals, best, dropped, frac), best


def _hold_drop(state: _State, vals: np.ndarray, best: np.ndarray, dropped: np.ndarray, frac: float) -> np.ndarray:
    """Once fired, a drop is measured against the best it fell from, not a window that forgets it:
    a collapse that lasts longer than the window stays one episode until the metric recovers."""
    n = len(vals)
    cond = np.zeros(n, dtype=bool)
    i, firing, ref = 0, state.firing, state.ref
    for _ in range(8):  # at most a few edges per chunk matter (see _edges); beyond that, the window decides
        if i >= n:
            break
        if firing:
            with np.errstate(invalid="ignore"):
                back = np.flatnonzero(vals[i:] >= ref - abs(ref) * frac)
            j = i + int(back[0]) if len(back) else n
            cond[i:j] = True
            firing, i = j >= n, j
        else:
            hit = np.flatnonzero(dropped[i:])
            j = i + int(hit[0]) if len(hit) else n
            if j < n:
                cond[j], firing, ref = True, True, float(best[j])
            i = j + 1
    else:
        cond[i:] = dropped[i:]
    state.ref = ref
    return cond


def window_best(tail: np.ndarray, vals: np.ndarray, window: int) -> np.ndarray:
    """The best of the last ``window`` values at each point of ``vals``, ``tail`` being the values
    before it.  A chunk shorter than the window needs only two running maxima, not a rescan."""
    n, t = len(vals), len(tail)
    if n >= window or n == 0:
        return sliding_max(np.concatenate([tail, vals]), window)[t:]
    clean = np.where(np.isnan(vals), -np.inf, vals)
    prefix = np.maximum.accumulate(clean)
    tail_clean = np.where(np.isnan(tail), -np.inf, tail)
    suffix = np.maximum.accumulate(tail_clean[::-1])[::-1] if t else np.empty(0)
    start = t + np.arange(n) - window + 1  # where each point's window begins in the tail
    from_tail = np.full(n, -np.inf)
    inside = start < t
    if t:
        from_tail[inside] = suffix[np.maximum(start[inside], 0)]
    return np.maximum(from_tail, prefix)


def sliding_max(x: np.ndarray, window: int) -> np.ndarray:
    """max(x[i-window+1 .. i]) for each i, NaN ignored, in O(n) (van Herk / Gil-Werman)."""
    n = len(x)
    if n == 0:
        return x.astype(np.float64)
    clean = np.where(np.isnan(x), -np.inf, x).astype(np.float64)
    pad = (-n) % window
    blocks = np.concatenate([clean, np.full(pad, -np.inf)]).reshape(-1, window)
    prefix = np.maximum.accumulate(blocks, axis=1).ravel()
    suffix = np.maximum.accumulate(blocks[:, ::-1], axis=1)[:, ::-1].ravel()
    i = np.arange(n)
    start = i - window + 1
    from_start = np.maximum.accumulate(clean)
    return np.where(start >= 0, np.maximum(suffix[np.maximum(start, 0)], prefix[i]), from_start)


def _edges(firing: bool, cond: np.ndarray) -> list[tuple[int, bool]]:
    """Where the condition turns on or off; at most the first edge and, if the chunk ends the
    other way, the last, so a flapping metric cannot flood the log within one chunk."""
    if not len(cond) or (cond.all() if firing else not cond.any()):  # no edge: the usual case, cheap
        return []
    flips = np.flatnonzero(np.diff(np.concatenate(([firing], cond)).astype(np.int8)))
    if not len(flips):
        return []
    first, last = int(flips[0]), int(flips[-1])
    edges = [(first, bool(cond[first]))]
    if bool(cond[last]) != bool(cond[first]):
        edges.append((last, bool(cond[last])))
    return edges


def _metric_detail(rule: Rule, metric: str, step: int, value: float, on: bool, best: float | None) -> str:
    shown = f"{value:.6g}"
    if not on:
        return f"{metric} back to {shown} at step {step}"
    if rule.kind == "nonfinite":
        return f"{metric} is {shown} at step {step}"
    if rule.kind in ("above", "below"):
        steps = "" if rule.for_steps == 1 else f" for {rule.for_steps} consecutive steps"
        return f"{metric} {shown} {rule.kind} {rule.threshold:g}{steps} at step {step}"
    drop = (best - value) / abs(best) * 100 if best not in (None, 0.0) and math.isfinite(best or 0) else math.inf
    return (f"{metric} {shown} is {drop:.0f}% below its best {best:.6g} over the last {rule.window} steps "
            f"at step {step}")
