"""Routes a forwarding device offers in its own router advertisements (RFC 4191 Route Information), as a
Thread border router offers its mesh's prefixes: honoured, so the other devices of the home reach the mesh
through the router, and the mesh's answers come back.

What is accepted (`refusal` says why not, pure):
- a unique local prefix (fc00::/7), /48 to /64: the ISP routes no global prefix to a device, a longer one is
  a host's address, a shorter one a claim on other homes' space;
- overlapping none of the home's own prefixes (its ULA /48, the delegated prefix) nor another device's
  route: a device may not draw the traffic of another to itself;
- at most MAX_PER_DEVICE a device (an advert's others are refused);
- for the option's lifetime, at most MAX_LIFETIME_S (a border router advertises again every few minutes;
  RFC 4861's MaxRtrAdvInterval is at most 1800 s); lifetime 0 withdraws it. A device that stops
  forwarding (denied, paused, its lease ran out) loses its routes (`forget`);
- a device's routes change at most once every CHANGE_HOLD_S: each change redoes its rules and sends every
  device an advert, and a device flapping a route at its meter's 20 adverts a second would have the router
  do that 20 times a second. Within it, an advert only keeps alive the routes the device holds.

A route's prefix has an owner (issue 39): the first device whose offer of it was honoured, kept on the disk,
across the device's pauses, bedtimes, its lease running out and the controller's restarts; while it is
owned, another device's offer of it (or of one overlapping it) is refused, and only the household gives it
a new owner (`give`, ws.v1's `route-owner`, the owner account's alone: `authority.py`). The owner's own
withdrawal (lifetime 0) gives it up. A device owns at most MAX_PER_DEVICE prefixes, held now or not.

The household is told of each acceptance, withdrawal and refusal once; at most TOLD_REFUSALS refusals are
remembered a device, so one offering ever new prefixes fills neither memory nor the event log.
`BorderRoutes` holds the accepted routes: whose each is, until when; and which refusals were told.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Callable
from dataclasses import dataclass, field

from ..wire.nd import RouteOffer

UNIQUE_LOCAL = ipaddress.IPv6Network("fc00::/7")
SHORTEST, LONGEST = 48, 64
MAX_PER_DEVICE = 4
MAX_LIFETIME_S = 1800
CHANGE_HOLD_S = 2.0
TOLD_REFUSALS = 16


def refusal(
    prefix: ipaddress.IPv6Network, home: tuple[ipaddress.IPv6Network, ...], others: tuple[ipaddress.IPv6Network, ...]
) -> str | None:
    """Why a device's route to `prefix` is not honoured (None: it is). home: the home's own prefixes;
    others: the routes other devices hold."""
    if not prefix.subnet_of(UNIQUE_LOCAL):
        return "not a unique local prefix (fc00::/7)"
    if not SHORTEST <= prefix.prefixlen <= LONGEST:
        return f"not a /{SHORTEST} to /{LONGEST}"
    if any(prefix.overlaps(own) for own in home):
        return "overlaps the home's own prefix"
    if any(prefix.overlaps(other) for other in others):
        return "overlaps another device's route"
    return None


@dataclass
class Change:
    """What one advert changed: whether the device's routes did, and what to tell the household (each
    acceptance, withdrawal and refusal once, not at every advert)."""

    routes_changed: bool = False
    told: list[str] = field(default_factory=list)


class BorderRoutes:
    def __init__(
        self,
        owners: dict[str, str] | None = None,
        save_owner: Callable[[str, str | None], None] = lambda prefix, mac: None,
    ) -> None:
        """owners: each owned prefix's device, from the disk; save_owner(prefix, MAC or None) writes one
        (queued: `store.DeviceStore`)."""
        self.owners = {ipaddress.IPv6Network(prefix): mac for prefix, mac in (owners or {}).items()}
        self.save_owner = save_owner
        self.until: dict[str, dict[ipaddress.IPv6Network, float]] = {}  # MAC -> its routes -> until when
        self.refused: dict[str, dict[ipaddress.IPv6Network, str]] = {}  # MAC -> what it was told was refused
        self.changed_at: dict[str, float] = {}  # MAC -> when its routes last changed

    def offered(
        self, mac: str, offers: tuple[RouteOffer, ...], home: tuple[ipaddress.IPv6Network, ...], now: float
    ) -> Change:
        """A forwarding device's advert offers these routes (one advert need not repeat all: a route it
        leaves out stays until its lifetime ends)."""
        change = Change()
        held = self.until.setdefault(mac, {})
        refused = self.refused.setdefault(mac, {})
        may_change = now - self.changed_at.get(mac, float("-inf")) >= CHANGE_HOLD_S
        for offer in offers:
            prefix = ipaddress.IPv6Network(offer.prefix)
            if offer.lifetime == 0:
                if may_change and held.pop(prefix, None) is not None:
                    change.routes_changed = True
                    change.told.append(f"withdrew its route to {prefix}")
                    self._own(prefix, None)  # its owner gave it up
                continue
            others = tuple(p for m, routes in self.until.items() if m != mac for p in routes)
            why = refusal(prefix, home, others) or self._owned_by_another(prefix, mac)
            owned = [p for p, m in self.owners.items() if m == mac]
            if why is None and prefix not in held and prefix not in owned and len(owned) >= MAX_PER_DEVICE:
                why = f"already {MAX_PER_DEVICE} routes"
            if why is not None:
                if refused.get(prefix) != why and (prefix in refused or len(refused) < TOLD_REFUSALS):
                    refused[prefix] = why
                    change.told.append(f"offered a route to {prefix}, refused: {why}")
                continue
            if prefix not in held and not may_change:
                continue  # held off: the next advert offers it again
            refused.pop(prefix, None)
            if self.owners.get(prefix) != mac:
                self._own(prefix, mac)
            if prefix not in held:
                change.routes_changed = True
                change.told.append(f"offers a route to {prefix}; the home's other devices reach it through the router")
            held[prefix] = now + min(offer.lifetime, MAX_LIFETIME_S)
        if change.routes_changed:
            self.changed_at[mac] = now
        self._tidy(mac)
        return change

    def _owned_by_another(self, prefix: ipaddress.IPv6Network, mac: str) -> str | None:
        owner = next((m for p, m in self.owners.items() if m != mac and p.overlaps(prefix)), None)
        if owner is None:
            return None
        return f"another device's route ({owner}), kept while it is away: the household may give it a new owner"

    def _own(self, prefix: ipaddress.IPv6Network, mac: str | None) -> None:
        if mac is None:
            self.owners.pop(prefix, None)
        else:
            self.owners[prefix] = mac
        self.save_owner(str(prefix), mac)

    def give(self, prefix: ipaddress.IPv6Network, mac: str) -> set[str]:
        """The household gives the prefix a new owner: prefixes overlapping it are no one else's, and
        routes other devices hold to them go. The devices whose routes changed."""
        changed = set()
        for owned, owner in list(self.owners.items()):
            if owned.overlaps(prefix) and owner != mac:
                self._own(owned, None)
        for other, routes in list(self.until.items()):
            for held in [p for p in routes if other != mac and p.overlaps(prefix)]:
                del routes[held]
                changed.add(other)
            self._tidy(other)
        self._own(prefix, mac)
        self.refused.get(mac, {}).pop(prefix, None)
        return changed

    def owned(self) -> dict[str, str]:
        return {str(prefix): mac for prefix, mac in sorted(self.owners.items())}

    def of(self, mac: str) -> tuple[str, ...]:
        return tuple(sorted(str(p) for p in self.until.get(mac, ())))

    def owner_of(self, address: ipaddress.IPv6Network) -> str | None:
        """The device whose route holds the address (or prefix)."""
        for mac, routes in self.until.items():
            if any(address.subnet_of(prefix) for prefix in routes):
                return mac
        return None

    def offered_to(self, mac: str, now: float) -> tuple[tuple[str, int], ...]:
        """The routes a device hears in the router's adverts: every other device's, with what is left of
        each one's lifetime."""
        return tuple(
            sorted(
                (str(prefix), max(0, int(until - now)))
                for m, routes in self.until.items()
                if m != mac
                for prefix, until in routes.items()
            )
        )

    def expire(self, now: float) -> list[str]:
        """Routes whose lifetime ran out go: the devices whose routes changed."""
        changed = []
        for mac, routes in list(self.until.items()):
            gone = [prefix for prefix, until in routes.items() if until <= now]
            for prefix in gone:
                del routes[prefix]
            if gone:
                changed.append(mac)
            self._tidy(mac)
        return changed

    def all(self) -> set[str]:
        return {str(prefix) for routes in self.until.values() for prefix in routes}

    def forget(self, mac: str) -> bool:
        """The device stopped forwarding (or is forgotten): its routes go (what it owns stays its own).
        Whether it had any."""
        self.refused.pop(mac, None)
        self.changed_at.pop(mac, None)
        return bool(self.until.pop(mac, None))

    def _tidy(self, mac: str) -> None:
        if not self.until.get(mac):
            self.until.pop(mac, None)
        if not self.refused.get(mac):
            self.refused.pop(mac, None)
