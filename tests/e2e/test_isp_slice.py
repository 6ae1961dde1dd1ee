"""The household's priorities hold on the ISP's downlink (issue 12): household A's video call at High
goes into A's High queue on the ISP's aggregation switch, through A's own slice, while the neighbour
(household B, a second router with this project's controller on its own slice) downloads as fast as
the shared downlink lets it.

Where the queue forms: the shared downlink (homenet's ISP, 40 Mbit/s) gives each household its
guaranteed rate (A 5, B 35) and lends what one leaves unused. So B's downloads alone cannot delay
A's call: A's share is its own. What they do is hold A to its share, below its own line, so A's own
downloads now queue at the ISP, behind which A's router can no longer put its call first. That is
the household's evening: the neighbours download, and the family's own download is what delays the
call, at the ISP. Hence here A's second device downloads too, in both measurements.

Over IPv6 (issue 22) the same holds: A's slice holds the prefix the ISP's DHCPv6 server (Kea) delegated
to A's router, whose devices' global addresses are inside it (no NAT66), so A's router's IPv6 rules
name them; B's router cannot name them.
"""

from __future__ import annotations

import ipaddress
import json
import re
import subprocess

import pytest
from test_priorities import CALL_APP, call_and_bulk, set_priority  # noqa: F401 (call_and_bulk: a fixture)

from homenet import wait_until
from homenet.call import PORT as CALL_PORT
from homenet.home import WAN_ROUTER_IP
from homenet.ipv6 import DELEGATED_FILE, WAN6_INET_IP, delegated_now
from homenet.isp import HOUSEHOLD_B_IP, LINK_MBIT, NS_B
from homenet.load import DOWN, QUEUE_FILL_S, call_under_load, neighbour_download
from homework_controller.policy.downlink import SLICE_COOKIE

SECONDS = 8
A_PUBLIC, B_PUBLIC = WAN_ROUTER_IP, HOUSEHOLD_B_IP  # the households' public addresses
NEIGHBOUR_SECONDS = SECONDS + QUEUE_FILL_S + 6  # from before A's download starts until after the call
CALL_PACKET_BYTES = 202  # 160 bytes of UDP payload, as tc counts it on the downlink (with IP and Ethernet)
CALL_PACKET_BYTES6 = CALL_PACKET_BYTES + 20  # an IPv6 header is 20 bytes longer


def _queues(home) -> dict[str, dict[str, int]]:
    """Bytes sent so far by each household's queues on the shared downlink ({"a.high": n, ...})."""
    return {
        f"{name}.{queue}": counters["bytes"]
        for name, s in home.isp.stats().items()
        for queue, counters in s["queues"].items()
    }


def _measured(home, caller, bulk, during=None, **family):
    """A's call while A's second device and household B both download; with the queues' byte counts
    over that time and what B's download got. `family`: call_under_load's `to` and `bulk_to` (IPv6)."""
    before = _queues(home)
    neighbour = neighbour_download(home, NEIGHBOUR_SECONDS)
    try:
        call = call_under_load(home, caller, bulk, DOWN, SECONDS, during=during, **family)
        out, err = neighbour.communicate(timeout=60)
    finally:
        if neighbour.poll() is None:
            neighbour.terminate()
    neighbour_mbit = json.loads(out)["end"]["sum_received"]["bits_per_second"] / 1e6
    after = _queues(home)
    return call, neighbour_mbit, {key: after[key] - before.get(key, 0) for key in after}


