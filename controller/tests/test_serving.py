"""The controller's lock remembers its long holds with when they ended, so a phase's longest can be read."""

from __future__ import annotations

import time

from homework_controller.serving import TimedLock


def test_a_long_hold_is_remembered_with_when_it_ended_and_a_short_one_is_not():
    lock = TimedLock()
    with lock:
        pass  # a short hold: well under a millisecond
    assert list(lock.long_holds) == []
    before = time.monotonic()
    with lock:
        time.sleep(0.005)
    [(ended, held, by)] = list(lock.long_holds)
    assert ended >= before and 0.005 <= held < 1
    assert by == "test_a_long_hold_is_remembered_with_when_it_ended_and_a_short_one_is_not"  # who held it
    assert lock.max_hold_s == held  # the longest since start too


def test_only_the_last_long_holds_are_kept():
    lock = TimedLock()
    lock.LONG_HOLD_S = 0.0  # every hold counts as long here
    for _ in range(TimedLock.LONG_HOLDS + 10):
        with lock:
            pass
    assert len(lock.long_holds) == TimedLock.LONG_HOLDS
    ends = [ended for ended, _, _ in lock.long_holds]
    assert ends == sorted(ends)
