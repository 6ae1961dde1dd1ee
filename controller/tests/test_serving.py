"""The controller's lock remembers its longest hold since start and since the current phase started, so a
benchmark's quiet and loaded phases each read their own longest hold (ws.v1 `counters-phase`, `counters`)."""

from __future__ import annotations

import time

from homework_controller.api.server import TimedLock


def hold(lock: TimedLock, seconds: float) -> None:
    with lock:
        time.sleep(seconds)


def phase(lock: TimedLock, seconds: float) -> tuple[float, str]:
    """A phase that holds the lock a few times, the longest for `seconds`: its longest hold and who held it."""
    with lock:
        lock.start_phase()
    for s in (seconds / 4, seconds, seconds / 2):
        hold(lock, s)
    return lock.phase_max_hold_s, lock.phase_max_hold_by


def test_each_phase_reads_its_own_longest_hold_not_the_longest_so_far():
    lock = TimedLock()
    quiet, loaded, quiet_again = phase(lock, 0.002), phase(lock, 0.03), phase(lock, 0.002)
    assert 0.002 <= quiet[0] < loaded[0] and 0.03 <= loaded[0] < 1
    assert 0.002 <= quiet_again[0] < loaded[0]  # the loaded phase's hold does not leak into the next phase
    assert quiet_again[1].startswith("MainThread in hold, ")  # which thread, and the function whose `with` held it
    assert lock.max_hold_s == loaded[0]  # the longest since start is the loaded one


def test_a_phase_starts_when_it_is_asked_to_and_counts_every_hold_even_short_ones():
    lock = TimedLock()
    hold(lock, 0.01)
    before = time.monotonic()
    with lock:
        started = lock.start_phase()
    assert before <= started == lock.phase_started <= time.monotonic()
    hold(lock, 0.0)  # a hold of microseconds: counted, not left out as too short to remember
    assert 0 < lock.phase_max_hold_s < 0.01 <= lock.max_hold_s


def work(lock: TimedLock, seconds: float) -> None:
    with lock:
        until = time.thread_time() + seconds
        while time.thread_time() < until:
            pass


def on_cpu_ms(held_by: str) -> float:
    return float(held_by.split(", ")[1].removesuffix(" ms on a CPU"))


def test_the_longest_hold_says_how_much_of_it_the_holder_spent_on_a_cpu_so_waiting_is_told_from_work():
    waiting, working = TimedLock(), TimedLock()
    hold(waiting, 0.05)  # off the CPU the whole hold, as a holder waiting for a core or the GIL is
    work(working, 0.05)
    assert waiting.max_hold_s >= 0.05 and on_cpu_ms(waiting.max_hold_by) < 10
    assert working.max_hold_s >= 0.05 and on_cpu_ms(working.max_hold_by) >= 45
