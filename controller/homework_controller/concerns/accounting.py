"""Flow accounting, the concern: which flows each device has a counting rule for (within its flow
budget), what the controller counted itself before a flow's rule was in place, and the counters at
the last poll, from which `Flows` rows say what each flow did since.

A learnt flow is its 5-tuple; a device's learning rule (traffic not counted per flow) is a row
with protocol 0 and the far side 0.0.0.0.

With the switch's own records (flow export, `flow_export.py`), `Flows` rows come from them instead:
the switch counts every connection it forwards, also those whose packet copies never reached the
controller (issue 26). The rules' counters and the copies are then not counted at all (each packet
would count twice), and a device over its flow budget still has every connection counted.
"""

from __future__ import annotations

import ipaddress
from collections import Counter
from collections.abc import Callable, Iterable
from typing import NamedTuple

from .. import flows
from ..effects import LogRow, TellHousehold
from ..flows import flows_v6
from ..flows.values import unspecified

# Connection directions kept between two polls from the switch's records; beyond, a device's new
# ones are counted as its whole (a row like its learning rule's), so a flood cannot grow memory.
MAX_EXPORTED_FLOWS = 65536
# Connection directions of one device that are rows of their own in a poll; beyond, its whole-device
# rows. Every row is work under the controller's lock at the poll (15,000 of a flooding device took
# 126 ms here, 400 ms under the flood bench's load); a page load is 160 directions.
MAX_EXPORTED_PER_DEVICE = 1000
ETHERNET_HEADER = 14  # bytes a frame adds to its IP packet (no VLAN tag on the LAN)


