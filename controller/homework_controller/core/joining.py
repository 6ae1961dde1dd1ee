"""A device coming onto the home network, sequenced for `HomeRouter`: its DHCP, its ARP for its
gateway, the radio's word of the passphrase it joined with (the same device under a new MAC, or a
copy of one), and its frames on an access port (the port it is bound to).

These events involve several concerns (the registry's lease, the newcomers' cap, the clone watch,
port binding, passphrases), so they are sequenced here, and every change to a device's rules goes
through the reconciler.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from .. import flows
from ..concerns import port_binding
from ..concerns.clone_watch import CloneWatch
from ..concerns.lookalikes import Lookalikes, may_be_merged_into
from ..concerns.newcomers import Newcomers
from ..concerns.passphrases import Passphrases
from ..concerns.registry import DeviceRegistry
from ..concerns.switch_mirror import SwitchMirror
from ..effects import (
    AuthenticatorDeny,
    AuthenticatorForget,
    AuthenticatorKick,
    Effect,
    PublishWifiKeys,
    SendFrame,
    TellHousehold,
)
from ..errors import Conflict, UnknownDevice
from ..lifecycle import Concern, Moves
from ..model import Device, State, normalize_mac
from ..policy import dhcp, fingerprints
from ..wire import dhcp_wire, packets
from .reconciler import Reconciler

LOG = logging.getLogger(__name__)
# What a known device's frame on an access port is (`Joining._saw_on_port`).
HERE, ROAMING, COPY = "here", "roaming", "copy"


@dataclass(frozen=True)
class Joining:
    clock: Callable[[], float]
    counters: dict[str, int]
    lease_policy: dhcp.LeasePolicy
    reconciler: Reconciler
    registry: DeviceRegistry
    switch: SwitchMirror
    newcomers: Newcomers
    clone_watch: CloneWatch
    port_binding: port_binding.PortBinding
    passphrases: Passphrases
    concerns: tuple[Concern, ...]
    follow_the_device: tuple[Moves, ...]

    @property
    def devices(self) -> dict[str, Device]:
        return self.registry.devices

    def on_dhcp(self, frame: packets.Frame) -> list[Effect]:
        try:
            req = dhcp_wire.decode_request(frame.payload)
        except dhcp_wire.MalformedDhcp as exc:
            self.counters["dhcp_malformed"] += 1
            LOG.info("dropped malformed DHCP from %s: %s", frame.eth_src, exc)
            return []
        if req.chaddr != frame.eth_src:
            # A device asking on behalf of another MAC would take over that device's lease.
            self.counters["dhcp_spoofed_chaddr"] += 1
            LOG.warning("dropped DHCP %s from %s claiming to be %s", req.name, frame.eth_src, req.chaddr)
            return []
        now = self.clock()
        before = self.devices.get(req.chaddr)
        effects: list[Effect] = []
        port = flows.port_of_mark(frame.eth_dst)  # the access port it asked on (None: the switch did not say)
        if port is not None and before is not None:
            where, moves = self._saw_on_port(before, port, now)
            if where != HERE:
                return moves  # its MAC on another port than its own: not served there
            effects += moves
        if before is None and req.msg_type == dhcp_wire.DISCOVER:
            effects += self._make_room_for_a_newcomer()
        outcome = dhcp.serve(req, before, now, self.lease_policy, self.registry.allocate_subnet)
        LOG.debug("DHCP %s from %s (%s): %s", req.name, req.chaddr, req.hostname or "-", outcome.log)
        effects += self.clone_watch.served(req, before, outcome, now)
        if port is not None and before is None and outcome.device is not None:
            self.port_binding.saw(req.chaddr, port)  # a newcomer: the port it first asks on is its own
        if outcome.device is not None and outcome.device != before:
            effects += self.reconciler.update(outcome.device)
        for kind, msg in outcome.events:
            effects += (
                self.newcomers.announce(req.chaddr, msg)
                if kind == "new-device"
                else [TellHousehold(kind, req.chaddr, msg)]
            )
        if outcome.lease_action and outcome.device is not None:
            effects.append(self.registry.record_lease(outcome.device, outcome.lease_action))
            effects += self.newcomers.took_lease(req.chaddr)
        answer = dhcp.answer(outcome, self.switch.ports()[1]) if outcome.reply is not None else None
        if answer is not None:
            if answer.after_rules:
                effects.append(answer)
            else:
                effects.insert(0, answer)
        return effects

    def on_arp(self, in_port, frame: packets.Frame) -> list[Effect]:
        """Proxy ARP: the router answers for gateways (to devices) and for devices (to its own stack)."""
        req = frame.arp
        if req is None or req.opcode != packets.ARP_REQUEST:  # replies and gratuitous ARP get no answer
            return []
        if in_port == flows.LOCAL:
            target = self.registry.arp_answered_for(req.dst_ip)
            if target:
                return [SendFrame(flows.LOCAL, packets.arp_reply(target.mac, req.dst_ip, req.src_mac, req.src_ip))]
            return []
        if not self.registry.asks_for_its_gateway(frame.eth_src, req.src_mac, req.src_ip, req.dst_ip):
            return []
        router_mac = self.switch.ports()[1]
        answer = SendFrame(in_port, packets.arp_reply(router_mac, req.dst_ip, req.src_mac, req.src_ip))
        if self.devices[frame.eth_src].state is State.PENDING:
            return [answer, *self.newcomers.used(frame.eth_src)]  # here and using its address: it keeps its place
        return [answer]

    def on_admission_copy(self, in_port, frame: packets.Frame) -> list[Effect]:
        """A frame the admission table sent the controller: a device's ARP, or a bound device's MAC on
        another access port (flows' ELSEWHERE)."""
        device = self.devices.get(frame.eth_src)
        effects: list[Effect] = []
        if in_port != flows.LOCAL and device is not None:
            where, effects = self._saw_on_port(device, in_port, self.clock())
            if where == COPY:
                return effects
            if where == ROAMING and frame.arp is None:
                return effects
            # Moved here: its rules follow; what it sent (DHCP, say) is not served now, its retry is. Its ARP for
            # its gateway is answered even before the access point's word (the router's MAC, no secret): it asks
            # as it reassociates, and unanswered it asks again only a second later, when its rules have long
            # followed it (the radio story's roams each waited that second).
        return effects + (self.on_arp(in_port, frame) if frame.arp is not None else [])

    def station_joined(self, mac: str, keyid: str, port: int | None = None) -> list[Effect]:
        """An access point (hostapd): a station joined it with the passphrase `keyid` (AP-STA-CONNECTED).
        port: the access port that access point is on (None: not known, or not one the switch has), which
        is where the device is now if it roamed there (`port_binding.authenticated`)."""
        mac = normalize_mac(mac)
        owner = self.passphrases.device_with(keyid)
        if owner == mac:
            self.passphrases.joined_with_own(mac)
            return self._authenticated_at(mac, port, proven=True)  # the device, with its own passphrase
        device = self.devices.get(owner) if owner is not None else None
        if device is not None:
            there = self.devices.get(mac)
            if there is None or there.state is State.PENDING:
                moved = self._moved(device, mac, "it joined with its own passphrase")
                self.passphrases.joined_with_own(mac)
                return moved + self._authenticated_at(mac, port, proven=True)
            # Another decided device's address with this device's passphrase: neither device.
            differs = [f"joined with {device.label}'s passphrase"]
            return [AuthenticatorKick(mac, port), *self._suspect_clone(mac, differs)]
        # Given its own passphrase, a device keeps the connection it has until it switches: another
        # passphrase with its MAC is a copy's only once it has joined with its own.
        differs = fingerprints.wrong_key(self.passphrases.keyid_in_use(mac), keyid)
        if not differs:
            return self._authenticated_at(mac, port, proven=False)
        # Not the device, whose passphrase is its own: off the air, and the household told.
        return [AuthenticatorKick(mac, port), *self._suspect_clone(mac, differs)]

    def station_left(self, mac: str, port: int | None) -> list[Effect]:
        """An access point: a station left it (AP-STA-DISCONNECTED). A device that had roamed from there
        with the guest passphrase moves to where it is now (`port_binding.left`)."""
        mac = normalize_mac(mac)
        if port is None or self.port_binding.left(mac, port) is None:
            return []
        device = self.devices.get(mac)
        if device is None:
            return []
        LOG.info("%s left access port %d: it roamed to port %s", mac, port, self.port_binding.port_of(mac))
        return self.reconciler.reconcile(device)

    def stations_at(self, port: int | None, macs: set[str]) -> list[Effect]:
        """An access point's list of its stations (when it (re)starts, or is heard again): those not on it
        left it unheard (`station_left`). The ones on it are then judged as if they had just joined."""
        if port is None:
            return []
        moved = self.port_binding.only_these_at(port, {normalize_mac(m) for m in macs})
        return self.reconciler.reconcile_each(self.devices[mac] for mac in moved if mac in self.devices)

    def listed_at(self, port: int, macs: Iterable[str]) -> list[Effect]:
        """The stations the access point on `port` lists now (the router's radio, read every few seconds): it
        forgets those bound at another access point since (`AuthenticatorForget`), in case the word at their
        roam came while they were still heard there."""
        return [AuthenticatorForget(mac, port) for mac in self.port_binding.stale_at(port, macs)]

    def _authenticated_at(self, mac: str, port: int | None, proven: bool) -> list[Effect]:
        """The access point on `port` authenticated the station: a device it roamed to moves there, its
        address, decisions and rules with it (its rules follow it to that port), and the access point it
        left without a word forgets it (`AuthenticatorForget`), so that its next visit there is a first one.
        And it is told where its gateway is (`_gateway_told`)."""
        if port is None:
            return []
        binding = self.port_binding.authenticated(mac, port, proven)
        device = self.devices.get(mac)
        if binding == port_binding.ELSEWHERE or device is None:
            return []
        effects = [] if binding == port_binding.OWN else self.reconciler.reconcile(device)
        if binding == port_binding.MOVED:
            LOG.info("%s roamed to access port %d (%s)", mac, port, "its own passphrase" if proven else "guest")
            effects += [AuthenticatorForget(mac, p) for p in self.port_binding.left_unheard(mac)]
        return effects + self._gateway_told(device, port)

    def _gateway_told(self, device: Device, port: int) -> list[Effect]:
        """An ARP answer for its gateway, unasked, out of the port it (re)associated on, and the IPv6 router's
        whereabouts (`Ipv6.router_told`). A station's stack forgets its neighbours when its link goes down, as
        it does for a moment at every (re)association; the ARP it sends for its gateway meanwhile is lost with
        the link, and it asks again only a second later (the radio story's roams each waited that second, in
        both directions). Its stack takes this answer as the one it is waiting for."""
        if not device.lease_active(self.clock()):
            return []
        assert device.subnet is not None  # a live lease has one
        router_mac = self.switch.ports()[1]
        answer = packets.arp_reply(router_mac, device.subnet.gateway, device.mac, device.subnet.device_ip)
        return [SendFrame(port, answer), *self.reconciler.ipv6.router_told(device.mac, port)]

    def merge(self, mac: str, into: str) -> list[Effect]:
        """The household says the newcomer at `mac` is the device `into`, back under a new MAC without a
        passphrase of its own to say so (offered as its status' `looks_like`): moved as by `_moved`. Only
        a pending newcomer, and only into the device the router offered for it (`lookalikes`: permitted,
        not on the network now, no passphrase of its own, the newcomer's whole DHCP client alike), for
        every role: a merge moves a device's decisions, so a merge into any other would lift a block or
        hand a guest's device another's identity."""
        mac, into = normalize_mac(mac), normalize_mac(into)
        newcomer, device = self.devices.get(mac), self.devices.get(into)
        if newcomer is None or device is None:
            raise UnknownDevice(f"no device {mac if newcomer is None else into} has asked to join")
        if newcomer.state is not State.PENDING:
            raise Conflict(f"{newcomer.label} is decided already: only a newcomer is merged into a device")
        own_passphrase = self.passphrases.has_own(device.mac)
        if not may_be_merged_into(device, self.clock(), own_passphrase):
            if own_passphrase:
                raise Conflict(f"{device.label} has its own passphrase: it says who it is when it joins with it")
            if device.state in (State.BLACKLISTED, State.DENIED):
                raise Conflict(f"{device.label} is {device.state.value}: a newcomer is never merged into it")
            raise Conflict(f"{device.label} is {'a newcomer too' if device.state is State.PENDING else 'online now'}")
        lookalikes = Lookalikes(
            self.devices.values(), self.clock(), self.clone_watch.fingerprint_of, self.passphrases.has_own
        )
        offered = lookalikes.looks_like(newcomer)
        if offered is None or offered["mac"] != device.mac:
            raise Conflict(
                f"{newcomer.label} was not offered as {device.label}: only the device it looks like is merged"
            )
        return self._moved(device, mac, "the household said it is the same device")

    def _moved(self, device: Device, new_mac: str, how: str) -> list[Effect]:
        """The device is back under `new_mac` (a phone's private address): its record, decisions, name,
        rules, passphrase and controls follow it (a newcomer it was taken for under the new MAC goes); the
        old MAC's rules leave the switch. how: what says it is the device, for the household."""
        old_mac = device.mac
        LOG.info("%s is back as %s (%s)", old_mac, new_mac, how)
        effects: list[Effect] = []
        newcomer = self.devices.get(new_mac)
        if newcomer is not None:
            effects += self.reconciler.forget(newcomer)
        if device.lease_active(self.clock()):
            effects.append(self.registry.record_lease(device, "released"))
        effects += self.reconciler.evict(device) + self.reconciler.forget_neighbours(device)  # its addresses, a new MAC
        self.switch.set_forwarding(old_mac, False, None)  # broadcast follows with the new MAC's reconcile, below
        for concern in self.concerns:
            if concern not in self.follow_the_device:
                concern.forget(old_mac)
        for follower in self.follow_the_device:
            follower.move(old_mac, new_mac)
        if device.state is State.BLACKLISTED:
            effects += [AuthenticatorDeny(old_mac, False), AuthenticatorDeny(new_mac, True)]
        message = f"{device.label} is back from a new address, {new_mac} ({how}): it is still {device.label}"
        return [
            *effects,
            PublishWifiKeys(),  # its key id names its new MAC
            TellHousehold("new-address", new_mac, message),
            *self.reconciler.reconcile(self.devices[new_mac]),
        ]

    def _saw_on_port(self, device: Device, port: int, now: float) -> tuple[str, list]:
        """A known device's frame came in on access port `port`: HERE (its port, or it is bound here now), ROAMING
        (a roam's first frames, before the access point's word: no alarm) or COPY (a copied MAC: the household
        told); its frame is served only HERE. And the effects (its rules on its new port; the alert)."""
        seen = self.port_binding.saw(device.mac, port, leased=device.lease_active(now))
        if seen == port_binding.OWN:
            return HERE, []
        if seen == port_binding.ELSEWHERE:
            if self.port_binding.word_on_its_way(device.mac, port, now):
                return ROAMING, []
            return COPY, self._suspect_clone(device.mac, [self.port_binding.elsewhere(device.mac, port)])
        if seen == port_binding.MOVED:
            LOG.info("%s moved to access port %d (its own had no link)", device.mac, port)
        return HERE, self.reconciler.reconcile(device)

    def _suspect_clone(self, mac: str, differs: list[str]) -> list[Effect]:
        device = self.devices.get(mac)
        return self.clone_watch.suspect(mac, differs, device.label if device else mac)

    def _make_room_for_a_newcomer(self) -> list[Effect]:
        """The pending device that makes way for a newcomer (if the pending are at their cap) is forgotten
        by every concern, and its meter and rules leave the switch."""
        oldest = self.newcomers.evictee(len(self.devices), self.registry.pending)
        if oldest is None:
            return []
        self.counters["pending_evicted"] += 1
        return self.reconciler.forget(oldest)
