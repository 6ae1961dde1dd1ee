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
  radio stays up is this case: the alert names both ports, and one tap brings it back.

With one access port there is nothing to bind. In memory: after a restart a device is bound again
by its next DHCP or ARP, and until then accepted on every access port (as before it was bound).
"""

from __future__ import annotations

from ..effects import Effect
from ..lifecycle import SwitchFacts

OWN, BOUND, MOVED, ELSEWHERE = "own", "bound", "moved", "elsewhere"


class PortBinding:
    def __init__(self):
        self.access_ports: tuple[int, ...] = ()
        self.bound: dict[str, int] = {}
        self.seen_elsewhere: dict[str, int] = {}  # the port a bound device's MAC was last seen on instead
        self.without_link: set[int] = set()

    # -- the lifecycle

    def knows(self, mac: str) -> bool:
        return mac in self.bound or mac in self.seen_elsewhere

    def forget(self, mac: str) -> None:
        self.bound.pop(mac, None)
        self.seen_elsewhere.pop(mac, None)

    def switch_ready(self, switch: SwitchFacts) -> list[Effect]:
        """The switch (re)connected: bindings to ports it no longer has are let go (a port added
        again may have a new number)."""
        self.access_ports, self.without_link = switch.access_ports, set(switch.without_link)
        for memory in (self.bound, self.seen_elsewhere):
            for mac in [m for m, p in memory.items() if p not in switch.access_ports]:
                del memory[mac]
        return []

    # -- queries

    def port_of(self, mac: str) -> int | None:
        """The device's own port; None: any access port (only one, or it is not bound yet)."""
        return self.bound.get(mac) if len(self.access_ports) > 1 else None

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