class Accounting:
    def __init__(
        self,
        clock: Callable[[], float],
        flow_budget: int = 200,
        budget_cooldown_s: float = 120.0,
        from_export: bool = False,
    ):
        self.clock = clock
        self.flow_budget, self.budget_cooldown_s = flow_budget, budget_cooldown_s
        self.from_export = from_export
        self._exported: dict[flows.FiveTuple, list[int]] = {}  # since the last poll: [packets, bytes]
        self._exported_by: Counter[str] = Counter()  # directions of their own since the last poll, per MAC
        self._learnt: dict[str, set[flows.FiveTuple]] = {}
        self._copied: dict[tuple, tuple[int, int]] = {}  # counter key -> (packets, bytes) the controller saw
        self._over_budget: dict[str, float] = {}  # mac -> when per-flow learning resumes
        self._counters: dict[tuple, tuple[int, int]] = {}  # rule key -> (packets, bytes) at last poll
        self._usage_counters: dict[tuple, tuple[int, int]] = {}  # the same, read for devices' use

    # -- the lifecycle

    def knows(self, mac: str) -> bool:
        return mac in self._learnt or mac in self._over_budget

    def forget(self, mac: str) -> None:
        self._learnt.pop(mac, None)
        self._over_budget.pop(mac, None)

    def rules_dropped(self, mac: str) -> None:
        """The device's rules left the switch: its learnt flows with them (learnt again as they pass)."""
        self._learnt.pop(mac, None)

    def tick(self, now: float) -> None:
        """Devices whose flow budget cooled down learn flows again (their rules say so at the next reconcile)."""
        for mac in [m for m, until in self._over_budget.items() if until <= now]:
            del self._over_budget[mac]

    def learning(self, mac: str) -> bool:
        """Whether the device's rules copy a new flow's packets to the controller: within its budget, and
        only without the switch's records (with them, marks are decided ahead and nothing is copied)."""
        return not self.from_export and mac not in self._over_budget

    def may_rule(self, mac: str, flow: flows.FiveTuple) -> bool:
        """With the switch's records: a connection direction whose app was decided from them or from an
        agent gets a rule of its own, within the device's flow budget (beyond it keeps its mark ahead)."""
        learnt = self._learnt.setdefault(mac, set())
        if flow in learnt or len(learnt) >= self.flow_budget:
            return False
        learnt.add(flow)
        return True

    # -- events

    def count_copy(self, mac: str, flow: flows.FiveTuple, outgoing: bool, size: int) -> str:
        """A packet of the device's flow copied to the controller while it is forwarded: counted here
        (a connection may end before its rule is in place). What to do: "learn" (a rule for the flow),
        "wait" (its rule is on its way), "over" (the device just went over its budget)."""
        if not self.from_export:
            self._count_copy(flow, outgoing, size)
        learnt = self._learnt.setdefault(mac, set())
        if flow in learnt:
            return "wait"
        if len(learnt) >= self.flow_budget:
            self._over_budget[mac] = self.clock() + self.budget_cooldown_s
            return "over"
        learnt.add(flow)
        return "learn"

    def over_budget(self, mac: str, label: str) -> TellHousehold:
        """What the household is told when the device (`label`: what it calls it) went over its budget."""
        if self.from_export:
            crowd = (
                f"more than {MAX_EXPORTED_PER_DEVICE} connections between two polls; the rest are counted as a whole"
            )
        else:
            crowd = f"more than {self.flow_budget} connections at once; its traffic is counted as a whole"
        return TellHousehold(
            "flow-budget",
            mac,
            f"{label} opened {crowd}" f" for the next {int(self.budget_cooldown_s // 60)} minutes",
        )

    def crowded(self) -> list[str]:
        """With the switch's records, before the poll's rows are read: the devices with more connection
        directions since the last poll than have rows of their own (a port scan, a flood of random
        destinations), each at most once a budget cooldown."""
        now = self.clock()
        crowded = []
        for mac, directions in self._exported_by.items():
            if directions >= MAX_EXPORTED_PER_DEVICE and self._over_budget.get(mac, 0.0) <= now:
                self._over_budget[mac] = now + self.budget_cooldown_s
                crowded.append(mac)
        return crowded

    def _count_copy(self, flow: flows.FiveTuple, outgoing: bool, size: int) -> None:
        # The device's learning rule counted this packet too: it is the flow's, not the device's.
        device_key = ("device", flow.saddr, "0.0.0.0") if outgoing else ("device", "0.0.0.0", flow.daddr)
        for key in (("flow", flow), device_key):
            pkts, nbytes = self._copied.get(key, (0, 0))
            self._copied[key] = (pkts + 1, nbytes + size)

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
        """With the switch's records: what each connection direction moved since the last poll,
        (packets, bytes), handed over for the poll's Flows rows; the next poll's are summed afresh."""
        exported, self._exported = self._exported, {}
        self._exported_by.clear()
        return exported

    def read_counters(self, counted: list[RuleCounters]) -> list[LogRow]:
        """The accounting table's counters (keyed off the lock: `rule_counters`) -> Flows rows with what
        each flow did since the last poll, counting copies (with the switch's records: `take_records`).
        A learnt flow's row is what its rule counted plus what the controller saw of it before the rule
        was in place."""
        rows = []
        seen = set()
        for rule in counted:
            if rule.key is None:
                continue
            seen.add(rule.key)
            row = self._count(rule.key, rule.packets, rule.bytes)
            if row is not None:
                rows.append(row)
        for key in set(self._counters) - seen:  # rules that are gone, counted at removal
            del self._counters[key]
        # Flows that ended before their rule was in place: what the controller saw is all there is.
        for key in [k for k in self._copied if k not in seen]:
            row = self._count(key, 0, 0, keep=False)
            if row is not None and key[0] == "flow":
                rows.append(row)
        return rows

    def flow_removed(self, priority: int, match: dict, pkts: int, nbytes: int) -> tuple[flows.FiveTuple | None, list]:
        """A learnt flow idled out (or was deleted): (the flow, if it was one, and its row for what it
        saw since the last poll, if anything)."""
        key = _counter_key(priority, match)
        if key is None:
            return None, []
        row = None if self.from_export else self._count(key, pkts, nbytes, keep=False)
        for learnt in self._learnt.values():
            learnt.discard(key[1])
        return (key[1] if key[0] == "flow" else None), [row] if row is not None else []

    def usage(self, counted: list[RuleCounters]) -> list[tuple[str, str, int]]:
        """What each rule of the accounting table forwarded since the last poll, as (source, destination,
        bytes; a device's IPv6 rules say its /64): the switch's own counters, exact whatever reached the
        controller. Allowances count these, not the records or the copies, which a flooding device can
        make the controller drop."""
        used = []
        seen = set()
        for rule in counted:
            if rule.usage_key is None:
                continue
            seen.add(rule.usage_key)
            used += self._usage_since(rule.usage_key, rule.packets, rule.bytes, keep=True)
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

    def _count(self, key, pkts: int, nbytes: int, keep: bool = True) -> LogRow | None:
        """The row for what a counter saw since it was last read, if it saw anything."""
        before_p, before_b = self._counters.pop(key, (0, 0))
        if pkts < before_p:  # the rule was replaced since the last poll: it counts afresh
            before_p, before_b = 0, 0
        if keep:
            self._counters[key] = (pkts, nbytes)
        copied_p, copied_b = self._copied.pop(key, (0, 0))
        if key[0] == "flow":
            delta_p, delta_b = pkts - before_p + copied_p, nbytes - before_b + copied_b
        else:  # a device's rule also counted the copies that were then counted as flows
            delta_p, delta_b = max(0, pkts - before_p - copied_p), max(0, nbytes - before_b - copied_b)
        if delta_p <= 0:
            return None
        return LogRow("Flows", _flow_row(key, delta_p, delta_b))


