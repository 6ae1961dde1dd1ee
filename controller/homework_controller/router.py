"""The router's policy core: state in, effects out.

`HomeRouter` holds the device table and answers each event (a DHCP or ARP
packet, a DNS query, a household decision, the clock) with a list of effects
for the I/O edge to carry out: rules to install or remove, frames to send,
gateway addresses to add, events to tell the household. It never talks to a
switch, a socket or the kernel itself, so unit tests drive it directly.
"""
from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from typing import Callable

import dnslib

from . import dhcp, flows, packets
from .model import FIRST_DEVICE_SUBNET, SUBNET_COUNT, Device, State, Subnet, normalize_mac
from .store import DeviceStore, StoreError

LOG = logging.getLogger(__name__)


# ---- effects ---------------------------------------------------------------

@dataclass(frozen=True)
class InstallRules:
    rules: tuple[flows.FlowRule, ...]


@dataclass(frozen=True)
class RemoveRules:
    cookie: int


@dataclass(frozen=True)
class SendFrame:
    port: int | str
    data: bytes


@dataclass(frozen=True)
class AddGatewayAddress:
    subnet: Subnet


@dataclass(frozen=True)
class ForwardDns:
    """Relay a query upstream; the answer goes back as a frame built from `reply_to`."""

    query: bytes
    device_mac: str
    reply_to: tuple  # (eth_src, eth_dst, ip_src, ip_dst, sport, dport) of the answer frame


@dataclass(frozen=True)
class TellHousehold:
    kind: str
    mac: str
    message: str


class ApiError(Exception):
    status = 400


class UnknownDevice(ApiError):
    status = 404


class NoFreeSubnet(RuntimeError):
    pass


# ---- the core --------------------------------------------------------------

