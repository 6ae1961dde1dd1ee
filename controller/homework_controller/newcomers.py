"""Newcomers, the concern: how many devices may wait for a decision, which one makes way for the
next, and telling the household of each new device but of a storm of them (forged MACs) once."""

from __future__ import annotations

import logging
from collections import deque
from collections.abc import Callable

from .effects import TellHousehold
from .model import Device

LOG = logging.getLogger(__name__)

NEWCOMER_STORM, NEWCOMER_STORM_WINDOW_S = 30, 60


class Newcomers:
    def __init__(self, clock: Callable[[], float], max_pending: int = 256):
        self.clock, self.max_pending = clock, max_pending
        self._arrivals: deque[float] = deque()
        self._unannounced: dict[str, str] = {}  # newcomers of a storm, mac -> what to tell once it takes a lease
        self._storm_reported = False

    # -- the lifecycle

    def knows(self, mac: str) -> bool:
        return mac in self._unannounced

    def forget(self, mac: str) -> None:
        self._unannounced.pop(mac, None)

    # -- which device makes way

    def evictee(self, known: int, pending: Callable[[], list[Device]]) -> Device | None:
        """At most max_pending devices wait for a decision; the one silent longest makes way for a
        newcomer. known: how many devices the router knows; pending: those waiting (asked for only
        when the router knows that many at all, not on every DISCOVER).

        A DHCP storm of forged MACs would otherwise take a /30, a meter and two rules per MAC.
        Devices the household has decided about are never evicted."""
        if known < self.max_pending:
            return None
        waiting = pending()
        if len(waiting) < self.max_pending:
            return None
        # One the household has named is one it is looking at: it stays.
        waiting = [d for d in waiting if not d.name] or waiting
        # A device that only ever sent DISCOVERs (all a forged MAC does) goes before one that took
        # a lease (a real newcomer renews and waits for the household to look).
        oldest = min(waiting, key=lambda d: (d.lease_expires > 0, d.last_seen))
        LOG.info(
            "pending devices at their cap (%d): forgetting %s, silent since %.0f",
            self.max_pending,
            oldest.mac,
            oldest.last_seen,
        )
        return oldest

    # -- telling the household

    def announce(self, mac: str, message: str) -> list[TellHousehold]:
        """The household hears of each new device, but of a storm of them (forged MACs) only once."""
        now = self.clock()
        window = self._arrivals
        window.append(now)
        while window and window[0] < now - NEWCOMER_STORM_WINDOW_S:
            window.popleft()
        if len(window) < NEWCOMER_STORM:
            if len(window) < NEWCOMER_STORM // 2:
                self._storm_reported = False  # calm again: the next storm is news
            return [TellHousehold("new-device", mac, message)]
        self._unannounced[mac] = message  # told when it takes a lease
        if self._storm_reported:
            return []
        self._storm_reported = True
        return [
            TellHousehold(
                "newcomer-storm",
                "",
                f"{len(window)} devices asked to join within "
                f"{NEWCOMER_STORM_WINDOW_S} seconds, probably made up by one device; each one "
                "that takes an address is announced, the rest are forgotten",
            )
        ]

    def took_lease(self, mac: str) -> list[TellHousehold]:
        """Asked during a storm, and real: it took its lease, which a forged MAC never does."""
        message = self._unannounced.pop(mac, None)
        return [TellHousehold("new-device", mac, message)] if message is not None else []
