"""A device's rules on the switch, from every concern's word about it (sequenced for `HomeRouter`).

Each concern says its part (the registry whether the device forwards now, the household's controls
whether it is held back, DNS gating whether its DNS is gated and which addresses it may not reach, port
binding its port, IPv6 its /64s); `reconcile` merges them into the device's one rule set under its one
cookie, and the switch mirror says what changes that takes. Everything that changes a device's rules comes through here.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass

from .. import flows
from ..concerns.accounting import Accounting
from ..concerns.app_priorities import AppPriorities
from ..concerns.dns_gating import DnsGating
from ..concerns.household_controls import HouseholdControls
from ..concerns.ipv6 import Ipv6
from ..concerns.port_binding import PortBinding
from ..concerns.registry import DeviceRegistry
from ..concerns.switch_mirror import SwitchMirror
from ..effects import Effect, ForgetNeighbours, InstallRules, RemoveRules
from ..lifecycle import Concern
from ..model import Device


@dataclass(frozen=True)
class Reconciler:
    """Built by `HomeRouter` with the concerns whose word makes a device's rules."""

    clock: Callable[[], float]
    registry: DeviceRegistry
    switch: SwitchMirror
    controls: HouseholdControls
    port_binding: PortBinding
    accounting: Accounting
    dns_gating: DnsGating
    priorities: AppPriorities
    ipv6: Ipv6
    concerns: tuple[Concern, ...]  # every one: each forgets a forgotten device

    def update(self, device: Device) -> list[Effect]:
        """The device's record changed (a lease, a decision, a name): recorded, and its rules after it."""
        self.registry.record(device)
        return self.reconcile(device)

    def reconcile(self, device: Device, reinstall: bool = False) -> list[Effect]:
        """Bring the switch's rules for one device in line with its state (reinstall: even if they are)."""
        return self.reconcile_each((device,), reinstall)

    def reconcile_each(self, devices: Iterable[Device], reinstall: bool = False) -> list[Effect]:
        """`reconcile` for many devices at once (the clock, a switch that reconnected, a renumbering), with
        broadcast, which names every forwarding device, rebuilt once after them all."""
        effects = [effect for device in devices for effect in self._bring_in_line(device, reinstall)]
        return effects + self.switch.broadcast_changes(self.registry.devices.__getitem__)

    def _bring_in_line(self, device: Device, reinstall: bool) -> list[Effect]:
        """One device's rules brought in line (its changes), and whether it forwards recorded for broadcast."""
        access_ports, router_mac = self.switch.access_ports, self.switch.router_mac
        if not access_ports or router_mac is None:
            return []  # no switch yet: it gets everything when it connects
        held = not self.controls.may_forward(device.mac)
        wanted = flows.device_rules(
            device,
            self.clock(),
            access_ports,
            router_mac,
            port=self.port_binding.port_of(device.mac),
            dns_gated=self.dns_gating.gated(device.mac),
            held=held,
            gates=self.controls.rules_of(device.mac),
        )
        forwards = self.registry.forwarding_now(device) and not held
        effects, dropped = self.switch.reconcile(device, wanted, forwards, reinstall)
        if not effects:
            return []
        if dropped:
            # What they keep under the device's cookie (learnt flows, blocks) went with its rules.
            for concern in (self.accounting, self.priorities, self.dns_gating):
                concern.rules_dropped(device.mac)
        effects += self.ipv6.changes(device, wanted)
        if wanted is not None:
            effects += self.install_blocks(device)
        self.switch.set_forwarding(device.mac, forwards, wanted)
        return effects

    def install_blocks(self, device: Device | None, ips=None) -> list[Effect]:
        """Drop rules from the device to those of ips (default: all its blocked addresses) the switch
        does not hold yet, if it forwards."""
        if device is None or not self.switch.holds_rules_of(device.mac) or not self.registry.forwarding_now(device):
            return []
        prefixes = self.ipv6.current_prefixes(device.mac)
        rules = self.dns_gating.block_rules(device, ips, prefixes)
        return [InstallRules(tuple(rules))] if rules else []

    def forget(self, device: Device) -> list[Effect]:
        """Every concern forgets the device; its meter and rules leave the switch, and the router's stack
        the MAC it had for its addresses (its /30 goes to the next newcomer)."""
        effects = self.evict(device) + self.forget_neighbours(device)
        for concern in self.concerns:
            concern.forget(device.mac)
        return effects + self.switch.broadcast_changes(self.registry.devices.__getitem__)

    def evict(self, device: Device) -> list[Effect]:
        """Its rules and meter off the switch, and its marks (what its lookups and its agent named)."""
        effects = self.switch.evict(device)
        if self.priorities.ahead.has_marks(device.mac):
            effects.append(RemoveRules(flows.marks_cookie(device.mac)))
        return effects

    def forget_neighbours(self, device: Device) -> list[Effect]:
        """The router's stack forgets which MAC has the device's addresses (`ForgetNeighbours`)."""
        if device.subnet is None:
            return []
        # Its /64s if it forwards: a device that does not (a pending one) was never given any, so a storm
        # of newcomers making way costs the kernel one IPv4 entry each, not a walk of its IPv6 ones.
        prefixes = self.ipv6.current_prefixes(device.mac)
        return [ForgetNeighbours(device.subnet.device_ip, device.mac, prefixes)]