class HomeRouter:
    def __init__(self, store: DeviceStore, lease_policy: dhcp.LeasePolicy = dhcp.LeasePolicy(),
                 clock: Callable[[], float] = time.time):
        self.store = store
        self.lease_policy = lease_policy
        self.clock = clock
        self.devices: dict[str, Device] = store.load()
        self.used_subnets = {d.subnet.index for d in self.devices.values() if d.subnet}
        self.mac_by_subnet = {d.subnet.index: d.mac for d in self.devices.values() if d.subnet}
        self.installed: dict[str, frozenset[flows.FlowRule]] = {}
        self.wlan_port: int | None = None
        self.router_mac: str | None = None
        self.counters = {"dhcp_malformed": 0, "dhcp_spoofed_chaddr": 0, "dns_malformed": 0,
                         "frames_malformed": 0, "store_errors": 0, "dns_overload_dropped": 0}

    # -- switch lifecycle

    def switch_ready(self, wlan_port: int, router_mac: str) -> list:
        """The switch (re)connected: it has no rules; give it the whole rule set."""
        self.wlan_port, self.router_mac = wlan_port, router_mac
        self.installed = {}
        effects: list = [InstallRules(tuple(flows.base_rules(wlan_port)))]
        for device in self.devices.values():
            if device.subnet:
                effects.append(AddGatewayAddress(device.subnet))
            effects += self._reconcile(device)
        return effects

    # -- packets

    def on_dhcp(self, frame: packets.Frame) -> list:
        try:
            req = dhcp.decode_request(frame.payload)
        except dhcp.MalformedDhcp as exc:
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
        outcome = dhcp.serve(req, before, now, self.lease_policy, self._allocate_subnet)
        LOG.debug("DHCP %s from %s (%s): %s", req.name, req.chaddr, req.hostname or "-", outcome.log)
        effects: list = []
        if outcome.device is not None and outcome.device != before:
            if before is None or before.subnet != outcome.device.subnet:
                effects.append(AddGatewayAddress(outcome.device.subnet))
            effects += self._update(outcome.device)
        effects += [TellHousehold(kind, req.chaddr, msg) for kind, msg in outcome.events]
        if outcome.reply is not None:
            reply = outcome.reply
            effects.append(SendFrame(self.wlan_port, packets.udp_frame(
                self.router_mac, reply.dst_mac, reply.server_ip, reply.dst_ip, 67, 68,
                dhcp.encode_reply(reply))))
        return effects

    def on_arp(self, in_port, frame: packets.Frame) -> list:
        """Proxy ARP: the router answers for gateways (to devices) and for devices (to its own stack)."""
        req = frame.arp
        if req.opcode != 1:  # only requests get answers; replies and gratuitous ARP are dropped
            return []
        if in_port == flows.LOCAL:
            target = self._device_by_ip(req.dst_ip)
            if target and target.forwards and target.lease_active(self.clock()):
                return [SendFrame(flows.LOCAL, packets.arp_reply(target.mac, req.dst_ip, req.src_mac, req.src_ip))]
            return []
        device = self.devices.get(frame.eth_src)
        if (device is None or device.subnet is None or req.src_mac != frame.eth_src
                or device.state not in (State.PENDING, State.PERMITTED)
                or req.src_ip not in (device.subnet.device_ip, dhcp.ZERO_IP)
                or req.dst_ip != device.subnet.gateway):
            return []
        return [SendFrame(self.wlan_port, packets.arp_reply(self.router_mac, req.dst_ip,
                                                             req.src_mac, req.src_ip))]

    def on_dns(self, frame: packets.Frame) -> list:
        """A DNS query from a permitted device (the switch only sends those here)."""
        try:
            dnslib.DNSRecord.parse(frame.payload)
        except Exception:  # dnslib raises DNSError, struct errors, IndexError on garbage
            self.counters["dns_malformed"] += 1
            return []
        # Answer from the address the device asked, so it accepts the reply.
        reply_to = (self.router_mac, frame.eth_src, frame.ip_dst, frame.ip_src, 53, frame.udp_src)
        return [ForwardDns(frame.payload, frame.eth_src, reply_to)]

    # -- the household's decisions

    def _known(self, mac: str) -> Device:
        mac = normalize_mac(mac)
        device = self.devices.get(mac)
        if device is None:
            raise UnknownDevice(f"no device {mac} has asked to join")
        return device

    def permit(self, mac: str) -> list:
        return self._decide(self._known(mac), State.PERMITTED)

    def deny(self, mac: str) -> list:
        return self._decide(self._known(mac), State.DENIED)

    def whitelist(self, mac: str) -> list:
        """Admit a device, seen or not yet, without asking; lifts a blacklisting."""
        mac = normalize_mac(mac)
        device = self.devices.get(mac) or Device(mac=mac, first_seen=self.clock())
        return self._decide(device, State.PERMITTED)

    def blacklist(self, mac: str) -> list:
        mac = normalize_mac(mac)
        device = self.devices.get(mac) or Device(mac=mac, first_seen=self.clock())
        return self._decide(device, State.BLACKLISTED)

    def rename(self, mac: str, name: str) -> list:
        """What the household calls the device ("Grandma's iPad"); empty clears it."""
        device = self._known(mac)
        name = "".join(ch for ch in name if ch.isprintable()).strip()
        if len(name) > 64:
            raise ApiError("a device name has at most 64 characters")
        return self._update(device.with_(name=name))

    def _decide(self, device: Device, state: State) -> list:
        LOG.info("household: %s %s -> %s", device.mac, device.state.value, state.value)
        return self._update(device.with_(state=state))

    # -- the clock

    def tick(self) -> list:
        """Withdraw the rules of devices whose lease ran out (only those: this runs every few seconds)."""
        now = self.clock()
        effects = []
        for mac in [m for m in self.installed if not self.devices[m].lease_active(now)
                    and self.devices[m].state is not State.BLACKLISTED]:
            effects += self._reconcile(self.devices[mac])
        return effects

    # -- queries

    def status(self, mac: str | None = None):
        now = self.clock()
        if mac is not None:
            return self._known(mac).to_json(now)
        return [d.to_json(now) for d in sorted(self.devices.values(), key=lambda d: d.mac)]

    def dhcp_status(self) -> list:
        now = self.clock()
        return [{"mac": d.mac, "ip": d.subnet.device_ip, "state": d.state.value, "hostname": d.hostname,
                 "lease_expires": d.lease_expires, "lease_seconds_left": max(0, int(d.lease_expires - now))}
                for d in sorted(self.devices.values(), key=lambda d: d.subnet.index)
                if d.lease_active(now)]

    def blacklist_status(self) -> list:
        return sorted(d.mac for d in self.devices.values() if d.state is State.BLACKLISTED)

    # -- internals

    def _update(self, device: Device) -> list:
        self.devices[device.mac] = device
        if device.subnet:
            self.mac_by_subnet[device.subnet.index] = device.mac
        try:
            self.store.save(device)
        except StoreError as exc:
            # Keep serving from memory: a full disk must not take the network down.
            self.counters["store_errors"] += 1
            LOG.error("%s", exc)
        return self._reconcile(device)

    def _reconcile(self, device: Device) -> list:
        """Bring the switch's rules for one device in line with its state."""
        if self.wlan_port is None:
            return []
        wanted = flows.device_rules(device, self.clock(), self.wlan_port, self.router_mac)
        have = self.installed.get(device.mac, frozenset())
        if wanted == have:
            return []
        effects: list = []
        if have:
            # Deleting by cookie also ends flows in progress: a denied device is cut off at once.
            effects.append(RemoveRules(flows.device_cookie(device)))
        if wanted:
            effects.append(InstallRules(tuple(sorted(wanted, key=repr))))
            self.installed[device.mac] = wanted
        else:
            self.installed.pop(device.mac, None)
        return effects

    def _allocate_subnet(self) -> Subnet:
        for index in range(FIRST_DEVICE_SUBNET, SUBNET_COUNT):
            if index not in self.used_subnets:
                self.used_subnets.add(index)
                return Subnet(index)
        raise NoFreeSubnet("all /30s in 10.2.0.0/16 are taken")

    def _device_by_ip(self, ip: str) -> Device | None:
        subnet = Subnet.containing(ip)
        if subnet is None or ip != subnet.device_ip:
            return None
        return self.devices.get(self.mac_by_subnet.get(subnet.index))
