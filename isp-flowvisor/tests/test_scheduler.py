"""The round robin that decides whose messages are served next: shares, order and cost, without sockets."""

from __future__ import annotations

import pytest

from isp_flowvisor.scheduler import RoundRobin, max_min_fair


def simulate(offered: list[float], capacity: int, ticks: int, quantum: int = 32) -> list[int]:
    """Households send `offered[i]` messages per tick (open loop); the relay serves `capacity` per tick,
    in the rotation's order and allowances. Returns the messages each household got served."""
    rotation: RoundRobin[int] = RoundRobin(quantum)
    queued = [0] * len(offered)
    owed = [0.0] * len(offered)
    served = [0] * len(offered)
    budget = 0
    for _ in range(ticks):
        for i, rate in enumerate(offered):
            owed[i] += rate
            arrived = int(owed[i])
            owed[i] -= arrived
            if arrived and not queued[i]:
                rotation.wake(i)
            queued[i] += arrived
        budget += capacity  # a turn is never cut short: one that overruns the tick borrows from the next
        while budget > 0:
            i = rotation.next()
            if i is None:
                budget = 0  # idle time is not saved up
                break
            n = rotation.allowance(queued[i], allowed=queued[i])
            queued[i] -= n
            served[i] += n
            budget -= n
            if queued[i]:
                rotation.wake(i)
    return served


def test_skewed_load_gets_every_household_within_5_percent_of_its_max_min_share():
    # The bench's load: 100 households, Zipf demand, twice what the relay can serve.
    weights = [1 / (i + 1) for i in range(100)]
    capacity = 1000
    offered = [2 * capacity * w / sum(weights) for w in weights]
    ticks = 2000
    served = [s / ticks for s in simulate(offered, capacity, ticks)]
    fair = max_min_fair(offered, capacity)
    ratios = [s / f for s, f in zip(served, fair, strict=True)]
    assert all(abs(r - 1) <= 0.05 for r in ratios), [round(r, 3) for r in ratios]
    # The light households got what they asked for, the heavy ones no more than the light ones' leftovers.
    assert served[-1] == pytest.approx(offered[-1], rel=0.05)
    assert served[0] < offered[0] / 2 and served[0] == pytest.approx(served[1], rel=0.05)


def test_a_household_below_its_share_is_never_held_back_by_flooding_neighbours():
    served = simulate([500.0, 500.0, 3.0], capacity=100, ticks=1000)
    assert served[2] == pytest.approx(3 * 1000, rel=0.01)  # all it sent
    assert served[0] == pytest.approx(served[1], rel=0.02)  # the two floods split the rest
    assert served[0] + served[1] + served[2] == pytest.approx(100 * 1000, abs=32)


def test_turns_follow_when_work_came_not_when_a_household_connected():
    rotation: RoundRobin[str] = RoundRobin(8)
    rotation.wake("late")
    rotation.wake("early")
    rotation.wake("late")  # already waiting: keeps its place
    assert [rotation.next(), rotation.next(), rotation.next()] == ["late", "early", None]


def test_only_households_with_work_are_in_the_rotation():
    rotation: RoundRobin[int] = RoundRobin(8)
    rotation.wake(7)
    assert len(rotation) == 1  # the other 999 connected households cost a turn nothing
    assert rotation.next() == 7 and len(rotation) == 0


@pytest.mark.parametrize("queued, allowed, expected", [(100, 1000, 8), (3, 1000, 3), (100, 5, 5), (100, 0, 0)])
def test_a_turn_serves_at_most_the_quantum_the_queue_and_the_rate_limit(queued, allowed, expected):
    assert RoundRobin(8).allowance(queued, allowed) == expected


def test_max_min_fair_gives_small_demands_in_full_and_splits_the_rest():
    assert max_min_fair([1, 10, 10], 11) == [1, 5, 5]
    assert max_min_fair([1, 2], 10) == [1, 2]
