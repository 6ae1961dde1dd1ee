"""The downlink HTB tree, applied with tc to a real interface and fed real packets."""

from __future__ import annotations

import ipaddress
import os
import subprocess

import pytest

from isp_flowvisor.model import Household
from isp_flowvisor.policy import DSCP_OF_QUEUE
from isp_flowvisor.queues import DownlinkQueues, plan
from isp_flowvisor.testing import wait_until

ALICE = Household(
    "alice", 1, (ipaddress.IPv4Network("100.64.1.0/24"), ipaddress.IPv6Network("2001:db8:100::/56")), guaranteed_mbit=20
)
BOB = Household(
    "bob", 2, (ipaddress.IPv4Network("100.64.2.0/24"), ipaddress.IPv6Network("2001:db8:200::/56")), guaranteed_mbit=10
)


def test_plan_gives_each_household_three_classes_with_high_capped_at_its_guarantee():
    lines = plan("down0", 100, [ALICE, BOB], "pfifo limit 1000")
    alice_high = [line for line in lines if "classid 1:5 " in line][0]
    assert "rate 10000kbit ceil 20000kbit" in alice_high  # half the guarantee, capped at it
    assert any("classid 1:4 " in line and "rate 20000kbit ceil 100000kbit" in line for line in lines)
    assert any("match ip dst 100.64.2.0/24 match ip tos 0xb8 0xfc flowid 1:9" in line for line in lines)


@pytest.fixture
def downlink():
    if os.geteuid() != 0:
        pytest.skip("needs root")
    ns = f"fv-q{os.getpid() % 100000}"
    run = lambda *a: subprocess.run(["ip", "netns", "exec", ns, *a], check=True, capture_output=True)  # noqa: E731
    subprocess.run(["ip", "netns", "add", ns], check=True)
    try:
        run("ip", "link", "add", "fvq0", "type", "veth", "peer", "name", "fvq1")
        for dev in ("lo", "fvq0", "fvq1"):
            run("ip", "link", "set", dev, "up")
        run("ethtool", "-K", "fvq0", "tx", "off")
        run("ethtool", "-K", "fvq1", "tx", "off")
        run("ip", "addr", "add", "10.99.0.1/24", "dev", "fvq0")
        mac = subprocess.run(
            ["ip", "netns", "exec", ns, "cat", "/sys/class/net/fvq1/address"],
            check=True,
            capture_output=True,
            text=True,
        ).stdout.strip()
        run("ip", "neigh", "add", "10.99.0.2", "lladdr", mac, "dev", "fvq0")
        run("ip", "route", "add", "100.64.0.0/16", "via", "10.99.0.2")
        run("ip", "-6", "addr", "add", "fd99::1/64", "dev", "fvq0", "nodad")
        run("ip", "-6", "neigh", "add", "fd99::2", "lladdr", mac, "dev", "fvq0")
        run("ip", "-6", "route", "add", "2001:db8::/32", "via", "fd99::2")
        yield ns
    finally:
        subprocess.run(["ip", "netns", "del", ns], check=False)


def _send(ns: str, dst: str, dscp: int, count: int = 20) -> None:
    if ":" in dst:
        family, level, option = "AF_INET6", "IPPROTO_IPV6", "IPV6_TCLASS"
    else:
        family, level, option = "AF_INET", "IPPROTO_IP", "IP_TOS"
    code = (
        f"import socket; s = socket.socket(socket.{family}, socket.SOCK_DGRAM); "
        f"s.setsockopt(socket.{level}, socket.{option}, {dscp << 2}); "
        f"[s.sendto(b'x' * 1000, ('{dst}', 9)) for _ in range({count})]"
    )
    subprocess.run(["ip", "netns", "exec", ns, "python3", "-c", code], check=True)


def test_packets_land_in_the_queue_their_dscp_and_destination_choose(downlink):
    queues = DownlinkQueues("fvq0", 100, tc=("ip", "netns", "exec", downlink, "tc"))
    queues.apply([ALICE, BOB])
    _send(downlink, "100.64.1.5", DSCP_OF_QUEUE[2])
    _send(downlink, "100.64.2.5", DSCP_OF_QUEUE[0])
    _send(downlink, "100.64.2.6", DSCP_OF_QUEUE[1])
    stats = wait_until(
        lambda: (s := queues.stats_by_household()) and s["alice"]["high"]["bytes"] > 0 and s, 30, "counters"
    )
    assert stats["alice"]["high"]["bytes"] >= 20_000 and stats["alice"]["normal"]["bytes"] == 0
    assert stats["bob"]["normal"]["bytes"] >= 20_000 and stats["bob"]["medium"]["bytes"] >= 20_000
    assert stats["bob"]["high"]["bytes"] == 0
    # IPv6 by the delegated prefix and the traffic class: a /64 of alice's in her High queue, bob's in his.
    before = stats
    _send(downlink, "2001:db8:100:5::10", DSCP_OF_QUEUE[2])
    _send(downlink, "2001:db8:200:5::10", DSCP_OF_QUEUE[1])
    _send(downlink, "2001:db8:200:6::10", DSCP_OF_QUEUE[0])
    stats = wait_until(
        lambda: (s := queues.stats_by_household())
        and s["bob"]["medium"]["bytes"] > before["bob"]["medium"]["bytes"]
        and s,
        30,
        "IPv6 counters",
    )
    grew = {
        (name, queue): stats[name][queue]["bytes"] - before[name][queue]["bytes"]
        for name in ("alice", "bob")
        for queue in ("high", "medium", "normal")
    }
    assert grew[("alice", "high")] >= 20_000 and grew[("bob", "medium")] >= 20_000, grew
    assert grew[("bob", "normal")] >= 20_000 and grew[("bob", "high")] == grew[("alice", "normal")] == 0, grew
    # Re-applying after a registry change keeps working (the tree is rebuilt, not patched).
    queues.apply([ALICE])
    assert "bob" not in queues.stats_by_household()
