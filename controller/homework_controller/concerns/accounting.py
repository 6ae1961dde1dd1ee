"""Flow accounting, the concern: what the switch's own records (flow export, `flow_export.py`) say each
device's connections moved since the last poll (the next poll's `Flows` rows), which connections have a
rule of their own (within the device's flow budget), and what each rule of the accounting table
forwarded since the last poll (devices' allowances count that).

The switch counts every connection it forwards, also those of a device opening them by the thousand;
what the controller keeps of them between polls is bounded, the rest counted as the device's whole.
"""

from __future__ import annotations

import ipaddress
from collections import Counter
from collections.abc import Callable, Iterable
from typing import NamedTuple

from .. import flows
from ..effects import TellHousehold
from ..flows import flows_v6
from ..flows.values import unspecified

# Connection directions kept between two polls from the switch's records; beyond, a device's new
# ones are counted as its whole (protocol 0, the far side unspecified), so a flood cannot grow memory.
MAX_EXPORTED_FLOWS = 65536
# Connection directions of one device that are rows of their own in a poll; beyond, its whole-device
# rows. Every row is work under the controller's lock at the poll (15,000 of a flooding device took
# 126 ms here, 400 ms under the flood bench's load); a page load is 160 directions.
MAX_EXPORTED_PER_DEVICE = 1000
ETHERNET_HEADER = 14  # bytes a frame adds to its IP packet (no VLAN tag on the LAN)


class Accounting:
    def __init__(self, clock: Callable[[], float], flow_budget: int = 200, budget_cooldown_s: float = 120.0):
        self.clock = clock
        self.flow_budget, self.budget_cooldown_s = flow_budget, budget_cooldown_s
        self._exported: dict[flows.FiveTuple, list[int]] = {}  # since the last poll: [packets, bytes]
        self._exported_by: Counter[str] = Counter()  # directions of their own since the last poll, per MAC
        self._ruled: dict[str, set[flows.FiveTuple]] = {}  # mac -> its connection directions with a rule of their own
        self._crowded_until: dict[str, float] = {}  # mac -> when the household may be told of its crowd again
        self._usage_counters: dict[tuple, tuple[int, int]] = {}  # rule key -> (packets, bytes) at the last poll

    # -- the lifecycle

    def knows(self, mac: str) -> bool:
        return mac in self._ruled or mac in self._crowded_until

    def forget(self, mac: str) -> None:
        self._ruled.pop(mac, None)
        self._crowded_until.pop(mac, None)

    def rules_dropped(self, mac: str) -> None:
        """The device's rules left the switch: its connections' rules with them."""
        self._ruled.pop(mac, None)

    def may_rule(self, mac: str, flow: flows.FiveTuple) -> bool:
        """A connection direction whose app was decided from the records or from an agent gets a rule of
        its own, within the device's flow budget (beyond it keeps its mark ahead)."""
        ruled = self._ruled.setdefault(mac, set())
        if flow in ruled or len(ruled) >= self.flow_budget:
            return False
        ruled.add(flow)
        return True

    # -- events

    def over_budget(self, mac: str, label: str) -> TellHousehold:
        """What the household is told when the device (`label`: what it calls it) opened connections by the
        thousand."""
        return TellHousehold(
            "flow-budget",
            mac,
            f"{label} opened more than {MAX_EXPORTED_PER_DEVICE} connections between two polls; the rest are"
            f" counted as a whole for the next {int(self.budget_cooldown_s // 60)} minutes",
        )

    def crowded(self) -> list[str]:
        """Before the poll's rows are read: the devices with more connection directions since the last poll
        than have rows of their own (a port scan, a flood of random destinations), each at most once a
        budget cooldown."""
        now = self.clock()
        crowded = []
        for mac, directions in self._exported_by.items():
            if directions >= MAX_EXPORTED_PER_DEVICE and self._crowded_until.get(mac, 0.0) <= now:
                self._crowded_until[mac] = now + self.budget_cooldown_s
                crowded.append(mac)
        return crowded

    def exported(self, mac: str, flow: flows.FiveTuple, outgoing: bool, pkts: int, octets: int) -> None:
        """What the switch forwarded of one direction of a device's connection (outgoing: the device
        sent it), from its records: counted in the next poll's rows. The records count IP bytes;
        Flows counts frames, Ethernet header included, as the rules' counters do."""
        nbytes = octets + ETHERNET_HEADER * pkts
        if flow not in self._exported and (
            len(self._exported) >= MAX_EXPORTED_FLOWS or self._exported_by[mac] >= MAX_EXPORTED_PER_DEVICE
        ):
            if outgoing:
                flow = flows.FiveTuple(0, flow.saddr, 0, unspecified(flow.saddr), 0)
            else:
                flow = flows.FiveTuple(0, unspecified(flow.daddr), 0, flow.daddr, 0)
        elif flow not in self._exported:
            self._exported_by[mac] += 1
        total = self._exported.setdefault(flow, [0, 0])
        total[0] += pkts
        total[1] += nbytes

    def take_records(self) -> dict[flows.FiveTuple, list[int]]:
        """What each connection direction moved since the last poll, (packets, bytes), handed over for the
        poll's Flows rows; the next poll's are summed afresh."""
        exported, self._exported = self._exported, {}
        self._exported_by.clear()
        return exported

    def flow_removed(self, priority: int, match: dict) -> flows.FiveTuple | None:
        """A rule of the accounting table idled out (or was deleted): the connection direction, if the rule
        was one's own (it may have one again)."""
        if priority != flows.AccountingPriority.LEARNT_FLOW:
            return None
        flow = flows.FiveTuple.from_match(match)
        for ruled in self._ruled.values():
            ruled.discard(flow)
        return flow

    def usage(self, counted: list[RuleCounters]) -> list[tuple[str, str, int]]:
        """What each rule of the accounting table forwarded since the last poll, as (source, destination,
        bytes; a device's IPv6 rules say its /64): the switch's own counters, exact whatever reached the
        controller. Allowances count these, not the records, which a flooding device can make the
        controller drop."""
        used = []
        seen = set()
        for rule in counted:
            seen.add(rule.key)
            used += self._usage_since(rule.key, rule.packets, rule.bytes, keep=True)
        for key in set(self._usage_counters) - seen:  # rules that are gone, counted at removal
            del self._usage_counters[key]
        return used

    def usage_at_removal(self, priority: int, match: dict, pkts: int, nbytes: int) -> list[tuple[str, str, int]]:
        """A rule left the switch: what it forwarded since the last poll (see `usage`)."""
        key = _usage_key(priority, match)
        return [] if key is None else self._usage_since(key, pkts, nbytes, keep=False)

    def _usage_since(self, key, pkts: int, nbytes: int, keep: bool) -> list[tuple[str, str, int]]:
        before_p, before_b = self._usage_counters.pop(key, (0, 0))
        if pkts < before_p:  # the rule was replaced since the last poll: it counts afresh
            before_b = 0
        if keep:
            self._usage_counters[key] = (pkts, nbytes)
        if nbytes <= before_b:
            return []
        saddr, daddr = (key[1].saddr, key[1].daddr) if key[0] == "flow" else (key[1], key[2])
        return [(saddr, daddr, nbytes - before_b)]


