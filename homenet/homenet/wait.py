"""Waiting for a condition: the one way every test, bench and homenet itself waits."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")


class WaitTimeout(AssertionError):
    """A condition did not hold in time (an AssertionError, so a test reports it as a failure)."""


def wait_until(
    what: str, predicate: Callable[[], T], timeout: float, interval: float = 0.1, hint: Callable[[], str] | None = None
) -> T:
    """Call `predicate` until it returns something truthy and return that; raise WaitTimeout at the deadline.

    The deadline is on the monotonic clock. Exceptions from `predicate` propagate: a condition
    that cannot be checked is a failure, not a "not yet".
    """
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() >= deadline:
            detail = f"\n{hint()}" if hint else ""
            raise WaitTimeout(f"timed out after {timeout:g}s waiting for {what} (last: {value!r}){detail}")
        time.sleep(interval)
