"""The shaper against this machine's real kernel: a veth pair between two private network
namespaces (names `qt-*`), the HTB tree applied, read back with `tc`, applied again, and
DSCP-marked traffic sent through it."""

import json
import os
import shutil
import subprocess
import sys
import time

import pytest

from homework_controller.edge.lan import shaper
from homework_controller.policy import qos

pytestmark = pytest.mark.skipif(
    os.geteuid() != 0 or shutil.which("tc") is None, reason="needs root and tc (network namespaces)"
)


def sh(*args):
    subprocess.run(args, check=True, capture_output=True, text=True, timeout=20)


@pytest.fixture
def veth():
    """(namespace of the shaped end, namespace of the other end); removed afterwards."""
    near, far = f"qt-n{os.getpid()}", f"qt-f{os.getpid()}"
    for ns in (near, far):
        subprocess.run(["ip", "netns", "del", ns], capture_output=True)  # left by a killed run
        sh("ip", "netns", "add", ns)
    try:
        sh("ip", "-n", near, "link", "add", "qt-a", "type", "veth", "peer", "name", "qt-b", "netns", far)
        for ns, dev, addr, addr6 in (
            (near, "qt-a", "192.0.2.1/24", "2001:db8:9::1/64"),
            (far, "qt-b", "192.0.2.2/24", "2001:db8:9::2/64"),
        ):
            sh("ip", "-n", ns, "addr", "add", addr, "dev", dev)
            sh("ip", "-n", ns, "addr", "add", addr6, "dev", dev, "nodad")
            sh("ip", "-n", ns, "link", "set", dev, "up")
        # The far end's MAC, known: IPv6 sent before neighbour discovery finished would wait or be dropped.
        far_mac = json.loads(
            subprocess.run(["ip", "-n", far, "-j", "link", "show", "qt-b"], capture_output=True).stdout
        )
        sh("ip", "-n", near, "neigh", "replace", "2001:db8:9::2", "lladdr", far_mac[0]["address"], "dev", "qt-a")
        yield near, far
    finally:
        for ns in (near, far):
            subprocess.run(["ip", "netns", "del", ns], capture_output=True)


def tc_in(ns):
    return ("ip", "netns", "exec", ns, "tc")


def send_udp(ns, tos, count, payload=100, ipv6=False):
    family, level, option, to = (
        ("AF_INET6", "IPPROTO_IPV6", "IPV6_TCLASS", "2001:db8:9::2")
        if ipv6
        else ("AF_INET", "IPPROTO_IP", "IP_TOS", "192.0.2.2")
    )
    code = (
        f"import socket; s = socket.socket(socket.{family}, socket.SOCK_DGRAM); "
        f"s.setsockopt(socket.{level}, socket.{option}, {tos}); "
        f"[s.sendto(b'x' * {payload}, ('{to}', 9)) for _ in range({count})]"
    )
    sh("ip", "netns", "exec", ns, sys.executable, "-c", code)


def classes(ns, dev):
    return subprocess.run([*tc_in(ns), "class", "show", "dev", dev], capture_output=True, text=True, check=True).stdout


def test_the_tree_is_applied_read_back_and_a_second_apply_changes_nothing(veth):
    near, _ = veth
    link = qos.LinkShape("qt-a", line_kbit=20000, shaper_percent=90, high_share=0.3)
    s = shaper.Shaper(link, tc=tc_in(near))
    assert not s.applied()
    leaf = s.apply()
    assert leaf in ("cake", "fq_codel", "pfifo") and s.applied()
    tree = classes(near, "qt-a")
    assert "class htb 1:1 root rate 18Mbit ceil 18Mbit" in tree  # 90% of the line rate
    assert "class htb 1:10 parent 1:1 leaf 10: prio 0 rate 5400Kbit ceil 5400Kbit" in tree  # High: capped
    assert "class htb 1:20 parent 1:1 leaf 20: prio 1 rate 10800Kbit ceil 18Mbit" in tree
    assert "class htb 1:30 parent 1:1 leaf 30: prio 2 rate 1800Kbit ceil 18Mbit" in tree
    filters = subprocess.run([*tc_in(near), "filter", "show", "dev", "qt-a"], capture_output=True, text=True).stdout
    assert "match 00b80000/00fc0000 at 0" in filters and "match 00880000/00fc0000 at 0" in filters
    assert "match 0b800000/0fc00000 at 0" in filters and "match 08800000/0fc00000 at 0" in filters  # IPv6's
    send_udp(near, 0xB8, 10)
    before = s.class_counters()
    assert s.apply() == leaf
    assert classes(near, "qt-a") == tree
    assert s.class_counters() == before  # not rebuilt: its counters carry on
    assert (
        subprocess.run([*tc_in(near), "filter", "show", "dev", "qt-a"], capture_output=True, text=True).stdout
        == filters
    )


def test_a_restarted_controller_finds_its_tree_and_says_which_leaf_it_uses(veth):
    near, _ = veth
    link = qos.LinkShape("qt-a", line_kbit=20000)
    leaf = shaper.Shaper(link, tc=tc_in(near)).apply()
    restarted = shaper.Shaper(link, tc=tc_in(near))  # a new process: the tree is on the interface already
    shaper.Watch({"uplink": restarted}).check(time.monotonic())
    assert restarted.health()["leaf_qdisc"] == leaf


