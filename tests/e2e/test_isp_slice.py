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
"""

from __future__ import annotations

import json
import re

from test_priorities import CALL_APP, call_and_bulk, set_priority  # noqa: F401 (call_and_bulk: a fixture)

from homenet.call import PORT as CALL_PORT
from homenet.home import WAN_ROUTER_IP
from homenet.isp import HOUSEHOLD_B_IP, LINK_MBIT
from homenet.load import DOWN, QUEUE_FILL_S, call_under_load, neighbour_download
from homework_controller.downlink import SLICE_COOKIE

SECONDS = 8
A_PUBLIC, B_PUBLIC = WAN_ROUTER_IP, HOUSEHOLD_B_IP  # the households' public addresses
NEIGHBOUR_SECONDS = SECONDS + QUEUE_FILL_S + 6  # from before A's download starts until after the call
CALL_PACKET_BYTES = 202  # 160 bytes of UDP payload, as tc counts it on the downlink (with IP and Ethernet)


def _queues(home) -> dict[str, dict[str, int]]:
    """Bytes sent so far by each household's queues on the shared downlink ({"a.high": n, ...})."""
    return {
        f"{name}.{queue}": counters["bytes"]
        for name, s in home.isp.stats().items()
        for queue, counters in s["queues"].items()
    }


def _measured(home, caller, bulk, during=None):
    """A's call while A's second device and household B both download; with the queues' byte counts
    over that time and what B's download got."""
    before = _queues(home)
    neighbour = neighbour_download(home, NEIGHBOUR_SECONDS)
    try:
        call = call_under_load(home, caller, bulk, DOWN, SECONDS, during=during)
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
