"""Newcomers, the concern: how many devices may wait for a decision, which one makes way for the
next, and telling the household of each new device but of a storm of them (forged MACs) once.

A storm's forged MACs may complete DISCOVER..ACK, as a real device does; what they do not do is use
their address (ask for their gateway, as any device does before its first packet leaves) or come back
(renew their lease, half way through it). So during a storm a newcomer is announced when it uses its
address or comes back, whichever is first, not when it takes its lease; and when the pending places are
full the one that makes way is the least recently seen of (`standing`):

1. those whose DISCOVER went unanswered by its REQUEST (all a DISCOVER-only storm sends), else
2. of those answering their offer now and those holding a lease they never used, whichever are more: a
   storm fills one of the two (a DISCOVER-only one the first, a lease-completing one the second), and a
   real newcomer is in the other, or the newest of the storm's; else
3. those that used their address or came back.

So a real newcomer gets its lease, and once it uses it stays on the board however long the storm goes
on (issue 39).
"""

from __future__ import annotations

import logging
from collections import defaultdict, deque
from collections.abc import Callable

from ..effects import TellHousehold
from ..model import Device

LOG = logging.getLogger(__name__)

NEWCOMER_STORM, NEWCOMER_STORM_WINDOW_S = 30, 60
# Seen this long after it first asked, a device came back (a DHCP exchange takes well under a second,
# a client's retries come 4 s apart, its renewal half a lease on).
SEEN_AGAIN_S = 10.0
# A client answers an offer within milliseconds (dhclient, Android and iOS take the first one): a DISCOVER
# not followed by its REQUEST this long after is one that never will be (all a DISCOVER-only storm sends).
ANSWERS_ITS_OFFER_S = 1.0
UNANSWERED, ANSWERING, LEASED, IN_USE = "unanswered", "answering", "leased", "in use"  # `standing`


def came_back(device: Device) -> bool:
    return device.last_seen - device.first_seen >= SEEN_AGAIN_S


class Newcomers:
    def __init__(
        self,
        clock: Callable[[], float],
        max_pending: int = 256,
        device_of: Callable[[str], Device | None] = lambda _: None,
    ):
        """device_of: the router's record of a device (None: it knows none)."""
        self.clock, self.max_pending, self._device_of = clock, max_pending, device_of
        self._arrivals: deque[float] = deque()
        self._unannounced: dict[str, str] = {}  # newcomers of a storm, mac -> what to tell once it comes back
        self._storm_reported = False
        # Pending devices seen using their address, mac -> when last (`used`): one entry per device the router
        # knows at most, gone with it.
        self._used: dict[str, float] = {}

    # -- the lifecycle

    def knows(self, mac: str) -> bool:
        return mac in self._unannounced or mac in self._used

    def forget(self, mac: str) -> None:
        self._unannounced.pop(mac, None)
        self._used.pop(mac, None)

    # -- what a pending device does

    def used(self, mac: str) -> list[TellHousehold]:
        """The pending device at `mac` used its address (asked for its gateway): it is here, and in use. A
        newcomer of a storm is news now (a real one asks for its gateway before its first packet leaves)."""
        self._used[mac] = self.clock()
        message = self._unannounced.pop(mac, None)
        return [] if message is None else [TellHousehold("new-device", mac, message)]

    # -- which device makes way

    def evictee(self, known: int, pending: Callable[[], list[Device]]) -> Device | None:
        """At most max_pending devices wait for a decision; when they are all there, one makes way for a
        newcomer (the module's docstring says which). known: how many devices the router knows; pending:
        those waiting (asked for only when the router knows that many at all, not on every DISCOVER).

        A DHCP storm of forged MACs would otherwise take a /30, a meter and two rules per MAC.
        Devices the household has decided about are never evicted."""
        if known < self.max_pending:
            return None
        waiting = pending()
        if len(waiting) < self.max_pending:
            return None
        # One the household has named is one it is looking at: it stays.
        waiting = [d for d in waiting if not d.name] or waiting
        now = self.clock()
        standing: dict[str, list[Device]] = defaultdict(list)
        for device in waiting:
            standing[self.standing(device, now)].append(device)
        makes_way = standing[UNANSWERED] or max(standing[ANSWERING], standing[LEASED], key=len) or standing[IN_USE]
        oldest = min(makes_way, key=lambda d: max(d.last_seen, self._used.get(d.mac, 0.0)))
        LOG.info(
            "pending devices at their cap (%d): forgetting %s, silent since %.0f",
            self.max_pending,
            oldest.mac,
            oldest.last_seen,
        )
        return oldest

    def standing(self, device: Device, now: float) -> str:
        """A pending device's standing when one makes way (the module's docstring says which): IN_USE, seen
        using its address or back for its lease; LEASED, holding one it never used; ANSWERING its offer now;
        UNANSWERED, a DISCOVER its REQUEST never followed."""
        if device.mac in self._used or came_back(device):
            return IN_USE
        if device.lease_expires > 0:
            return LEASED
        return ANSWERING if now - device.last_seen < ANSWERS_ITS_OFFER_S else UNANSWERED

    # -- telling the household

    def announce(self, mac: str, message: str) -> list[TellHousehold]:
        """The household hears of each new device, but of a storm of them (forged MACs) only once."""
        now = self.clock()
        self._arrivals.append(now)
        arrivals = self._recent_arrivals(now)
        if arrivals < NEWCOMER_STORM:
            if arrivals < NEWCOMER_STORM // 2:
                self._storm_reported = False  # calm again: the next storm is news
            return [TellHousehold("new-device", mac, message)]
        self._unannounced[mac] = message  # told when it comes back
        if self._storm_reported:
            return []
        self._storm_reported = True
        return [
            TellHousehold(
                "newcomer-storm",
                "",
                f"{arrivals} devices asked to join within "
                f"{NEWCOMER_STORM_WINDOW_S} seconds, probably made up by one device; each one "
                "that uses its address or comes back for it is announced, the rest are forgotten",
            )
        ]

    def took_lease(self, mac: str) -> list[TellHousehold]:
        """A lease granted or renewed: a newcomer asked during a storm is announced once it came back
        (`came_back`, which a forged MAC never does), or once the storm is over."""
        device = self._device_of(mac)
        if mac not in self._unannounced or device is None:
            return []
        if not came_back(device) and self._recent_arrivals(self.clock()) >= NEWCOMER_STORM // 2:
            return []
        return [TellHousehold("new-device", mac, self._unannounced.pop(mac))]

    def _recent_arrivals(self, now: float) -> int:
        window = self._arrivals
        while window and window[0] < now - NEWCOMER_STORM_WINDOW_S:
            window.popleft()
        return len(window)