class RuleCounters(NamedTuple):
    """One rule of the accounting table as a poll reads it: its keys (None: not counted that way)."""

    key: tuple | None  # its Flows row's: a learnt flow's 5-tuple, a device's learning rule's addresses
    usage_key: tuple | None  # what it forwarded for a device's allowance (its IPv6 rules too)
    packets: int
    bytes: int


def rule_counters(entries: Iterable[tuple[int, dict, int, int]]) -> list[RuleCounters]:
    """A flow-stats reply's (priority, match, packets, bytes) per rule, keyed as `Accounting` counts
    them: pure, so the poll parses its thousands of matches before it takes the controller's lock."""
    counted = []
    for priority, match, pkts, nbytes in entries:
        key = _counter_key(priority, match)
        usage_key = key if key is not None else _usage_key(priority, match)
        if usage_key is not None:
            counted.append(RuleCounters(key, usage_key, pkts, nbytes))
    return counted


def _counter_key(priority: int, match: dict):
    if priority == flows.AccountingPriority.LEARNT_FLOW:
        return ("flow", flows.FiveTuple.from_match(match))
    if priority in (flows.AccountingPriority.DEVICE_SOURCE, flows.AccountingPriority.DEVICE_DEST):
        return ("device", match.get("ipv4_src", "0.0.0.0"), match.get("ipv4_dst", "0.0.0.0"))
    return None


def _usage_key(priority: int, match: dict):
    """As `_counter_key`, and a device's IPv6 counting rules too (no Flows rows of their own): their
    source and destination are the device's /64 ("::/0" the other side)."""
    if priority in (flows_v6.COUNTED_SOURCE, flows_v6.COUNTED_DEST):
        return ("device", _prefix(match.get("ipv6_src")), _prefix(match.get("ipv6_dst")))
    return _counter_key(priority, match)


def _prefix(value) -> str:
    """A rule's IPv6 match as a prefix: (address, mask) as the switch reports a masked field."""
    if value is None:
        return "::/0"
    if isinstance(value, tuple):
        address, mask = value
        return str(ipaddress.IPv6Network((address, bin(int(ipaddress.IPv6Address(mask))).count("1")), strict=False))
    return str(ipaddress.IPv6Network(value, strict=False))


def _flow_row(key, pkts: int, nbytes: int) -> tuple:
    if key[0] == "flow":
        f = key[1]
        return (f.proto, f.saddr, f.sport, f.daddr, f.dport, pkts, nbytes)
    return (0, key[1], 0, key[2], 0, pkts, nbytes)