def test_a_high_call_keeps_its_downlink_delay_low_in_its_slice_while_the_neighbour_downloads(home, call_and_bulk):  # noqa: F811 (the fixture imported above)
    caller, bulk = call_and_bulk
    isp = home.isp
    assert isp.connected("a") and isp.connected("b"), isp.status()
    slot = {name: s["slot"] for name, s in isp.stats().items()}
    a_cookie, b_cookie = (f"cookie={slot[name] << 40 | SLICE_COOKIE:#x}," for name in ("a", "b"))

    def call_rules() -> list[str]:
        """The households' rules for downlink from the call's port (each router marks a call's service
        ports ahead, as value/mask prefixes: `tp_src=0xd96/0xfffe` covers 3478). B's router, whose
        household changed nothing, has video calls at High too (the table's default), for B's address."""
        return [rule for rule in isp.flows() if covers_port(rule, int(CALL_PORT))]

    def a_rules(rules: list[str]) -> list[str]:
        return [rule for rule in rules if a_cookie in rule]

    seen: list[list[str]] = []
    set_priority(home, CALL_APP, "default")
    normal, normal_b_mbit, normal_bytes = _measured(home, caller, bulk, during=(4.0, lambda: seen.append(call_rules())))
    set_priority(home, CALL_APP, "high")
    high, high_b_mbit, high_bytes = _measured(home, caller, bulk, during=(4.0, lambda: seen.append(call_rules())))
    report = (
        f"normal {normal.summary()}, high {high.summary()}; B got {normal_b_mbit:.1f} / {high_b_mbit:.1f} "
        f"Mbit/s; queue bytes at normal {normal_bytes}, at high {high_bytes}; call rules {seen}"
    )

    # The shared downlink is full: B's downloads and A's own take all of it.
    for b_mbit, call in ((normal_b_mbit, normal), (high_b_mbit, high)):
        assert b_mbit + call.bulk_mbit >= 0.85 * LINK_MBIT, report
    # Positive control: at Normal the call waits behind A's own download at the ISP...
    assert normal.p(99) >= 10 * high.p(99), report
    # ... and nothing of it was in A's High queue then; at High the call's downlink was there, and
    # nothing else: B's downloads stay in B's queues.
    assert a_rules(seen[0]) == [] and normal_bytes["a.high"] == 0, report
    call_bytes = len(high.delays_ms) * CALL_PACKET_BYTES
    assert 0.9 * call_bytes <= high_bytes["a.high"] <= 1.2 * call_bytes, report
    assert high_bytes["b.normal"] >= 0.9 * high_b_mbit * 1e6 / 8 * NEIGHBOUR_SECONDS, report
    # The rule is A's, in A's slice (its slot in the cookie, DSCP 46 for the High class, A's address);
    # B's rules (B's slot) name only B's address.
    assert [rule for rule in a_rules(seen[1]) if "set_field:46->ip_dscp" in rule and f"nw_dst={A_PUBLIC}" in rule]
    b_rules = [rule for rule in seen[1] if b_cookie in rule]
    assert all(f"nw_dst={B_PUBLIC}" in rule for rule in b_rules), report


def covers_port(rule: str, port: int) -> bool:
    """Whether an `ovs-ofctl dump-flows` line matches packets from this port (tp_src, exact or masked)."""
    found = re.search(r"tp_src=(\w+)(?:/(\w+))?", rule)
    if found is None:
        return False
    value, mask = int(found[1], 0), int(found[2], 0) if found[2] else 0xFFFF
    return port & mask == value & mask


def _delegated(home) -> ipaddress.IPv6Network:
    """What the ISP's DHCPv6 server delegated to A's router now (the file its client writes)."""
    return ipaddress.IPv6Network(delegated_now(home.run_dir))


def _global_address(home, name: str, prefix: ipaddress.IPv6Network) -> str | None:
    """The device's usable global IPv6 address inside the delegated prefix (SLAAC done), if any."""
    out = home.exec(name, "ip", "-json", "-6", "addr", "show", "dev", "wlan0", "scope", "global").stdout
    info = json.loads(out or "[]")
    for a in info[0].get("addr_info", []) if info else []:
        if "local" in a and not a.get("tentative") and ipaddress.IPv6Address(a["local"]) in prefix:
            return a["local"]
    return None


@pytest.fixture
def call_and_bulk6(home):
    """Two of A's devices with global IPv6 addresses: one calls, the other downloads."""
    prefix = _delegated(home)
    for name in ("phone6", "console6"):
        home.add(name)
        home.dhcp(name)
        home.permit(name)
        home.dhcp(name)
    for name in ("phone6", "console6"):
        wait_until(f"{name}'s global address", lambda n=name: _global_address(home, n, prefix), 15, 0.1)
    yield "phone6", "console6"
    set_priority(home, CALL_APP, "default")


