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
from typing import Any

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


def wanted_rules(connections: Iterable[Connection], public_addresses: Iterable[str]) -> frozenset[flows.FlowRule]:
    """The slice rules the household wants right now: one per remote endpoint of a High or Medium
    flow, per public address."""
    best: dict[tuple[int, str, int], str] = {}
    for conn, priority in connections:
        if priority not in SLICE_QUEUES or conn.is_ipv6 or ipaddress.IPv4Address(conn.daddr) in LAN_NETWORK:
            # Normal, or device to device (or to the router): nothing of it comes from the ISP. IPv6 is
            # not on the slice yet (its rules name the household's public IPv4 address).
            continue
        remote = (conn.proto, conn.daddr, conn.dport)
        if _RANK[priority] > _RANK[best.get(remote, qos.DEFAULT)]:
            best[remote] = priority
    return frozenset(
        _rule(proto, addr, port, public, SLICE_QUEUES[priority])
        for (proto, addr, port), priority in best.items()
        for public in public_addresses
    )


def _rule(proto: int, remote_addr: str, remote_port: int, public_addr: str, queue: int) -> flows.FlowRule:
    ports: dict[str, Any] = {}
    if proto == flows.PROTO_TCP:
        ports = {"tcp_src": remote_port}
    elif proto == flows.PROTO_UDP:
        ports = {"udp_src": remote_port}
    return flows.rule(
        SLICE_TABLE,
        RULE_PRIORITY,
        (flows.SetQueue(queue), flows.Output(OFPP_NORMAL)),
        SLICE_COOKIE,
        eth_type=flows.ETH_IPV4,
        ip_proto=proto,
        ipv4_src=remote_addr,
        ipv4_dst=public_addr,
        **ports,
    )