class RuleCounters(NamedTuple):
    """One rule of the accounting table as a poll reads it, keyed by what it counts (`_usage_key`)."""

    key: tuple
    packets: int
    bytes: int


def rule_counters(entries: Iterable[tuple[int, dict, int, int]]) -> list[RuleCounters]:
    """A flow-stats reply's (priority, match, packets, bytes) per rule, keyed as `Accounting` counts
    them: pure, so the poll parses its thousands of matches before it takes the controller's lock."""
    counted = []
    for priority, match, pkts, nbytes in entries:
        key = _usage_key(priority, match)
        if key is not None:
            counted.append(RuleCounters(key, pkts, nbytes))
    return counted


def _usage_key(priority: int, match: dict) -> tuple | None:
    """What a rule of the accounting table counts: a connection direction's own rule its 5-tuple, a device's
    rules its address ("0.0.0.0" the other side), its IPv6 rules its /64 ("::/0" the other side)."""
    if priority == flows.AccountingPriority.LEARNT_FLOW:
        return ("flow", flows.FiveTuple.from_match(match))
    if priority in (flows.AccountingPriority.DEVICE_SOURCE, flows.AccountingPriority.DEVICE_DEST):
        return ("device", match.get("ipv4_src", "0.0.0.0"), match.get("ipv4_dst", "0.0.0.0"))
    if priority in (flows_v6.COUNTED_SOURCE, flows_v6.COUNTED_DEST):
        return ("device", _prefix(match.get("ipv6_src")), _prefix(match.get("ipv6_dst")))
    return None


def _prefix(value) -> str:
    """A rule's IPv6 match as a prefix: (address, mask) as the switch reports a masked field."""
    if value is None:
        return "::/0"
    if isinstance(value, tuple):
        address, mask = value
        return str(ipaddress.IPv6Network((address, bin(int(ipaddress.IPv6Address(mask))).count("1")), strict=False))
    return str(ipaddress.IPv6Network(value, strict=False))
