"""Marks decided ahead of a connection's first packet (issue 26), part of the application priorities
concern (`AppPriorities.ahead`): the switch's marking table (`flows.marks`) holds

- every device's connections on an app's service ports, for the apps not at Normal (cookie
  `flows.PORT_MARKS_COOKIE`), made afresh when the household changes a priority;
- per device (its marks cookie), the addresses its lookups named for an app, both ways, marked when
  the resolver's answer goes out (at most `MAX_NAMED_PER_DEVICE`, the least recently answered giving
  way); the sockets its agent named a program for with no far end (an unconnected UDP socket, a
  call's media: at most `MAX_SOCKETS_PER_DEVICE`), marked when the report arrives; and while the
  device is over its share of High, its High apps' ports at Medium.

The ISP slice marks the same ahead (`slice_ahead`, as `downlink.Ahead` endpoints). What priority an
app has for a device (the household's, demoted) is the concern's, asked through the functions given.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable

from .. import flows
from ..effects import Effect, InstallRules, RemoveRules
from ..model import Device
from ..policy import apps, downlink, qos

# Per device, the addresses its lookups named for an app that are marked ahead; the least recently
# answered gives way (its marks are made afresh), so a device looking names up by the thousand costs
# the switch at most this many pairs of rules.
MAX_NAMED_PER_DEVICE = 256
MAX_SOCKETS_PER_DEVICE = 64


class AheadMarks:
    def __init__(
        self,
        app_table: apps.AppTable,
        household_priority: Callable[[str], str],
        priority: Callable[[Device, str], str],
        demoted: Callable[[str], bool],
        prefixes_of: Callable[[str], tuple[str, ...]],
        ipv6: bool,
    ):
        self.app_table = app_table
        self._household_priority, self._priority, self._demoted = household_priority, priority, demoted
        self._prefixes_of = prefixes_of  # a device's /64s (its IPv6 marks name them)
        self.ipv6 = ipv6  # the router runs IPv6: the ports' marks are for both families
        self.named: dict[str, OrderedDict[str, str]] = {}  # mac -> far address -> the app its lookups named
        self.sockets: dict[str, OrderedDict[tuple[int, int], str]] = {}  # mac -> (proto, port) -> its agent's app

    def knows(self, mac: str) -> bool:
        return mac in self.named or mac in self.sockets

    def forget(self, mac: str) -> None:
        self.named.pop(mac, None)
        self.sockets.pop(mac, None)

    def has_marks(self, mac: str) -> bool:
        """Whether the switch holds marks of the device's own (`flows.marks_cookie`)."""
        return mac in self.named or mac in self.sockets or self._demoted(mac)

    def switch_ready(self, devices: list[Device]) -> list[Effect]:
        """The switch holds nothing: the ports' marks, and the devices' own (those that have any)."""
        effects: list[Effect] = [InstallRules(tuple(self.port_marks()))]
        for device in devices:
            effects += self.marks_of(device)
        return effects

    def port_marks(self) -> frozenset[flows.FlowRule]:
        """Every device's connections on an app's service ports, marked for the household's priority."""
        return flows.port_marks(self.app_table.ports, self._household_priority, qos.mark_actions, self.ipv6)

    def name_answered(self, device: Device, address: str, app: str) -> list[Effect]:
        """The resolver told the device an address for a name of `app`: its connections with it are
        marked now, before the first one opens."""
        change = _remember(self.named.setdefault(device.mac, OrderedDict()), address, app, MAX_NAMED_PER_DEVICE)
        if change != NEW:
            return self.marks_of(device) if change == FULL else []  # made afresh without the one that gave way
        mark = qos.mark_actions(self._priority(device, app))
        return [InstallRules(tuple(flows.name_marks(device, address, mark, self._prefixes_of(device.mac))))]

    def socket_named(self, device: Device, proto: int, port: int, app: str) -> list[Effect]:
        """The device's agent named the program behind a socket with no far end (proto, its port): what
        it sends from there and what comes back is marked for that program's app from now on."""
        sockets = self.sockets.setdefault(device.mac, OrderedDict())
        change = _remember(sockets, (proto, port), app, MAX_SOCKETS_PER_DEVICE)
        if change != NEW:
            return self.marks_of(device) if change == FULL else []
        mark = qos.mark_actions(self._priority(device, app))
        return [InstallRules(tuple(flows.socket_marks(device, proto, port, mark, self._prefixes_of(device.mac))))]

    def marks_of(self, device: Device) -> list[Effect]:
        """The device's own marks, made afresh: the addresses its lookups named, the sockets its agent named
        and, while it is over its share of High, its High apps' ports at Medium."""
        prefixes = self._prefixes_of(device.mac)
        rules = []
        for address, app in self.named.get(device.mac, {}).items():
            rules += flows.name_marks(device, address, qos.mark_actions(self._priority(device, app)), prefixes)
        for (proto, port), app in self.sockets.get(device.mac, {}).items():
            rules += flows.socket_marks(device, proto, port, qos.mark_actions(self._priority(device, app)), prefixes)
        if self._demoted(device.mac):
            high = {app for app in self.app_table.ports.values() if self._household_priority(app) == qos.HIGH}
            medium = qos.mark_actions(qos.MEDIUM)
            rules += flows.demoted_port_marks(device, self.app_table.ports, high, medium, prefixes)
        effects: list[Effect] = [RemoveRules(flows.marks_cookie(device.mac))]
        if rules:
            effects.append(InstallRules(tuple(rules)))
        return effects

    def priorities_changed(
        self, changed: set[str], ports_before: frozenset, device_of: Callable[[str], Device]
    ) -> list[Effect]:
        """The household changed these apps' priorities: the ports' marks (if they changed: between the two
        a connection on these ports is Normal for a moment, as a miss is), and each device's own that
        name one of them."""
        effects: list[Effect] = []
        ports_now = self.port_marks()
        if ports_now != ports_before:
            effects += [RemoveRules(flows.PORT_MARKS_COOKIE), InstallRules(tuple(ports_now))]
        for mac in self.named.keys() | self.sockets.keys():
            if changed & {*self.named.get(mac, {}).values(), *self.sockets.get(mac, {}).values()}:
                effects += self.marks_of(device_of(mac))
        return effects

    def slice_ahead(self) -> list[downlink.Ahead]:
        """What the ISP slice marks ahead, as the router does: the High and Medium apps' service ports,
        and the addresses (IPv4 and IPv6) devices' lookups named for them."""
        ahead = [
            downlink.Ahead(proto, None, port, self._household_priority(app))
            for proto, port, app in flows.port_matches(self.app_table.ports)
            if self._household_priority(app) in downlink.SLICE_QUEUES
        ]
        for named in self.named.values():
            for address, app in named.items():
                if self._household_priority(app) in downlink.SLICE_QUEUES:
                    ahead.append(downlink.Ahead(None, address, None, self._household_priority(app)))
        return ahead


NEW, SAME, FULL = "new", "same", "full"


def _remember(memory: OrderedDict, key, app: str, limit: int) -> str:
    """Remember key's app (the most recent last): NEW, SAME (known already), or FULL (remembered, and the
    least recent gave way)."""
    if memory.get(key) == app:
        memory.move_to_end(key)
        return SAME
    memory[key] = app
    memory.move_to_end(key)
    if len(memory) > limit:
        memory.popitem(last=False)
        return FULL
    return NEW
