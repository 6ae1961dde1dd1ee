"""Which access port each device is on, the concern (pure): a device is bound to the access port it
took its lease on (its DHCP, which the switch marks with the port: `flows.port_mark`), and its rules
accept its frames there only. Its MAC on another access port is a copy of it (a MAC clone), unless
the device really moved:

- its own port has no link any more (the cable was pulled, the radio went down): it is bound to the
  port where it is seen now, at once;
- its lease ran out: the next port it takes a lease on is its own (a laptop left on the desk over
  the weekend, plugged in elsewhere);
- the household looks at it (permits it again, after the clone alert said where it was seen): it
  is bound to the port it was last seen on. A laptop moving from the Wi-Fi to a cable while the
  radio stays up is this case: the alert names both ports, and one tap brings it back;
- an access point says it authenticated the device (it roamed: the access point that
  authenticated a device says where it is), if its own port is an access point's too, or the
  device proved its own passphrase (a key bound to its MAC, which only the device holds). A
  station roaming away need not tell the access point it leaves (on real 802.11 it did not: the
  old one says so only at its inactivity timeout, minutes later), so the new one's word is taken.
  With the guest passphrase the MAC is a device's only identity on any one radio too (a copier on
  the same radio takes it over the same way); the clone watch still sees a copy (the device's own
  frames, still arriving where it was, are flagged). A cable says nothing of who is on it: a
  wired device's MAC authenticated on a radio with the guest passphrase is a copy until the
  household says otherwise.

With one access port there is nothing to bind. In memory: after a restart a device is bound again
by its next DHCP or ARP, and until then accepted on every access port (as before it was bound).
"""

from __future__ import annotations

from collections.abc import Iterable

from ..effects import Effect
from ..lifecycle import SwitchFacts

OWN, BOUND, MOVED, ELSEWHERE = "own", "bound", "moved", "elsewhere"
# A station's first frames at the access point it roamed to reach the switch before that access point's word
# reaches the controller (a satellite's comes over HTTP): for this long they are dropped without an alert.
ROAM_GRACE_S = 3.0


