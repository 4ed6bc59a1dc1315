"""Waiting in tests for something to happen: poll the condition itself, with a deadline, never a fixed sleep.

A fixed ``time.sleep`` guesses how long the other side takes: too short on a loaded machine (a flaky
test), too long everywhere else. :func:`wait_for` returns as soon as the condition holds and fails,
naming what it waited for, when it does not hold within the deadline.
"""

from __future__ import annotations

import time


def wait_for(predicate, timeout: float, what: str, interval: float = 0.02):
    """Poll ``predicate()`` until it is true; its value. AssertionError naming ``what`` after ``timeout`` seconds.

    The condition is checked once more at the deadline, so a slow poll never fails a condition that holds.
    """
    end = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() >= end:
            value = predicate()
            if value:
                return value
            raise AssertionError(f"timed out after {timeout:g} s waiting for {what}")
        time.sleep(interval)