def test_marked_traffic_lands_in_its_class_and_unmarked_in_normal(veth):
    near, _ = veth
    s = shaper.Shaper(qos.LinkShape("qt-a", line_kbit=100000), tc=tc_in(near))
    s.apply()
    send_udp(near, 0xB8, 50)  # EF: High
    send_udp(near, 0x89, 20)  # AF41 with an ECN bit set: still Medium
    send_udp(near, 0x00, 30)
    send_udp(near, 0xB8, 40, ipv6=True)  # IPv6's traffic class: the same classes
    send_udp(near, 0x89, 10, ipv6=True)
    send_udp(near, 0x00, 30, ipv6=True)
    frame, frame6 = 100 + 8 + 20 + 14, 100 + 8 + 40 + 14
    assert s.class_counters(qos.HIGH).sent_bytes == 50 * frame + 40 * frame6
    assert s.class_counters(qos.MEDIUM).sent_bytes == 20 * frame + 10 * frame6
    assert s.class_counters(qos.DEFAULT).sent_bytes >= 30 * frame + 30 * frame6  # and what else the stack sent (ARP)


def test_the_tree_comes_back_when_the_interface_is_recreated(veth):
    near, far = veth
    s = shaper.Shaper(qos.LinkShape("qt-a", line_kbit=10000), tc=tc_in(near))
    s.apply()
    sh("ip", "-n", near, "link", "del", "qt-a")
    sh("ip", "-n", near, "link", "add", "qt-a", "type", "veth", "peer", "name", "qt-b", "netns", far)
    assert not s.applied()
    s.apply()
    assert s.applied()


def test_a_missing_interface_is_a_clear_error():
    s = shaper.Shaper(qos.LinkShape("qt-none", line_kbit=10000))
    with pytest.raises(shaper.ShaperError, match="qt-none"):
        s.apply()


def flood(ns, tos, count=3000, payload=200):
    """More than the High class can queue, sent without waiting (what the socket refuses is not sent)."""
    code = (
        "import socket\n"
        "s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM); s.setblocking(False)\n"
        f"s.setsockopt(socket.IPPROTO_IP, socket.IP_TOS, {tos})\n"
        f"for _ in range({count}):\n"
        "    try:\n"
        f"        s.sendto(b'x' * {payload}, ('192.0.2.2', 9))\n"
        "    except OSError:\n"
        "        pass\n"
    )
    sh("ip", "netns", "exec", ns, sys.executable, "-c", code)


def test_a_high_class_at_its_cap_or_dropping_is_reported_and_an_idle_one_is_not(veth):
    near, _ = veth
    s = shaper.Shaper(qos.LinkShape("qt-a", line_kbit=100), tc=tc_in(near))  # High capped at 27 kbit/s
    s.apply()
    start, idle = time.monotonic(), s.class_counters()
    send_udp(near, 0x00, 20)  # Normal traffic does not count against High
    assert qos.high_class_overload(idle, s.class_counters(), 1.0, s.link.high_kbit) is None
    flood(near, 0xB8)
    deadline = start + 20
    while True:  # judged over at least a second, as the controller does every --stats-interval
        elapsed, busy = time.monotonic() - start, s.class_counters()
        why = qos.high_class_overload(idle, busy, elapsed, s.link.high_kbit) if elapsed >= 1 else None
        if why is not None or time.monotonic() > deadline:
            break
        time.sleep(0.1)
    assert why is not None and ("dropped" in why or "at its cap" in why), why


def test_overload_is_judged_from_drops_and_from_the_rate_against_the_cap():
    before = qos.ClassCounters(sent_bytes=0, dropped=0, overlimits=0)
    assert (
        qos.high_class_overload(before, qos.ClassCounters(1000, 3, 9), 5.0, 1000)
        == "dropped 3 packets (2 of 1000 kbit/s)"
    )
    assert (
        qos.high_class_overload(before, qos.ClassCounters(600_000, 0, 9), 5.0, 1000)
        == "at its cap (960 of 1000 kbit/s)"
    )
    assert qos.high_class_overload(before, qos.ClassCounters(500_000, 0, 0), 5.0, 1000) is None  # 800 of 1000


def test_the_watch_puts_the_tree_back_and_tells_of_an_overload_once_per_five_minutes(veth):
    near, _ = veth
    s = shaper.Shaper(qos.LinkShape("qt-a", line_kbit=100), tc=tc_in(near))
    watch = shaper.Watch({"uplink": s})
    assert watch.check(time.monotonic()) == [] and s.applied()  # the first pass shapes the link
    sh(*tc_in(near), "qdisc", "del", "dev", "qt-a", "root")  # someone (a restart) took the tree away
    assert watch.check(time.monotonic()) == [] and s.applied()
    flood(near, 0xB8)
    deadline = time.monotonic() + 20
    while not (told := watch.check(time.monotonic())):
        assert time.monotonic() < deadline, "no overload seen"
        time.sleep(0.2)
    [message] = told
    assert message.startswith("high-priority traffic uplink (qt-a) ")
    since, before = time.monotonic(), s.class_counters()
    while time.monotonic() - since < 1.0:
        assert watch.check(time.monotonic()) == []  # still overloaded, but the household was just told
        time.sleep(0.2)
    assert qos.high_class_overload(before, s.class_counters(), time.monotonic() - since, s.link.high_kbit)
