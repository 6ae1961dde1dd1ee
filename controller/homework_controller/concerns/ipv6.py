"""IPv6 for every device, each in its own /64 (RFC 8273, "Unique IPv6 Prefix per Host"): the /30 idea
carried over, so every packet between devices still passes the router.

The prefix plan is pure (`wire/prefixes.py`): a ULA /48 (RFC 4193) that always exists, made once from a
random 40-bit global ID kept beside the controller's SQLite file (`edge/lan/ipv6_files.py`), and the prefix the
ISP delegates when one is known (/56, /60 or /64).

- A device's ULA /64 is the /48's subnet numbered as its /30 (the device record's subnet index, which
  the store keeps): the same device has the same ULA /64 after a restart.
- Global /64s: the delegated prefix's /64 number 0 is the router's own; the rest go to forwarding
  devices in the order they come to forward, each preferring the /64 numbered as its /30 (stable across
  a restart while the household fits), else the lowest free one. With fewer /64s than devices the later
  ones get their ULA /64 only (RFC 6724: a host with only a ULA source reaches global names over IPv4).
  With only a /64 delegated, devices are ULA-only: the router keeps that /64, and does no NAT66.
- A device that stops forwarding (denied, paused, its lease ran out) gives its global /64 back, and
  gets no prefix at all: its router advertisements say router lifetime 0 and carry none.
- Renumbering (the ISP delegates another prefix): each device keeps its /64's number in the new prefix
  (while it fits), and its old global /64 goes on in its next adverts deprecated (preferred lifetime 0,
  valid for what is left of DEPRECATED_VALID_S), so new connections use the new /64 at once (RFC 4862
  5.5.3; RFC 7084's renumbering).

`Ipv6` is what the router and the I/O edge ask of IPv6; `Ipv6Addresses` is the concern that runs it, and
`Ipv6Off` the one a router without IPv6 (--no-ipv6) has instead: it answers empty (no prefixes, rules,
adverts or addresses) and ignores every event, so nothing else asks whether IPv6 runs but where the edge
opens IPv6 sockets or looks up AAAA records (`Ipv6.enabled`).

`Ipv6Addresses` is the concern: which global /64 each device holds, its IPv6 rules (`flows_v6`, beside
its IPv4 ones under the same cookie), the router and neighbour adverts it is sent (`nd`: unicast to its
MAC, a change at once, and otherwise every `ADVERT_INTERVAL_S`), and the answers for the router's stack
when it looks for an address in a device's /64 (proxy neighbour discovery, as for ARP). And the routes
a forwarding device offers in its own adverts (`border_routes`: a Thread border router's mesh): its rules
admit and route the prefix as one of its /64s, the router's stack routes it on the LAN interface, and the
other devices' adverts carry it (Route Information, the router as the next hop).

Every answer for the router's stack is an entry in the kernel's neighbour table (1,024 for all devices
together by default), and a device makes up as many addresses in its /64 as it likes: so the stack holds
entries for at most `MAX_NEIGHBOURS_PER_DEVICE` addresses of a device's /64s at once (a device uses a
few: its stable address and a privacy one or two a day) and `MAX_NEIGHBOURS_BEHIND_ROUTES` behind the
routes it offers (a mesh's nodes). A new address beyond them is answered, and the least recently asked
one forgotten (`ForgetNeighbours`): asked for again it is answered again, at the cost of one
solicitation. Forgetting, not dropping at the switch: the switch admits a device's whole /64 by one rule
(no packet-in for a new privacy address), and the stack asks for the addresses the internet sends to as
well as for those the device sends from, which no rule on its traffic would bound.
"""

from __future__ import annotations

import ipaddress
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

from .. import flows
from ..effects import (
    AddIpv6Gateway,
    AddIpv6Route,
    Effect,
    ForgetNeighbours,
    InstallRules,
    RemoveIpv6Gateway,
    RemoveIpv6Route,
    SendFrame,
)
from ..errors import ApiError, NotConfigured
from ..flows import flows_v6
from ..lifecycle import NOTHING_TICKED, Concern, SwitchFacts, Ticked
from ..model import Device
from ..wire import nd
from ..wire.prefixes import GATEWAY_HOST, PrefixPlan, gateway_of, resolver_of
from .border_routes import BorderRoutes, Change, refusal

