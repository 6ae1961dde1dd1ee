"""The household's decisions about one device, sequenced for `HomeRouter` (ws.v1 calls them): admit,
refuse, block, name it, pause it, give it a bedtime or an allowance, a plugged-in gate's change, DNS
rules, its own Wi-Fi passphrase. Each is recorded by the concern that holds it, then the device's rules follow.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from ..concerns.clone_watch import CloneWatch
from ..concerns.dns_gating import DnsGating
from ..concerns.household_controls import HouseholdControls
from ..concerns.passphrases import Passphrases
from ..concerns.port_binding import PortBinding
from ..concerns.registry import DeviceRegistry
from ..effects import AuthenticatorDeny, Effect, ResolveName
from ..errors import ApiError, DeviceBlocked, UnknownDevice
from ..model import Device, State, normalize_mac
from ..policy import dns_rules
from .reconciler import Reconciler

LOG = logging.getLogger(__name__)


@dataclass(frozen=True)
class HouseholdDecisions:
    clock: Callable[[], float]
    reconciler: Reconciler
    registry: DeviceRegistry
    clone_watch: CloneWatch
    port_binding: PortBinding
    controls: HouseholdControls
    dns_gating: DnsGating
    passphrases: Passphrases

    @property
    def devices(self) -> dict[str, Device]:
        return self.registry.devices

    def known(self, mac: str) -> Device:
        """The device with this MAC, which has asked to join (else UnknownDevice, ws.v1's 404)."""
        mac = normalize_mac(mac)
        device = self.devices.get(mac)
        if device is None:
            raise UnknownDevice(f"no device {mac} has asked to join")
        return device

    # -- admission

    def permit(self, mac: str) -> list[Effect]:
        return self._decide(self._not_blocked(self.known(mac)), State.PERMITTED)

    def deny(self, mac: str) -> list[Effect]:
        return self._decide(self._not_blocked(self.known(mac)), State.DENIED)

    def whitelist(self, mac: str) -> list[Effect]:
        """Admit a device, seen or not yet, without asking; lifts a blacklisting."""
        return self._decide(self._seen_or_not(mac), State.PERMITTED)

    def blacklist(self, mac: str) -> list[Effect]:
        return self._decide(self._seen_or_not(mac), State.BLACKLISTED)

    def rename(self, mac: str, name: str) -> list[Effect]:
        """What the household calls the device ("Grandma's iPad"); empty clears it."""
        device = self.known(mac)
        name = "".join(ch for ch in name if ch.isprintable()).strip()
        if len(name) > 64:
            raise ApiError("a device name has at most 64 characters")
        return self.reconciler.update(device.with_(name=name))

    @staticmethod
    def _not_blocked(device: Device) -> Device:
        """Permit and deny leave a blacklisted device as it is: the wall panel may do both, but only
        the owner lifts a block, with `whitelist`; deciding it here means no caller can skip it."""
        if device.state is State.BLACKLISTED:
            raise DeviceBlocked(
                f"{device.mac} is blocked; the owner must lift the block (whitelist) before it is permitted or denied"
            )
        return device

    def _seen_or_not(self, mac: str) -> Device:
        mac = normalize_mac(mac)
        return self.devices.get(mac) or Device(mac=mac, first_seen=self.clock())

    def _decide(self, device: Device, state: State) -> list[Effect]:
        LOG.info("household: %s %s -> %s", device.mac, device.state.value, state.value)
        self.clone_watch.household_decided(device.mac)
        self.port_binding.household_decided(device.mac)  # where it was last seen is its own port now
        effects = self.reconciler.update(device.with_(state=state))
        if (device.state is State.BLACKLISTED) != (state is State.BLACKLISTED):
            effects.append(AuthenticatorDeny(device.mac, state is State.BLACKLISTED))
        return effects

    # -- the household's controls: pauses, bedtimes, allowances

    def pause(self, mac: str) -> list[Effect]:
        return self._change(mac, self.controls.pause)

    def pause_for(self, mac: str, duration: str) -> list[Effect]:
        return self._change(mac, self.controls.pause_for, duration)

    def resume(self, mac: str, bedtime: bool = True) -> list[Effect]:
        """bedtime: whether tonight's bedtime is lifted too (only for whoever may change the schedule:
        `authority.KEYWORDS`); without, a pause ends and a running bedtime holds the device still."""
        device = self.known(mac)
        self.controls.resume(device.mac, bedtime)
        return self.reconciler.reconcile(device)

    def set_schedule(self, mac: str, text: str) -> list[Effect]:
        return self._change(mac, self.controls.set_schedule, text)

    def set_allowance(self, mac: str, amount: str) -> list[Effect]:
        return self._change(mac, self.controls.set_allowance, amount)

    def grant_bonus(self, mac: str, amount: str) -> list[Effect]:
        return self._change(mac, self.controls.grant_bonus, amount)

    def change_gate(self, mac: str, gate: str, change: Callable[[Any, str], None]) -> list[Effect]:
        """A plugged-in gate's operation on the device (`concerns/gates`), then its rules."""
        device = self.known(mac)
        self.controls.change_gate(gate, change, device.mac)
        return self.reconciler.reconcile(device)

    # -- shared allowances (a person's devices together)

    def set_shared_allowance(self, name: str, amount: str) -> list[Effect]:
        return self._reconcile_all(self.controls.set_shared_allowance(name, amount))

    def share_allowance(self, name: str, macs: str) -> list[Effect]:
        """macs: the devices that share it, comma-separated (empty: none). Only devices the router knows
        can share one (the web UI names every device a person owns; those not seen yet are left out)."""
        wanted = {normalize_mac(m) for m in macs.split(",") if m.strip()}
        return self._reconcile_all(self.controls.share_allowance(name, sorted(m for m in wanted if m in self.devices)))

    def grant_shared_bonus(self, name: str, amount: str) -> list[Effect]:
        return self._reconcile_all(self.controls.grant_shared_bonus(name, amount))

    def _reconcile_all(self, macs: set[str]) -> list[Effect]:
        return self.reconciler.reconcile_each(self.devices[mac] for mac in sorted(macs) if mac in self.devices)

    def _change(self, mac: str, change: Callable[..., None], *args: str) -> list[Effect]:
        """A household's change to one device's controls (a pause, a schedule, an allowance), then its rules."""
        device = self.known(mac)
        change(device.mac, *args)
        return self.reconciler.reconcile(device)

    # -- DNS rules

    def deny_dns(self, mac: str, domain: str) -> list[Effect]:
        return self._set_dns_rule(mac, domain, dns_rules.DENY)

    def permit_dns(self, mac: str, domain: str) -> list[Effect]:
        return self._set_dns_rule(mac, domain, dns_rules.ALLOW)

    def dns_rules_of(self, mac: str) -> list[dict]:
        return self.dns_gating.rules_of(self.known(mac).mac)

    def _set_dns_rule(self, mac: str, domain: str, action: str) -> list[Effect]:
        device = self.known(mac)
        domain, new = self.dns_gating.set_rule(device.mac, domain, action)
        lifted = self.dns_gating.recompute(device.mac)
        effects = self.reconciler.reconcile(device, reinstall=lifted) + self.reconciler.install_blocks(device)
        if new == dns_rules.DENY:
            effects.append(ResolveName(domain))  # learn its addresses now, not when someone asks
        return effects

    # -- its own Wi-Fi passphrase

    def issue_wifi_key(self, mac: str) -> dict:
        """A new passphrase of the device's own (replacing one it had); the answer carries it and its QR code."""
        return self.passphrases.issue(self.known(mac))

    def revoke_wifi_key(self, mac: str) -> dict:
        """The device joins with the shared passphrase again (from its next association)."""
        return self.passphrases.revoke(normalize_mac(mac))

    def wifi_key_of(self, mac: str) -> dict:
        return self.passphrases.key_of(normalize_mac(mac))