def test_a_high_ipv6_call_keeps_its_downlink_delay_low_in_its_slice_while_an_ipv6_download_saturates(
    home, call_and_bulk6
):
    caller, bulk = call_and_bulk6
    isp = home.isp
    assert isp.connected("a") and isp.connected("b"), isp.status()
    stats = isp.stats()
    # A's flowspace on the slice holds the prefix the ISP's DHCPv6 server delegated to A's router.
    prefix = _delegated(home)
    assert str(prefix) in stats["a"]["addresses"], stats["a"]
    a_cookie = f"cookie={stats['a']['slot'] << 40 | SLICE_COOKIE:#x},"

    def a_ipv6_call_rules() -> list[str]:
        """A's rules for IPv6 downlink from the call's port (value/mask, as in the IPv4 test)."""
        return [
            rule
            for rule in isp.flows()
            if a_cookie in rule and "ipv6_dst=" in rule and covers_port(rule, int(CALL_PORT))
        ]

    seen: list[list[str]] = []
    over_ipv6 = {"to": WAN6_INET_IP, "bulk_to": WAN6_INET_IP}
    set_priority(home, CALL_APP, "default")
    normal, normal_b_mbit, normal_bytes = _measured(
        home, caller, bulk, during=(4.0, lambda: seen.append(a_ipv6_call_rules())), **over_ipv6
    )
    set_priority(home, CALL_APP, "high")
    high, high_b_mbit, high_bytes = _measured(
        home, caller, bulk, during=(4.0, lambda: seen.append(a_ipv6_call_rules())), **over_ipv6
    )
    report = (
        f"normal {normal.summary()}, high {high.summary()}; B got {normal_b_mbit:.1f} / {high_b_mbit:.1f} "
        f"Mbit/s; queue bytes at normal {normal_bytes}, at high {high_bytes}; A's IPv6 call rules {seen}"
    )

    # The shared downlink is full: B's downloads and A's own IPv6 one take all of it.
    for b_mbit, call in ((normal_b_mbit, normal), (high_b_mbit, high)):
        assert b_mbit + call.bulk_mbit >= 0.85 * LINK_MBIT, report
    # Positive control: at Normal the IPv6 call waits behind A's own IPv6 download at the ISP, in A's
    # Normal queue (nothing in A's High queue, no rule of A's for it)...
    assert normal.p(99) >= 10 * high.p(99), report
    assert seen[0] == [] and normal_bytes["a.high"] == 0, report
    # ... at High its downlink is in A's High queue, and nothing else is (not A's download, not B's).
    call_bytes = len(high.delays_ms) * CALL_PACKET_BYTES6
    assert 0.9 * call_bytes <= high_bytes["a.high"] <= 1.2 * call_bytes, report
    # The rule is A's (its slot in the cookie), DSCP 46 for the High class, for A's delegated prefix: the
    # call's port marked ahead (the router learns no rule of the call's own, the port's mark covers it).
    assert [rule for rule in seen[1] if "set_field:46->ip_dscp" in rule and f"ipv6_dst={prefix}," in rule], report


B_DELEGATED = "2001:db8:300::/56"  # what the ISP delegates to B in this test (routed nowhere: rules only)


def _b_health() -> dict:
    """Household B's router's ws.v1 health (on its own namespace's loopback)."""
    out = subprocess.run(
        ["ip", "netns", "exec", NS_B, "curl", "-s", "-m", "3", "http://127.0.0.1:8081/ws.v1/health"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    return json.loads(out)


def _b_delegated(home, prefix: str) -> None:
    """B's router's prefix-delegation client writes what it was delegated (atomically, as dhcpcd's hook)."""
    path = home.isp.dir / "b" / DELEGATED_FILE
    path.parent.mkdir(exist_ok=True)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(f"{prefix}\n")
    tmp.replace(path)


def test_household_b_cannot_put_its_rules_on_the_prefix_delegated_to_a(home):
    """B's router believes A's prefix is its own (misconfigured, or hostile): the slicer refuses each of
    its IPv6 rules there and nothing of B's names A's prefix on the switch, while B's IPv4 rules hold;
    with B's own delegated prefix, B's IPv6 rules are accepted."""
    isp = home.isp
    a_prefix = _delegated(home)
    stats = isp.stats()
    b_cookie = f"cookie={stats['b']['slot'] << 40 | SLICE_COOKIE:#x},"

    def b_ipv6_rules(inside: str) -> list[str]:
        return [rule for rule in isp.flows() if b_cookie in rule and f"ipv6_dst={inside}" in rule]

    isp.fvctl("update", "b", "--address", f"{HOUSEHOLD_B_IP}/32", "--address", B_DELEGATED)
    try:
        refused_before = isp.stats()["b"]["counters"]["refused"]
        _b_delegated(home, str(a_prefix))
        wait_until(
            "the slicer to refuse B's rules on A's prefix",
            lambda: str(a_prefix.network_address) in _b_health()["slice"]["last_error"],
            30,
        )
        health = _b_health()["slice"]
        assert health["connected"] and health["rules_refused"] >= 1 and "OFPBMC_EPERM" in health["last_error"], health
        assert isp.stats()["b"]["counters"]["refused"] > refused_before
        assert b_ipv6_rules(str(a_prefix.network_address)) == []
        # B's IPv4 rules (its video calls' ports, at High by default) hold.
        assert [rule for rule in isp.flows() if b_cookie in rule and f"nw_dst={B_PUBLIC}" in rule], isp.flows()
        # Positive control: B's own delegated prefix.
        _b_delegated(home, B_DELEGATED)
        wait_until("B's IPv6 rules on its own prefix", lambda: b_ipv6_rules(B_DELEGATED), 30)
        assert b_ipv6_rules(str(a_prefix.network_address)) == []
    finally:
        _b_delegated(home, "")  # no prefix: B's router takes its IPv6 rules off
        isp.fvctl("update", "b", "--address", f"{HOUSEHOLD_B_IP}/32")
