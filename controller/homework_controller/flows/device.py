"""A device's own rules (learnt flows aside): their name `DeviceRules`, made by `device_rules` from the
device's state, and built when first read; the rules added beside them for one address or one flow.
"""

from __future__ import annotations

import functools
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Protocol

from ..model import Device, State
from ..wire.lan import Subnet
from ..wire.packets import ARP_REPLY, ARP_REQUEST
from .captive import portal_rules
from .shapes import IPV4, address_blocked, admitted, counted, encrypted_dns_refused, routed_to
from .values import (
    ALL_HOSTS,
    CONTROLLER,
    DHCP_CLIENT_PORT,
    DHCP_SERVER_PORT,
    ETH_ARP,
    ETH_EAPOL,
    ETH_IPV4,
    FLOW_IDLE_TIMEOUT_S,
    IN_PORT,
    LOCAL,
    NEWCOMERS_METER,
    PROTO_UDP,
    TABLE_ACCOUNTING,
    TABLE_ADMISSION,
    TABLE_MARKING,
    TABLE_ROUTING,
    AccountingPriority,
    AdmissionPriority,
    FiveTuple,
    FlowRule,
    GotoTable,
    Meter,
    MeterBand,
    Output,
    SetField,
    cookie_of,
    device_cookie,
    meter_of,
    port_mark,
    portal_meter_of,
    rule,
)


class GateRules(Protocol):
    """What a plugged-in gate (`concerns/gates`) adds to a forwarding device's rules: a hashable value, so
    that `DeviceRules` still compare by what they are made of, which builds its rules when they are sent."""

    def rules(self, of: DeviceRules) -> Iterable[FlowRule]:
        """Its IPv4 rules beside the device's (`of`), under the device's cookie."""
        ...

    def rules_v6(self, of: DeviceRules, prefixes: tuple[str, ...], lan: tuple[str, ...]) -> Iterable[FlowRule]:
        """Its IPv6 rules beside the device's /64s (`prefixes`); lan: the household's IPv6 prefixes (its ULA
        /48, the delegated prefix)."""
        ...


