"""The household's priorities on its ISP slice: which downlink rules it wants there, pure.

The router's own shaper orders what leaves the router; what comes down the access line has already
queued at the ISP. The ISP's slicer (isp-flowvisor) lets the household put its downlink into its own
queues on the aggregation switch: for each learnt flow whose app is High or Medium, one rule in the
household's slice

    match(eth_type=IPv4, ip_proto, ipv4_src=remote address, tcp_src|udp_src=remote port,
          ipv4_dst=the household's public address) -> apply(set_queue(2|1), output(NORMAL))

and over IPv6 the same with ipv6_src=remote address, ipv6_dst=the device's global address.

Why the remote endpoint and our public address are enough: the router learns flows before its NAT
(device address and port <-> remote address and port), while the aggregation switch sees them after
it (remote -> public address and a port the NAT chose). The remote side is the same on both, and the
public address is all of the household the ISP sees, so no NAT (conntrack) lookup is needed, and a
NAT that rewrites ports does not matter. What it cannot tell apart: connections of the household
to the same remote address and port (two devices on one video-call server, two tabs on one site).
They share one rule, which carries the highest priority among them.

IPv6 has no NAT: a device's global address is inside the prefix the ISP delegated to the household
(`prefixes.PrefixPlan.delegated`), which is the household's IPv6 flowspace on the slice (the ISP engineer
registers it beside the public IPv4 address). So an IPv6 connection's rule names the device's own
address, and what is marked ahead (ports, named addresses) names the whole delegated prefix. Without
a delegated prefix, devices have ULA addresses only, which never reach the ISP: no IPv6 rules.

Values only (`flows.FlowRule`); `openflow.flow_mod` and `openflow.delete_strict` turn them into
OpenFlow messages, and `slice_link.py` keeps them on the slicer.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Iterable
from typing import Any, NamedTuple

from os_ken.ofproto.ofproto_v1_3 import OFPP_NORMAL

from .. import flows
from ..wire.lan import LAN_NETWORK
from ..wire.nd import ETH_IPV6
from ..wire.prefixes import GLOBAL_UNICAST
from . import qos

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
    connections: Iterable[Connection],
    public_addresses: Iterable[str],
    ahead: Iterable[Ahead] = (),
    delegated: ipaddress.IPv6Network | None = None,
) -> frozenset[flows.FlowRule]:
    """The slice rules the household wants right now: one per remote endpoint of a High or Medium
    flow, and one per High or Medium port or named address marked ahead, per public address (IPv4)
    or for the delegated prefix (IPv6)."""
    # (proto, remote address, remote port, the household's side: a public address, a device's
    # global IPv6 address or the delegated prefix) -> the highest priority wanted there.
    best: dict[tuple[int | None, str | None, Any, str], str] = {}
    public = list(public_addresses)

    def want(proto: int | None, remote: str | None, port: Any, ours: Iterable[str], priority: str) -> None:
        for household_side in ours:
            key = (proto, remote, port, household_side)
            if priority in SLICE_QUEUES and _RANK[priority] > _RANK[best.get(key, qos.DEFAULT)]:
                best[key] = priority

    for conn, priority in connections:
        if not conn.is_ipv6:
            if ipaddress.IPv4Address(conn.daddr) not in LAN_NETWORK:  # not device to device, or to the router
                want(conn.proto, conn.daddr, conn.dport, public, priority)
        elif (
            delegated is not None and ipaddress.IPv6Address(conn.saddr) in delegated and _beyond(conn.daddr, delegated)
        ):
            # A global address of the device's (a ULA one never reaches the ISP), to the internet.
            want(conn.proto, conn.daddr, conn.dport, [conn.saddr], priority)
    for endpoint in ahead:
        if endpoint.remote is None:
            ours = public + ([str(delegated)] if delegated is not None else [])
        elif ":" not in endpoint.remote:
            ours = public if ipaddress.IPv4Address(endpoint.remote) not in LAN_NETWORK else []
        else:
            ours = [str(delegated)] if delegated is not None and _beyond(endpoint.remote, delegated) else []
        want(endpoint.proto, endpoint.remote, endpoint.port, ours, endpoint.priority)
    return frozenset(
        _rule(proto, addr, port, household_side, SLICE_QUEUES[priority])
        for (proto, addr, port, household_side), priority in best.items()
    )


def _beyond(address: str, delegated: ipaddress.IPv6Network) -> bool:
    """An IPv6 address on the internet: global unicast, outside the household's own prefix (a device's,
    or the router's; ULA and link-local ones are the home's)."""
    ip = ipaddress.IPv6Address(address)
    return ip in GLOBAL_UNICAST and ip not in delegated


def _rule(proto: int | None, remote_addr: str | None, remote_port: Any, ours: str, queue: int) -> flows.FlowRule:
    """One slice rule: from the remote endpoint to `ours` (a public IPv4 address, a device's global IPv6
    address, or the delegated prefix, as the switch's value/mask)."""
    if ":" in ours:
        net = ipaddress.IPv6Network(ours)
        destination = str(net.network_address) if net.prefixlen == 128 else (str(net.network_address), str(net.netmask))
        fields: dict[str, Any] = {"eth_type": ETH_IPV6, "ipv6_dst": destination}
    else:
        fields = {"eth_type": flows.ETH_IPV4, "ipv4_dst": ours}
    if proto is not None:
        fields["ip_proto"] = proto
        if proto in (flows.PROTO_TCP, flows.PROTO_UDP) and remote_port is not None:
            fields["tcp_src" if proto == flows.PROTO_TCP else "udp_src"] = remote_port
    if remote_addr is not None:
        fields["ipv6_src" if ":" in ours else "ipv4_src"] = remote_addr
    if proto is not None and remote_addr is not None:
        priority = CONNECTION_PRIORITY
    else:
        priority = ADDRESS_PRIORITY if remote_addr is not None else PORT_PRIORITY
    return flows.rule(SLICE_TABLE, priority, (flows.SetQueue(queue), flows.Output(OFPP_NORMAL)), SLICE_COOKIE, **fields)
