"""Alert hooks: a rule's local command, run off the agent's loop with the alert as JSON on stdin.

This is how people wire in their own pager or chat.  Hooks run one at a time on a thread of
their own, each in its own process group so a timeout kills the whole command; the queue is
bounded, so a hook that hangs costs alerts their hook, never the agent its memory or its loop.
"""

from __future__ import annotations

import json
import logging
import math
import os
import queue
import signal
import subprocess
import threading
from collections import deque
from dataclasses import dataclass

log = logging.getLogger("pilothouse.hooks")

QUEUE_LIMIT = 100


@dataclass
class HookResult:
    run: str
    rule: str
    argv: tuple[str, ...]
    returncode: int | None
    timed_out: bool
    error: str  # why it could not start, or the tail of its stderr

    def body(self) -> dict:
        return {"rule": self.rule, "argv": list(self.argv), "returncode": self.returncode,
                "timed_out": self.timed_out, "error": self.error}


class HookRunner:
    def __init__(self) -> None:
        self._jobs: queue.Queue = queue.Queue(QUEUE_LIMIT)
        self.results: deque[HookResult] = deque(maxlen=1000)  # taken by the agent loop into events
        self._thread = threading.Thread(target=self._work, name="alert-hooks", daemon=True)
        self._thread.start()

    def submit(self, run: str, rule: str, argv: tuple[str, ...], alert: dict, timeout: float) -> bool:
        try:
            self._jobs.put_nowait((run, rule, argv, json.dumps(_jsonable(alert), default=str), timeout))
            return True
        except queue.Full:
            self.results.append(HookResult(run, rule, argv, None, False,
                                           f"skipped: {QUEUE_LIMIT} hooks already waiting"))
            return False

    def stop(self) -> None:
        self._jobs.put(None)
        self._thread.join(timeout=5)

    def _work(self) -> None:
        while True:
            job = self._jobs.get()
            if job is None:
                return
            self.results.append(run_hook(*job))


def _jsonable(alert: dict) -> dict:
    """Strict JSON for any reader: a NaN or Inf value is written as the string "nan", "inf", "-inf"."""
    return {k: repr(v) if isinstance(v, float) and not math.isfinite(v) else v for k, v in alert.items()}


def run_hook(run: str, rule: str, argv: tuple[str, ...], payload: str, timeout: float) -> HookResult:
    try:
        proc = subprocess.Popen(list(argv), stdin=subprocess.PIPE, stdout=subprocess.DEVNULL,
                                stderr=subprocess.PIPE, start_new_session=True)
    except OSError as exc:
        log.warning("alert hook %s for %s could not start: %s", argv[0], rule, exc)
        return HookResult(run, rule, argv, None, False, f"could not start: {exc.strerror or exc}")
    try:
        _, err = proc.communicate(payload.encode(), timeout=timeout)
        timed_out = False
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        _, err = proc.communicate()
        timed_out = True
        log.warning("alert hook %s for %s killed after %g s", argv[0], rule, timeout)
    tail = err.decode("utf-8", "replace")[-500:].strip()
    if proc.returncode and not timed_out:
        log.warning("alert hook %s for %s exited %s: %s", argv[0], rule, proc.returncode, tail)
    return HookResult(run, rule, argv, proc.returncode, timed_out, tail)