class PortBinding:
    def __init__(self):
        self.access_ports: tuple[int, ...] = ()
        self.bound: dict[str, int] = {}
        self.seen_elsewhere: dict[str, int] = {}  # the port a bound device's MAC was last seen on instead
        self.without_link: set[int] = set()
        # The access points' word: the ports where an access point says each device is associated now, and
        # the ports that have an access point saying so (a wired port says nothing of who is on it).
        self.associated: dict[str, set[int]] = {}
        self.ports_with_an_access_point: set[int] = set()
        self.first_seen_elsewhere: dict[str, tuple[int, float]] = {}  # (port, when) of a roam's first frame

    # -- the lifecycle

    def knows(self, mac: str) -> bool:
        return mac in self.bound or mac in self.seen_elsewhere or mac in self.associated

    def forget(self, mac: str) -> None:
        self.bound.pop(mac, None)
        self.seen_elsewhere.pop(mac, None)
        self.associated.pop(mac, None)
        self.first_seen_elsewhere.pop(mac, None)

    def switch_ready(self, switch: SwitchFacts) -> list[Effect]:
        """The switch (re)connected: bindings to ports it no longer has are let go (a port added
        again may have a new number)."""
        self.access_ports, self.without_link = switch.access_ports, set(switch.without_link)
        for memory in (self.bound, self.seen_elsewhere):
            for mac in [m for m, p in memory.items() if p not in switch.access_ports]:
                del memory[mac]
        for ports in self.associated.values():
            ports.intersection_update(switch.access_ports)
        self.ports_with_an_access_point.intersection_update(switch.access_ports)
        return []

    # -- queries

    def port_of(self, mac: str) -> int | None:
        """The device's own port; None: any access port (only one, or it is not bound yet)."""
        return self.bound.get(mac) if len(self.access_ports) > 1 else None

    def left_unheard(self, mac: str) -> list[int]:
        """The access points that still hold the device's association though it is bound at another access
        point, which authenticated it since (a roaming station does not tell the one it leaves): theirs is
        stale. Not while its own port is a cable's: an access point's station then is a copy the household
        has not decided on yet, which the clone watch handles."""
        own = self.bound.get(mac)
        if own not in self.ports_with_an_access_point:
            return []
        return sorted(p for p in self.associated.get(mac, ()) if p != own and p in self.ports_with_an_access_point)

    def stale_at(self, port: int, macs: Iterable[str]) -> list[str]:
        """Of the stations the access point on `port` lists, those whose association there is stale
        (`left_unheard`): it is to forget them."""
        return sorted(mac for mac in macs if port in self.left_unheard(mac))

    def status_of(self, mac: str) -> dict:
        return {"access_port": self.port_of(mac), "seen_on_port": self.seen_elsewhere.get(mac)}

    # -- events

    def saw(self, mac: str, port: int, leased: bool = True) -> str:
        """The device's frame came in on `port`: OWN (its port), BOUND (it had none: this one is its own
        now), MOVED (its port has no link: it is bound here now) or ELSEWHERE (a copy, or a move the
        household is to confirm: not bound here). leased: it holds a live lease (without one, the port
        it asks on is its own)."""
        if not leased:
            self.lease_ended(mac)
        if len(self.access_ports) < 2 or port not in self.access_ports:
            return OWN
        own = self.bound.get(mac)
        if own == port:
            return OWN
        if own is None or own in self.without_link:
            self.bound[mac] = port
            self.seen_elsewhere.pop(mac, None)
            return BOUND if own is None else MOVED
        self.seen_elsewhere[mac] = port
        return ELSEWHERE

    def authenticated(self, mac: str, port: int, proven: bool) -> str:
        """The access point on `port` authenticated the device (it joined, or roamed there): OWN, BOUND or
        MOVED as `saw`, or ELSEWHERE (not moved: its own port is a cable's, and it proved no key of its own:
        a copy until the household says otherwise). proven: with its own passphrase (bound to its MAC)."""
        if len(self.access_ports) < 2 or port not in self.access_ports:
            return OWN
        self.ports_with_an_access_point.add(port)
        here = self.associated.setdefault(mac, set())
        here.add(port)
        own = self.bound.get(mac)
        if own == port:
            return OWN
        if own is None or proven or own in self.without_link or own in self.ports_with_an_access_point:
            self.bound[mac] = port
            self.seen_elsewhere.pop(mac, None)
            self.first_seen_elsewhere.pop(mac, None)
            return BOUND if own is None else MOVED
        self.seen_elsewhere[mac] = port
        return ELSEWHERE

    def word_on_its_way(self, mac: str, port: int, now: float) -> bool:
        """The device's frame came in on `port`, not its own (ELSEWHERE), and both are access points' ports: it
        may have roamed there, the access point's word on its way. True for `ROAM_GRACE_S` from the first such
        frame (drop it, tell nobody); then it is a copy's."""
        if port not in self.ports_with_an_access_point or self.bound.get(mac) not in self.ports_with_an_access_point:
            return False
        seen_port, since = self.first_seen_elsewhere.setdefault(mac, (port, now))
        if seen_port != port or now - since > ROAM_GRACE_S * 10:  # another port, or a roam long after a copy's
            self.first_seen_elsewhere[mac] = (port, now)
            return True
        return now - since < ROAM_GRACE_S

    def left(self, mac: str, port: int) -> int | None:
        """The access point on `port` says the device left it. If that was its own port and it is
        associated with another access point now (the one it roamed to), that one is its own: the port
        it moved to (None: it did not move)."""
        here = self.associated.get(mac)
        if here is None:
            return None
        here.discard(port)
        if not here:
            del self.associated[mac]
        if self.bound.get(mac) != port or not here:
            return None
        # The access point it authenticated at last, if it is still there; else any it is associated with.
        new = self.seen_elsewhere.pop(mac, None)
        self.bound[mac] = new if new in here else min(here)
        return self.bound[mac]

    def only_these_at(self, port: int, macs: set[str]) -> list[str]:
        """The access point on `port` says these are all its stations now (its list, when it (re)starts or is
        heard again): any other it had left it unheard (`left`). The devices that moved for it."""
        self.ports_with_an_access_point.add(port)
        gone = [mac for mac, here in self.associated.items() if port in here and mac not in macs]
        return [mac for mac in gone if self.left(mac, port) is not None]

    def elsewhere(self, mac: str, port: int) -> str:
        """What the household is told of the device's MAC seen on `port`, not its own (ELSEWHERE)."""
        return f"seen on access port {port}, not on its own ({self.bound.get(mac)}); if it moved there, permit it again"

    def link(self, port: int, up: bool) -> None:
        (self.without_link.discard if up else self.without_link.add)(port)

    def lease_ended(self, mac: str) -> None:
        """Its lease ran out: its next lease binds it wherever it is."""
        self.bound.pop(mac, None)
        self.seen_elsewhere.pop(mac, None)

    def household_decided(self, mac: str) -> bool:
        """The household has looked at the device: where it was last seen is its own port now.
        Whether that changed its port."""
        port = self.seen_elsewhere.pop(mac, None)
        if port is None:
            return False
        self.bound[mac] = port
        return True
