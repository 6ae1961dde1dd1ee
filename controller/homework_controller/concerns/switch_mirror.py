"""The switch mirror, the concern: what the switch holds for the router (each device's rule set, its
meters, the gateway addresses on the router's stack, the broadcast rules) and the changes that bring
a device's rules in line with what they should be (reconciled, not patched: a device's rules go by
its one cookie and its new set is installed).
"""

from __future__ import annotations

from collections.abc import Callable

from .. import flows
from ..effects import (
    AddGatewayAddress,
    Effect,
    InstallGroup,
    InstallMeter,
    InstallRules,
    RemoveExactRules,
    RemoveGroup,
    RemoveMeter,
    RemoveRules,
)
from ..flows import base_flows, flows_v6
from ..lifecycle import SwitchFacts, Ticked
from ..model import Device


class SwitchMirror:
    def __init__(self, ipv6: bool = False):
        self.ipv6 = ipv6  # the router runs IPv6: its link-scope multicast is copied among devices as IPv4's broadcast
        self.access_ports: tuple[int, ...] = ()  # where devices are (the radio's port, wired ones)
        self.router_mac: str | None = None
        self.installed: dict[str, flows.DeviceRules] = {}  # each device's rule set on the switch
        self.meters: set[int] = set()
        self.gateways: set[int] = set()  # subnets whose gateway address the router's stack holds
        self.forwarding: dict[str, tuple[int, ...]] = {}  # devices whose forwarding rules are installed: their ports
        self.broadcast: dict[tuple, flows.FlowRule] = {}  # the broadcast rules on the switch, by their slot
        self.groups: dict[int, flows.CopyGroup] = {}  # the groups of broadcast copies on the switch
        self.forwarding_changed = False  # since broadcast was last asked for

    # -- the lifecycle

    def switch_ready(self, switch: SwitchFacts) -> list[Effect]:
        """The switch (re)connected and holds nothing: the newcomers' meter and the base rules first."""
        access_ports = switch.access_ports
        assert access_ports, "a switch without an access port has no devices"
        self.access_ports, self.router_mac = access_ports, switch.router_mac
        self.installed, self.meters, self.gateways = {}, {flows.NEWCOMERS_METER.meter_id}, set()
        self.forwarding, self.broadcast, self.groups = {}, {}, {}
        self.forwarding_changed = False
        return [InstallMeter(flows.NEWCOMERS_METER), InstallRules(tuple(base_flows.base_rules(access_ports)))]

    def tick(self, now: float) -> Ticked:
        """Every device with rules has them reconciled: the household's time (bedtimes, pauses, allowances)
        and the other concerns' ticks change what they should be."""
        return Ticked(reconcile=list(self.installed))

    def knows(self, mac: str) -> bool:
        return mac in self.installed or mac in self.forwarding

    def forget(self, mac: str) -> None:
        """Its rules and meter are no longer the router's to track (`evict` said what to remove)."""
        self.installed.pop(mac, None)
        if self.forwarding.pop(mac, None) is not None:
            self.forwarding_changed = True

    # -- queries

    def ports(self) -> tuple[tuple[int, ...], str]:
        """The access ports and the router's MAC: known once the switch has connected, which
        it has whenever a packet arrives from it."""
        assert self.access_ports and self.router_mac is not None, "no switch yet"
        return self.access_ports, self.router_mac

    def holds_rules_of(self, mac: str) -> bool:
        return mac in self.installed

    # -- changes

    def reconcile(
        self, device: Device, wanted: flows.DeviceRules | None, forwards: bool, reinstall: bool = False
    ) -> tuple[list, bool]:
        """The changes that give the device the rule set wanted (reinstall: even if it has it), and
        whether its rules left the switch (and what else went with its cookie: learnt flows, blocks)."""
        have = self.installed.get(device.mac)
        if wanted == have and not reinstall:
            return [], False
        effects: list[Effect] = []
        if forwards and device.subnet and device.subnet.index not in self.gateways:
            # Only a permitted device talks to the router's own stack; a pending one gets DHCP
            # and ARP from the controller, so a storm of newcomers costs no netlink work.
            self.gateways.add(device.subnet.index)
            effects.append(AddGatewayAddress(device.subnet))
        meters = wanted.meters if wanted is not None else ()
        for band in meters:
            if band.meter_id not in self.meters:
                self.meters.add(band.meter_id)
                effects.append(InstallMeter(band))
        if have is not None:
            # Deleting by cookie also ends flows in progress (a denied device is cut off at
            # once) and takes its learnt flows with it: they are learnt again as they pass.
            effects.append(RemoveRules(flows.device_cookie(device)))
        if wanted is not None:
            # In any order: no two rules of a set match the same packets at the same rule priority.
            effects.append(InstallRules(wanted))
            self.installed[device.mac] = wanted
        else:
            self.installed.pop(device.mac, None)
        # Its budget towards the portal, once its rules no longer use it (it forwards, or has no live lease): after
        # the rules that did are gone (OpenFlow deletes a meter's rules with it).
        portal = flows.portal_meter_of(device.subnet).meter_id if device.subnet else None
        if portal in self.meters and all(band.meter_id != portal for band in meters):
            self.meters.discard(portal)
            effects.append(RemoveMeter(portal))
        return effects, have is not None

    def set_forwarding(self, mac: str, forwards: bool, rules: flows.DeviceRules | None) -> None:
        """Whether the device forwards, and out of which ports (those of its rule set; without one, every
        access port): what broadcast reaches, at the next `broadcast_changes`."""
        own_ports = (rules.own_ports if rules is not None else self.access_ports) if forwards else None
        if self.forwarding.get(mac) == own_ports:
            return
        if own_ports is None:
            del self.forwarding[mac]
        else:
            self.forwarding[mac] = own_ports
        self.forwarding_changed = True

    def broadcast_changes(self, device_of: Callable[[str], Device]) -> list[Effect]:
        """Broadcast reaches exactly the devices that forward, out of their own ports: rebuilt when those
        changed, and only what differs from what the switch holds sent. The router asks once per operation,
        not once per device (`Reconciler.reconcile_each`)."""
        if not self.forwarding_changed:
            return []
        self.forwarding_changed = False
        permitted = [device_of(m) for m in sorted(self.forwarding)]
        copies = base_flows.BroadcastCopies(self.forwarding)
        rules = base_flows.broadcast_rules(permitted, self.access_ports, copies)
        if self.ipv6:
            rules += flows_v6.multicast_rules(permitted, copies)
        wanted = {r.slot: r for r in rules}
        groups = {g.group_id: g for g in copies.groups()}
        # The groups first (a rule may name only a group the switch holds), the rules that no longer name a
        # group before it goes.
        effects: list[Effect] = [
            InstallGroup(group, replace=group_id in self.groups)
            for group_id, group in groups.items()
            if self.groups.get(group_id) != group
        ]
        if changed := tuple(r for slot, r in wanted.items() if self.broadcast.get(slot) != r):
            effects.append(InstallRules(changed))
        if gone := tuple(r for slot, r in self.broadcast.items() if slot not in wanted):
            effects.append(RemoveExactRules(gone))
        effects += [RemoveGroup(group_id) for group_id in self.groups if group_id not in groups]
        self.broadcast, self.groups = wanted, groups
        return effects

    def evict(self, device: Device) -> list[Effect]:
        """A forgotten device's rules and meters off the switch."""
        effects: list[Effect] = []
        if device.subnet:
            if self.installed.pop(device.mac, None) is not None:
                effects.append(RemoveRules(flows.device_cookie(device)))
            for meter in (flows.device_meter(device).meter_id, flows.portal_meter_of(device.subnet).meter_id):
                if meter in self.meters:
                    self.meters.discard(meter)
                    effects.append(RemoveMeter(meter))
        return effects
