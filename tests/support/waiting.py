"""Waiting for what other processes and threads do: ``wait_until`` polls a condition to a deadline
and fails the test, naming what it waited for, when the condition never comes true."""

from __future__ import annotations

import time


def wait_until(predicate, timeout: float = 10.0, interval: float = 0.05, what: str = "condition"):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(interval)
    raise AssertionError(f"timed out after {timeout} s waiting for {what}")