ADVERT_INTERVAL_S = 60.0  # a device hears its prefixes at least this often (RFC 4861's MaxRtrAdvInterval <= 1800)
# The addresses of one device the router's stack holds a neighbour entry for at once (the docstring says why).
MAX_NEIGHBOURS_PER_DEVICE = 16
MAX_NEIGHBOURS_BEHIND_ROUTES = 256  # a Thread network's nodes behind its border router: a few hundred at most


# How long a /64 from before a renumbering is still advertised (deprecated, its valid lifetime counting down).
# Short: the ISP no longer routes it. (Hosts keep an address at least min(its remaining lifetime, 2 h):
# RFC 4862 5.5.3e, so the device's own address may outlive this; it is never chosen for new connections.)
DEPRECATED_VALID_S = 600.0


@dataclass(frozen=True)
class Advert:
    """What one router advertisement to a device says: its prefixes (global first), or none (router lifetime 0),
    its /64s from before a renumbering, each with when it stops being valid, and the routes other devices
    offer (their lifetimes as left when it is sent)."""

    prefixes: tuple[str, ...]
    deprecated: tuple[tuple[str, float], ...] = ()
    routes: tuple[str, ...] = ()


class Ipv6(Concern, Protocol):
    """What the router and the I/O edge ask of IPv6 (`Ipv6Addresses` runs it, `Ipv6Off` stands in for it)."""

    enabled: bool  # whether the router runs IPv6 at all (the edge's IPv6 sockets, AAAA lookups)

    def switch_ready(self, switch: SwitchFacts) -> list[Effect]:
        """The IPv6 rules every device shares."""
        ...

    def current_prefixes(self, mac: str) -> tuple[str, ...]: ...

    def owner_of(self, address: str) -> str | None: ...

    def delegation(self) -> tuple[ipaddress.IPv6Network | None, tuple[float, float] | None]:
        """The prefix the ISP delegated (None: none known) and until when it is preferred and valid."""
        ...

    def renumber(
        self, delegated: ipaddress.IPv6Network | None, now: float, until: tuple[float, float] | None = None
    ) -> list[str]: ...

    def changes(self, device: Device, wanted: flows.DeviceRules | None) -> list[Effect]: ...

    def answer(self, in_port, sol: nd.Solicitation, device: Device | None) -> list[Effect]: ...

    def router_told(self, mac: str, port: int) -> list[Effect]:
        """Where the router's link-local address is, unasked, to a device that (re)associated on `port`."""
        ...

    def offered_routes(self, mac: str, advert: nd.RouterAdvert, now: float) -> Change: ...

    def give_route(self, prefix: str, mac: str) -> set[str]: ...

    def readvertise(self, now: float) -> list[Effect]: ...

    def tick(self, now: float) -> Ticked: ...


class Ipv6Off:
    """IPv6 on a router that does not run it: no device has a /64, the switch gets no IPv6 rule, no
    device hears an advert, the router's stack gets no address or route; solicitations, devices' adverts,
    renumbering and the clock change nothing."""

    enabled = False

    def knows(self, mac: str) -> bool:
        return False

    def forget(self, mac: str) -> None:
        pass

    def switch_ready(self, switch: SwitchFacts) -> list[Effect]:
        return []

    def current_prefixes(self, mac: str) -> tuple[str, ...]:
        return ()

    def owner_of(self, address: str) -> str | None:
        return None

    def delegation(self) -> tuple[ipaddress.IPv6Network | None, tuple[float, float] | None]:
        return None, None

    def renumber(
        self, delegated: ipaddress.IPv6Network | None, now: float, until: tuple[float, float] | None = None
    ) -> list[str]:
        return []

    def changes(self, device: Device, wanted: flows.DeviceRules | None) -> list[Effect]:
        return []

    def answer(self, in_port, sol: nd.Solicitation, device: Device | None) -> list[Effect]:
        return []

    def router_told(self, mac: str, port: int) -> list[Effect]:
        return []

    def offered_routes(self, mac: str, advert: nd.RouterAdvert, now: float) -> Change:
        return Change()

    def give_route(self, prefix: str, mac: str) -> set[str]:
        raise NotConfigured("this router does not run IPv6: no device offers routes")

    def readvertise(self, now: float) -> list[Effect]:
        return []

    def tick(self, now: float) -> Ticked:
        return NOTHING_TICKED


