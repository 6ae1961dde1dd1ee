"""The household's priorities on its ISP slice: which downlink rules it wants there, pure.

The router's own shaper orders what leaves the router; what comes down the access line has already
queued at the ISP. The ISP's slicer (isp-flowvisor) lets the household put its downlink into its own
queues on the aggregation switch: for each learnt flow whose app is High or Medium, one rule in the
household's slice

    match(eth_type=IPv4, ip_proto, ipv4_src=remote address, tcp_src|udp_src=remote port,
          ipv4_dst=the household's public address) -> apply(set_queue(2|1), output(NORMAL))

Why the remote endpoint and our public address are enough: the router learns flows before its NAT
(device address and port <-> remote address and port), while the aggregation switch sees them after
it (remote -> public address and a port the NAT chose). The remote side is the same on both, and the
public address is all of the household the ISP sees, so no NAT (conntrack) lookup is needed, and a
NAT that rewrites ports does not matter. What it cannot tell apart: connections of the household
to the same remote address and port (two devices on one video-call server, two tabs on one site).
They share one rule, which carries the highest priority among them.

Values only (`flows.FlowRule`); `openflow.flow_mod` and `openflow.delete_strict` turn them into
OpenFlow messages, and `slice_link.py` keeps them on the slicer.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Iterable
from typing import Any, NamedTuple

from os_ken.ofproto.ofproto_v1_3 import OFPP_NORMAL

from . import flows, qos
from .model import LAN_NETWORK

# One cookie on every rule of ours in the slice (the slicer allows 40 bits): one non-strict
# delete by it clears what an earlier session left.
SLICE_COOKIE = 0x48_6F_6D_65  # "Home"
SLICE_TABLE = 0  # the household's first virtual table
RULE_PRIORITY = 100
# The slicer's queue numbers (0 Normal, 1 Medium, 2 High: isp-flowvisor/README.md), which are not
# the router's own (qos.MARKS, where High is queue 1). Normal traffic needs no rule: a table miss
# goes to the ISP's forwarding, in the household's Normal queue.
SLICE_QUEUES = {qos.HIGH: 2, qos.MEDIUM: 1}
_RANK = {qos.DEFAULT: 0, qos.MEDIUM: 1, qos.HIGH: 2}

# A learnt flow as its device sees it (its own address first, `HomeRouter.learnt_connections`)
# and the priority its rule carries.
Connection = tuple[flows.FiveTuple, str]


class Ahead(NamedTuple):
    """What the router marks ahead of a connection (`flows.marks`), as a remote endpoint: an app's
    service port (proto, a port or (value, mask)) or an address a device's lookup named for it."""

    proto: int | None
    remote: str | None
    port: Any
    priority: str


# A connection's own rule beats an address's, which beats a port's (as in the router: agent, names, ports).
CONNECTION_PRIORITY, ADDRESS_PRIORITY, PORT_PRIORITY = RULE_PRIORITY, RULE_PRIORITY - 10, RULE_PRIORITY - 20


def wanted_rules(
    connections: Iterable[Connection], public_addresses: Iterable[str], ahead: Iterable[Ahead] = ()
) -> frozenset[flows.FlowRule]:
    """The slice rules the household wants right now: one per remote endpoint of a High or Medium
    flow, and one per High or Medium port or named address marked ahead, per public address."""
    best: dict[tuple[int | None, str | None, Any], str] = {}

    def want(remote: tuple[int | None, str | None, Any], priority: str) -> None:
        if priority in SLICE_QUEUES and _RANK[priority] > _RANK[best.get(remote, qos.DEFAULT)]:
            best[remote] = priority

    for conn, priority in connections:
        if conn.is_ipv6 or ipaddress.IPv4Address(conn.daddr) in LAN_NETWORK:
            # Device to device (or to the router): nothing of it comes from the ISP. IPv6 is not on the
            # slice yet (its rules name the household's public IPv4 address).
            continue
        want((conn.proto, conn.daddr, conn.dport), priority)
    for endpoint in ahead:
        if endpoint.remote is None or ipaddress.IPv4Address(endpoint.remote) not in LAN_NETWORK:
            want((endpoint.proto, endpoint.remote, endpoint.port), endpoint.priority)
    public = list(public_addresses)
    return frozenset(
        _rule(proto, addr, port, address, SLICE_QUEUES[priority])
        for (proto, addr, port), priority in best.items()
        for address in public
    )


def _rule(proto: int | None, remote_addr: str | None, remote_port: Any, public_addr: str, queue: int) -> flows.FlowRule:
    fields: dict[str, Any] = {"eth_type": flows.ETH_IPV4, "ipv4_dst": public_addr}
    if proto is not None:
        fields["ip_proto"] = proto
        if proto in (flows.PROTO_TCP, flows.PROTO_UDP) and remote_port is not None:
            fields["tcp_src" if proto == flows.PROTO_TCP else "udp_src"] = remote_port
    if remote_addr is not None:
        fields["ipv4_src"] = remote_addr
    if proto is not None and remote_addr is not None:
        priority = CONNECTION_PRIORITY
    else:
        priority = ADDRESS_PRIORITY if remote_addr is not None else PORT_PRIORITY
    return flows.rule(SLICE_TABLE, priority, (flows.SetQueue(queue), flows.Output(OFPP_NORMAL)), SLICE_COOKIE, **fields)
