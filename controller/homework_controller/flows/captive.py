"""A held-back device's way to the captive portal: the router's resolver and the portal, nothing else."""

from __future__ import annotations

from typing import Any

from ..wire import lan
from ..wire.lan import Subnet
from .values import (
    DNS_PORT,
    ETH_IPV4,
    LOCAL,
    PROTO_TCP,
    PROTO_UDP,
    TABLE_ADMISSION,
    AdmissionPriority,
    FlowRule,
    Meter,
    Output,
    portal_meter_of,
    rule,
)


def portal_rules(mac: str, ports: tuple[int, ...], subnet: Subnet, cookie: int) -> set[FlowRule]:
    """A held-back device (pending, paused, out of its allowance) with a live lease reaches the router's
    resolver at its gateway (which answers the OS's captive-portal probes with the router's address and
    refuses every other name) and the portal on the router's address, port 80, and nothing else; only
    from its own MAC and leased address on its own ports, so no device can ask as another. What it sends
    the portal goes through its own meter (`portal_meter_of`): a device asking for pages without end costs
    the web UI and the controller no more than a few pages a second. (Its DNS is the resolver's to limit.)"""
    ip, gateway = subnet.device_ip, subnet.gateway
    to_router = (Output(LOCAL),)
    services = (
        (gateway, PROTO_UDP, "udp", DNS_PORT, to_router),
        (gateway, PROTO_TCP, "tcp", DNS_PORT, to_router),
        (lan.ROUTER_ADDRESS, PROTO_TCP, "tcp", lan.HTTP_PORT, (Meter(portal_meter_of(subnet).meter_id), *to_router)),
    )
    to_device = tuple(Output(p) for p in ports)
    rules = set()
    for server, proto, l4, service, actions in services:
        # Any: rule() takes match fields and its own options as keywords alike.
        there: dict[str, Any] = {"ipv4_src": ip, "ipv4_dst": server, "ip_proto": proto, f"{l4}_dst": service}
        back: dict[str, Any] = {"eth_type": ETH_IPV4, "ipv4_src": server, "ipv4_dst": ip, "ip_proto": proto}
        back[f"{l4}_src"] = service
        rules |= {
            rule(
                TABLE_ADMISSION,
                AdmissionPriority.PORTAL,
                actions,
                cookie,
                in_port=p,
                eth_src=mac,
                eth_type=ETH_IPV4,
                **there,
            )
            for p in ports
        }
        back_rule = rule(
            TABLE_ADMISSION, AdmissionPriority.PORTAL, to_device, cookie, in_port=LOCAL, eth_dst=mac, **back
        )
        rules.add(back_rule)
    return rules