class Ipv6Addresses:
    """The concern: global /64s held by devices, each forwarding device's /64s now, what each device was
    last advertised (when, out of which ports), and the gateway addresses the router's stack holds."""

    enabled = True

    def __init__(self, plan: PrefixPlan, clock: Callable[[], float], store=None):
        """store: where the routes' owners are kept (None: in memory only)."""
        self.plan = plan
        self.clock = clock
        self.router_mac = ""
        self.slot_of: dict[str, int] = {}  # MAC -> its global /64's number in the delegated prefix
        self.holder: dict[int, str] = {}
        self.current: dict[str, tuple[str, ...]] = {}  # a forwarding device's /64s
        self.owner: dict[str, str] = {}  # /64 -> the forwarding device that has it
        self.advertised: dict[str, tuple[Advert, float, tuple[int, ...]]] = {}
        self.gateways: set[str] = set()  # /64s whose ::1 the router's stack holds
        self.earlier_gateways: set[str] = set()  # those of them outside the prefix plan (a renumbering's)
        self.deprecated: dict[str, dict[str, float]] = {}  # MAC -> its global /64s before a renumbering -> until
        self.routes = (
            BorderRoutes(store.load_route_owners(), store.save_route_owner) if store is not None else BorderRoutes()
        )
        self.kernel_routes: set[str] = set()  # the routes the router's stack was given
        # (MAC, behind its routes) -> the addresses the stack was told are there, least recently asked first.
        self.answered: dict[tuple[str, bool], OrderedDict[str, None]] = {}

    # -- the lifecycle

    def switch_ready(self, switch: SwitchFacts) -> list[Effect]:
        self.router_mac = switch.router_mac
        return [InstallRules(tuple(flows_v6.base_rules(switch.access_ports)))]

    def current_prefixes(self, mac: str) -> tuple[str, ...]:
        """The /64s a forwarding device holds now (none otherwise)."""
        return self.current.get(mac, ())

    def delegation(self) -> tuple[ipaddress.IPv6Network | None, tuple[float, float] | None]:
        return self.plan.delegated, self.plan.delegated_until

    def knows(self, mac: str) -> bool:
        return (
            mac in self.slot_of
            or mac in self.advertised
            or mac in self.current
            or (mac, False) in self.answered
            or (mac, True) in self.answered
        )

    def forget(self, mac: str) -> None:
        self._release(mac)  # its routes too
        self.advertised.pop(mac, None)
        self.deprecated.pop(mac, None)

    def renumber(
        self, delegated: ipaddress.IPv6Network | None, now: float, until: tuple[float, float] | None = None
    ) -> list[str]:
        """The ISP delegated another prefix (or none), or the same one until another time (`until`, as
        `PrefixPlan.delegated_until`: the next adverts say no more): the devices whose /64s change (their
        rules and adverts are to be redone). Each keeps its /64's number if the new prefix has it; its old
        global /64 is advertised deprecated until DEPRECATED_VALID_S from now."""
        if delegated == self.plan.delegated:
            self.plan = PrefixPlan(self.plan.ula, delegated, until)
            return []
        old_plan, self.plan = self.plan, PrefixPlan(self.plan.ula, delegated, until)
        self.earlier_gateways = {prefix for prefix in self.gateways if not self._in_plan(prefix)}
        for mac, slot in list(self.slot_of.items()):
            self.deprecated.setdefault(mac, {})[old_plan.global_of(slot)] = now + DEPRECATED_VALID_S
            if slot > self.plan.global_slots:
                del self.slot_of[mac], self.holder[slot]
        return list(self.current)  # those with no global /64 before may have one now

    # -- the plan

    def prefixes_of(self, device: Device, forwarding: bool) -> tuple[str, ...]:
        """The device's /64s now (global first, then ULA): none unless it forwards."""
        if not forwarding or device.subnet is None:
            self._release(device.mac)
            return ()
        ula = self.plan.ula_of(device.subnet.index)
        slot = self._slot(device.mac, device.subnet.index)
        prefixes = (self.plan.global_of(slot), ula) if slot else (ula,)
        if self.current.get(device.mac) != prefixes:
            self._drop_current(device.mac)
            self.current[device.mac] = prefixes
            for prefix in prefixes:
                self.owner[prefix] = device.mac
        return prefixes

    def owner_of(self, address: str) -> str | None:
        """The MAC of the forwarding device whose /64 holds the address (or is the prefix), if any. The
        router's own ::1 in it is the router's: a flow from it to the device comes in to the device."""
        try:
            network = ipaddress.IPv6Network(address, strict=False)
            prefix = network.supernet(new_prefix=64)
        except ValueError:  # not IPv6, or wider than a /64
            return None
        if network.prefixlen == 128 and int(network.network_address) - int(prefix.network_address) == GATEWAY_HOST:
            return None
        return self.owner.get(str(prefix)) or self.routes.owner_of(network)

    def _slot(self, mac: str, preferred: int) -> int:
        slot = self.slot_of.get(mac)
        if slot is not None:
            return slot
        slots = self.plan.global_slots
        if len(self.holder) >= slots:
            return 0
        if preferred <= slots and preferred not in self.holder:
            slot = preferred
        else:
            slot = next(n for n in range(1, slots + 1) if n not in self.holder)
        self.slot_of[mac], self.holder[slot] = slot, mac
        return slot

    def _release(self, mac: str) -> None:
        """The device no longer forwards: its global /64 and its routes go (the stack's entries for its
        addresses go with them: `Reconciler.forget_neighbours`)."""
        self.routes.forget(mac)
        self.answered.pop((mac, False), None)
        self.answered.pop((mac, True), None)
        slot = self.slot_of.pop(mac, None)
        if slot is not None:
            del self.holder[slot]
        self._drop_current(mac)

    def _drop_current(self, mac: str) -> None:
        for prefix in self.current.pop(mac, ()):
            if self.owner.get(prefix) == mac:
                del self.owner[prefix]

    def advert_due(self, mac: str, prefixes: tuple[str, ...], now: float, solicited: bool = False) -> Advert | None:
        """The advertisement to send the device now, if any: when what it says changed, when the device
        asks (a router solicitation), or when the last one is ADVERT_INTERVAL_S old."""
        routes = tuple(prefix for prefix, _ in self.routes.offered_to(mac, now)) if prefixes else ()
        advert = Advert(prefixes, self._deprecated_of(mac, prefixes, now), routes)
        last = self.advertised.get(mac)
        if not solicited and last is not None and last[0] == advert and now - last[1] < ADVERT_INTERVAL_S:
            return None
        return advert

    # -- effects

    def changes(self, device: Device, wanted: flows.DeviceRules | None) -> list[Effect]:
        """What goes with the device's new IPv4 rule set (installed after its cookie's delete): its IPv6
        rules, gateway addresses for new /64s, and an advert if what it should hear changed."""
        prefixes = self.prefixes_of(device, wanted is not None and wanted.forwarding)
        effects: list[Effect] = self._kernel_routes()  # a device that stopped forwarding took its routes with it
        if wanted is None:
            return effects
        rules = flows_v6.device_rules(device, wanted, prefixes, self.routes.of(device.mac), self.plan.lan)
        if rules:
            effects.append(InstallRules(tuple(rules)))
        for prefix in prefixes:
            if prefix not in self.gateways:
                self.gateways.add(prefix)
                effects.append(AddIpv6Gateway(prefix))
        if wanted.blacklisted:
            return effects
        now = self.clock()
        advert = self.advert_due(device.mac, prefixes, now)
        if advert is not None and (prefixes or device.mac in self.advertised):
            effects += self._send_advert(device.mac, advert, now, wanted.own_ports)
        return effects

    def answer(self, in_port, sol: nd.Solicitation, device: Device | None) -> list[Effect]:
        """A solicitation from a device (device: its record, None if unknown) or from the router's stack
        (in_port LOCAL): the advert it asks for, or the neighbour advert for its target."""
        if in_port == flows.LOCAL:
            return self._answer_for_device(sol)
        if device is None or device.subnet is None or device.mac != sol.eth_src:
            return []  # not a device the router knows (it has not asked for a lease): nothing to tell it
        prefixes = self.current.get(device.mac, ())
        if sol.kind == nd.ROUTER_SOLICITATION:
            now = self.clock()
            advert = self.advert_due(device.mac, prefixes, now, solicited=True)
            return self._send_advert(device.mac, advert, now, (in_port,)) if advert else []
        gateways = {nd.ROUTER_LINK_LOCAL, *(gateway_of(p) for p in prefixes)}
        if sol.src == nd.UNSPECIFIED or sol.target not in gateways:
            return []  # the device's own duplicate-address detection, or not the router's address: unanswered
        frame = nd.neighbour_advert(self.router_mac, device.mac, sol.target, sol.src, True, self.router_mac)
        return [SendFrame(in_port, frame)]

    def router_told(self, mac: str, port: int) -> list[Effect]:
        """A neighbour advert for the router's link-local address (the next hop of the device's default route),
        unasked, to a device it has advertised itself to: its stack forgets its neighbours while its link is
        down at each (re)association, and a solicitation it sent meanwhile is sent again only after a second.
        Not flagged solicited (to all nodes), so its stack takes it for its incomplete entry."""
        if mac not in self.advertised:
            return []
        advert = nd.neighbour_advert(
            self.router_mac, mac, nd.ROUTER_LINK_LOCAL, nd.ALL_NODES, True, self.router_mac, solicited=False
        )
        return [SendFrame(port, advert)]

    def _answer_for_device(self, sol: nd.Solicitation) -> list[Effect]:
        """The router's stack asks where an address in a device's /64 is: at that device (every address of
        the /64 is the device's own), if it forwards. Never for the router's own gateway addresses."""
        if sol.kind != nd.NEIGHBOUR_SOLICITATION or sol.src == nd.UNSPECIFIED:
            return []
        try:
            prefix = str(ipaddress.IPv6Network((sol.target, 64), strict=False))
        except ValueError:
            return []
        mac = self.owner.get(prefix)
        if mac is not None and sol.target == gateway_of(prefix):
            return []
        behind_route = mac is None
        mac = mac or self.routes.owner_of(ipaddress.IPv6Network(sol.target))  # an address behind a border router
        if mac is None:
            return []
        frame = nd.neighbour_advert(mac, sol.eth_src, sol.target, sol.src, False, mac)
        return [SendFrame(flows.LOCAL, frame), *self._answered_for(mac, sol.target, behind_route)]

    def _answered_for(self, mac: str, address: str, behind_route: bool) -> list[Effect]:
        """The stack was told `address` is at the device: the address it may forget now (least recently asked
        for, beyond the device's bound), if any."""
        answered = self.answered.setdefault((mac, behind_route), OrderedDict())
        answered[address] = None
        answered.move_to_end(address)
        bound = MAX_NEIGHBOURS_BEHIND_ROUTES if behind_route else MAX_NEIGHBOURS_PER_DEVICE
        if len(answered) <= bound:
            return []
        oldest, _ = answered.popitem(last=False)
        return [ForgetNeighbours(oldest, mac)]

    def _deprecated_of(self, mac: str, prefixes: tuple[str, ...], now: float) -> tuple[tuple[str, float], ...]:
        """The device's /64s from before a renumbering still to advertise (not one it has again)."""
        old = self.deprecated.get(mac)
        if not old:
            return ()
        for prefix, until in list(old.items()):
            if until <= now or prefix in prefixes:
                del old[prefix]
        if not old:
            del self.deprecated[mac]
        return tuple(sorted(old.items()))

    def _send_advert(self, mac: str, advert: Advert, now: float, ports: tuple[int, ...]) -> list[Effect]:
        self.advertised[mac] = (advert, now, ports)
        lifetimes = tuple((prefix, *self.plan.lifetimes_of(prefix, now)) for prefix in advert.prefixes)
        deprecated = tuple((prefix, max(0, int(until - now))) for prefix, until in advert.deprecated)
        routes = tuple(route for route in self.routes.offered_to(mac, now) if route[0] in advert.routes)
        frame = nd.router_advert(
            self.router_mac, mac, lifetimes, resolver_of(advert.prefixes), deprecated=deprecated, routes=routes
        )
        return [SendFrame(port, frame) for port in ports]

    # -- routes devices offer

    def offered_routes(self, mac: str, advert: nd.RouterAdvert, now: float) -> Change:
        """A device's own router advert: the routes it offers, honoured if it forwards (`border_routes`).
        When they change, its rules are redone (`changes`) and the others told (`readvertise`)."""
        if mac not in self.current:
            return Change()  # a pending or held device's adverts reach no one (the switch drops them too)
        home = (self.plan.ula,) + ((self.plan.delegated,) if self.plan.delegated is not None else ())
        return self.routes.offered(mac, advert.routes, home, now)

    def give_route(self, prefix: str, mac: str) -> set[str]:
        """The household gives a route's prefix a new owner (`BorderRoutes.give`): the devices whose routes
        went. A prefix no device could offer is refused (`ApiError`)."""
        try:
            network = ipaddress.IPv6Network(prefix.strip())
        except ValueError as exc:
            raise ApiError(f"{prefix[:60]!r} is not an IPv6 prefix: {exc}") from None
        home = (self.plan.ula,) + ((self.plan.delegated,) if self.plan.delegated is not None else ())
        why = refusal(network, home, ())
        if why is not None:
            raise ApiError(f"{network} is no route a device may offer: {why}")
        return self.routes.give(network, mac)

    def readvertise(self, now: float) -> list[Effect]:
        """Each forwarding device whose advert is due (what it would say changed, or it is ADVERT_INTERVAL_S
        old) hears it now, out of the ports its last one went."""
        effects: list[Effect] = []
        for mac, (advert, _, ports) in list(self.advertised.items()):
            if advert.prefixes:
                due = self.advert_due(mac, advert.prefixes, now)
                if due is not None:
                    effects += self._send_advert(mac, due, now, ports)
        return effects

    def _kernel_routes(self) -> list[Effect]:
        """The router's stack routes each honoured route on the LAN interface (its neighbour solicitations
        there are answered with the offering device's MAC), and no longer one that went."""
        wanted = self.routes.all()
        added, gone = sorted(wanted - self.kernel_routes), sorted(self.kernel_routes - wanted)
        self.kernel_routes = wanted
        return [*(AddIpv6Route(prefix) for prefix in added), *(RemoveIpv6Route(prefix) for prefix in gone)]

    def tick(self, now: float) -> Ticked:
        """A device whose offered routes ran out (a border router stopped offering its mesh) has its rules
        reinstalled without them, and the others hear so: each advertised device hears its prefixes again
        every ADVERT_INTERVAL_S, or sooner when what it would hear changed (a pending one's lifetime-0
        advert is sent only when it asks); the router's ::1s in /64s of an earlier delegated prefix go once
        no device may use them."""
        expired = self.routes.expire(now)
        effects = self.readvertise(now) + self._remove_old_gateways(now) + self._kernel_routes()
        return Ticked(effects=tuple(effects), reinstall=expired) if effects or expired else NOTHING_TICKED

    def _remove_old_gateways(self, now: float) -> list[Effect]:
        """Gateways of /64s outside the prefix plan (a renumbering's old ones) that no device's adverts
        still call valid: devices were told they are gone, so the router's routes for them go too (the
        ISP no longer routes them here). The plan's own /64s keep their ::1s, as IPv4 keeps gateways."""
        if not self.earlier_gateways:
            return []
        still_valid = {prefix for old in self.deprecated.values() for prefix, until in old.items() if until > now}
        gone = sorted(self.earlier_gateways - still_valid)
        self.earlier_gateways.difference_update(gone)
        self.gateways.difference_update(gone)
        return [RemoveIpv6Gateway(prefix) for prefix in gone]

    def _in_plan(self, prefix: str) -> bool:
        network = ipaddress.IPv6Network(prefix)
        delegated = self.plan.delegated
        return network.subnet_of(self.plan.ula) or (delegated is not None and network.subnet_of(delegated))