@dataclass(frozen=True)
class DeviceRules:
    """The rules a device should have (learnt flows aside), named by what they are made of, so that two are
    equal exactly when their rules are: the router compares the wanted set with the installed one after
    every change and for every device on each tick, and a comparison of these costs no rule building.

    The rules themselves (`rules`, or iterating) are built when first read, which is when they are sent: a
    storm's newcomers' rules wait behind the answers (`held.py`), and are built once the storm is quiet.
    Made by `device_rules`, which leaves out what a kind of rule set does not depend on."""

    mac: str
    access_ports: tuple[int, ...]
    port: int | None = None  # its own access port; None: not bound to one yet (accepted on every one)
    blacklisted: bool = False
    subnet: Subnet | None = None  # its own packet-in budget (meter, DHCP, EAPOL, ARP), from its first lease on
    forwarding: bool = False  # permitted with a live lease: its traffic is forwarded and counted
    portal: bool = False  # held back with a live lease: it reaches the router's resolver and the portal only
    # Only a forwarding device's rules depend on these (`device_rules` leaves them at their defaults otherwise).
    router_mac: str = ""
    dns_gated: bool = False
    gates: tuple[GateRules, ...] = ()  # what the plugged-in gates add

    @property
    def meters(self) -> tuple[MeterBand, ...]:
        """The meters its rules send through, which must be on the switch first: its own packet-in budget from
        its first lease on, and its budget towards the captive portal while it has the portal's rules."""
        if self.subnet is None:
            return ()
        if self.has_portal:
            return meter_of(self.subnet), portal_meter_of(self.subnet)
        return (meter_of(self.subnet),)

    @property
    def has_portal(self) -> bool:
        """Held back with a live lease: it reaches the router's resolver and the portal only."""
        return self.portal and not self.forwarding and not self.blacklisted and self.subnet is not None

    @property
    def own_ports(self) -> tuple[int, ...]:
        return self.access_ports if self.port is None else (self.port,)

    def __iter__(self) -> Iterator[FlowRule]:
        return iter(self.rules)

    @functools.cached_property
    def rules(self) -> frozenset[FlowRule]:
        cookie = cookie_of(self.mac)
        if self.blacklisted:
            # Nothing in or out on any port, EAPOL included: it cannot even finish the key handshake.
            return frozenset(
                {
                    rule(TABLE_ADMISSION, AdmissionPriority.BLACKLISTED, (), cookie, in_port=p, eth_src=self.mac)
                    for p in self.access_ports
                }
                | {rule(TABLE_ADMISSION, AdmissionPriority.BLACKLISTED, (), cookie, in_port=LOCAL, eth_dst=self.mac)}
            )
        subnet = self.subnet
        assert subnet is not None, "a device without a lease has no rules (device_rules: None)"
        own = self.own_ports
        # Its MAC on another access port is not the device (or it moved): nothing of it passes there;
        # the controller hears of it on the newcomers' budget (a copier must not use up the device's).
        elsewhere = {
            rule(
                TABLE_ADMISSION,
                AdmissionPriority.ELSEWHERE,
                (Meter(NEWCOMERS_METER.meter_id), Output(CONTROLLER)),
                cookie,
                in_port=p,
                eth_src=self.mac,
            )
            for p in self.access_ports
            if p not in own
        }
        # Its own packet-in budget from its first lease on: a known device's DHCP is never starved.
        meter = Meter(meter_of(subnet).meter_id)
        budget = {
            rule(
                TABLE_ADMISSION,
                AdmissionPriority.DEVICE_CONTROL,
                (meter, SetField("eth_dst", port_mark(port)), Output(LOCAL)),
                cookie,
                in_port=port,
                eth_src=self.mac,
                eth_type=ETH_IPV4,
                ip_proto=PROTO_UDP,
                ipv4_dst=server,
                udp_dst=DHCP_SERVER_PORT,
            )
            for server in (ALL_HOSTS, subnet.gateway)
            for port in own
        }
        for port in own:
            budget |= {
                rule(
                    TABLE_ADMISSION,
                    AdmissionPriority.DEVICE_CONTROL,
                    (meter, Output(LOCAL)),
                    cookie,
                    in_port=port,
                    eth_src=self.mac,
                    eth_type=ETH_EAPOL,
                ),
                rule(
                    TABLE_ADMISSION,
                    AdmissionPriority.DEVICE_ARP,
                    (meter, Output(CONTROLLER)),
                    cookie,
                    in_port=port,
                    eth_src=self.mac,
                    eth_type=ETH_ARP,
                ),
            }
        if self.port is not None and len(self.access_ports) > 1:
            # What the router and hostapd send it go out of its own port only.
            to_own = (Output(self.port),)
            budget |= {
                rule(
                    TABLE_ADMISSION,
                    AdmissionPriority.DEVICE_CONTROL,
                    to_own,
                    cookie,
                    in_port=LOCAL,
                    eth_dst=self.mac,
                    eth_type=ETH_IPV4,
                    ip_proto=PROTO_UDP,
                    udp_src=DHCP_SERVER_PORT,
                    udp_dst=DHCP_CLIENT_PORT,
                ),
                rule(
                    TABLE_ADMISSION,
                    AdmissionPriority.DEVICE_CONTROL,
                    to_own,
                    cookie,
                    in_port=LOCAL,
                    eth_dst=self.mac,
                    eth_type=ETH_EAPOL,
                ),
            }
        budget |= elsewhere
        if not self.forwarding:
            return frozenset(budget | portal_rules(self.mac, own, subnet, cookie) if self.has_portal else budget)
        ip = subnet.device_ip
        # The router alone sets DSCP, which the shaper classifies on: a device's own EF mark must not jump
        # the queue (the marking table marks what the router chose).
        count = (SetField("ip_dscp", 0), GotoTable(TABLE_MARKING))
        rules = admitted(IPV4, cookie, self.mac, own, ip)
        rules |= routed_to(IPV4, cookie, self.mac, self.router_mac, own, self.access_ports, ip)
        rules |= counted(IPV4, cookie, (AccountingPriority.DEVICE_SOURCE, AccountingPriority.DEVICE_DEST), count, ip)
        if self.dns_gated:
            rules |= encrypted_dns_refused(IPV4, cookie, ip)
        for gate in self.gates:
            rules |= set(gate.rules(self))
        return frozenset(rules | budget | self._gateway_answered(cookie, subnet))

    def _gateway_answered(self, cookie: int, subnet: Subnet) -> set[FlowRule]:
        """Its ARP request for its gateway, from its own MAC and address, answered by the switch (the
        controller's proxy ARP answers the same, `registry.asks_for_its_gateway`, a round trip later): its
        unicast to the router (a renewal, its first DNS query, its one DHCPRELEASE) waits on this answer, and
        a client that sends a release and then removes its address loses a release still waiting on ARP.
        On its own port, or the one access port there is: an unbound device's ARP on one of several (after a
        restart) goes to the controller, and binds it there (`port_binding`)."""
        settled = (self.port,) if self.port is not None else self.access_ports if len(self.access_ports) == 1 else ()
        answer = (
            Meter(meter_of(subnet).meter_id),
            SetField("eth_dst", self.mac),
            SetField("eth_src", self.router_mac),
            SetField("arp_op", ARP_REPLY),
            SetField("arp_sha", self.router_mac),
            SetField("arp_spa", subnet.gateway),
            SetField("arp_tha", self.mac),
            SetField("arp_tpa", subnet.device_ip),
            Output(IN_PORT),
        )
        return {
            rule(
                TABLE_ADMISSION,
                AdmissionPriority.GATEWAY_ARP,
                answer,
                cookie,
                in_port=port,
                eth_src=self.mac,
                eth_type=ETH_ARP,
                arp_op=ARP_REQUEST,
                arp_sha=self.mac,
                arp_spa=subnet.device_ip,
                arp_tpa=subnet.gateway,
            )
            for port in settled
        }


def device_rules(
    device: Device,
    now: float,
    access_ports: tuple[int, ...],
    router_mac: str,
    *,
    port: int | None = None,
    dns_gated: bool = False,
    held: bool = False,
    gates: tuple[GateRules, ...] = (),
) -> DeviceRules | None:
    """The rules a device should have right now (learnt flows aside); None if none.

    dns_gated: the household blocks names for it, so its encrypted DNS (DNS over TLS or QUIC, port
    853), which the router cannot read, is refused: the device falls back to plain DNS.

    held: a per-device policy holds its traffic for now (it is paused): its rules are a
    non-forwarding device's, DHCP and ARP only, and while its lease is live the captive portal.

    gates: the rules the plugged-in gates add to a forwarding device's (`GateRules`).

    port: the access port it is bound to (`port_binding`); None: any of them.
    """
    if device.state is State.BLACKLISTED:
        return DeviceRules(device.mac, access_ports, blacklisted=True)
    live = device.lease_active(now)
    if device.subnet is None or (device.state is State.PENDING and not live):
        # Not even a lease yet (a DISCOVER is all it sent, which is all a forged MAC sends):
        # it shares the newcomers' budget, and a storm of them costs the switch nothing.
        return None
    if held or not (device.forwards and live):
        portal = live and device.state is not State.DENIED  # held back, so told why (refused: nothing)
        return DeviceRules(device.mac, access_ports, port, subnet=device.subnet, portal=portal)
    return DeviceRules(
        device.mac,
        access_ports,
        port,
        subnet=device.subnet,
        forwarding=True,
        router_mac=router_mac,
        dns_gated=dns_gated,
        gates=gates,
    )


def dns_block_rule(device: Device, addr: str) -> FlowRule:
    """The device may not reach an address learnt for a name blocked for it (even by address)."""
    assert device.subnet is not None
    return address_blocked(IPV4, device_cookie(device), device.subnet.device_ip, addr)


def learnt_flow_rule(device: Device, flow: FiveTuple, mark: tuple = ()) -> FlowRule:
    """One flow's counting rule; mark: the actions that mark its packets for the shaper (`qos.mark_actions`)."""
    return rule(
        TABLE_ACCOUNTING,
        AccountingPriority.LEARNT_FLOW,
        (*mark, GotoTable(TABLE_ROUTING)),
        device_cookie(device),
        idle_timeout=FLOW_IDLE_TIMEOUT_S,
        notify_removal=True,
        **flow.match(),
    )
