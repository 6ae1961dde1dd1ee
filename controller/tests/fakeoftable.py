"""A switch in a test: where does a packet end up, given the rules the router computed?

Plays the router's effects (`InstallRules`, `ModifyRules`, `RemoveRules`) into tables of `flows.FlowRule`
values and runs packets through them the way OVS does: the highest-priority matching rule
of a table wins (two of the same priority matching is a bug, reported), a rule's meter goes first
(OpenFlow 1.3's instruction order: a packet over the meter's rate goes no further), apply-actions run
in order (`SetQueue` shows in the packet as `queue`), `GotoTable` continues. Tests assert
outcomes (which port, with which headers) rather than rule shapes.

Groups of type ALL are carried out as OVS does (`InstallGroup`, `RemoveGroup`): each bucket's actions on a copy
of the packet, the rule going on with the packet as it was.

Meters are carried out as OVS does (`InstallMeter`, `RemoveMeter`): a token bucket per meter, as deep
as its band's burst and filled at its rate by the switch's clock (a test's, to control), each packet
taking a token or being dropped. A message the real switch would refuse (a rule naming a meter or a group
it does not hold, a meter or a group added twice, new buckets for a group it does not hold) raises `Refused`
with OVS's error, so a metering or grouping mistake fails the test.
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Callable
from dataclasses import dataclass, field

from homework_controller import flows
from homework_controller.effects import (
    InstallGroup,
    InstallMeter,
    InstallRules,
    ModifyRules,
    RemoveExactRules,
    RemoveGroup,
    RemoveMeter,
    RemoveRules,
)

WLAN = 1


@dataclass
class Delivery:
    port: int | str
    packet: dict


class Refused(AssertionError):
    """The real switch would answer this message with an OpenFlow error (named as OVS names it)."""


@dataclass
class MeterBucket:
    """A meter's drop band as OVS runs it: a bucket of burst tokens, refilled at rate per second."""

    band: flows.MeterBand
    tokens: float
    filled_at: float
    dropped: int = 0

    def admits(self, now: float) -> bool:
        elapsed = max(0.0, now - self.filled_at)
        self.tokens = min(float(self.band.burst), self.tokens + elapsed * self.band.rate_pps)
        self.filled_at = now
        if self.tokens < 1:
            self.dropped += 1
            return False
        self.tokens -= 1
        return True


@dataclass
class FakeSwitch:
    rules: list[flows.FlowRule] = field(default_factory=list)
    hits: dict[flows.FlowRule, int] = field(default_factory=dict)
    # The switch's clock, which fills its meters (a test's Clock to let time pass; by default it stands
    # still, so a meter lets through its burst and no more).
    clock: Callable[[], float] = lambda: 0.0
    meters: dict[int, MeterBucket] = field(default_factory=dict)
    groups: dict[int, flows.CopyGroup] = field(default_factory=dict)

    def apply(self, effects) -> None:
        for effect in effects:
            if isinstance(effect, InstallRules):
                for r in effect.rules:
                    self._check_meter(r)
                    self._add(r)
            elif isinstance(effect, ModifyRules):
                for r in effect.rules:
                    self._check_meter(r)
                    self._modify(r)
            elif isinstance(effect, RemoveRules):
                self.rules = [r for r in self.rules if r.cookie != effect.cookie]
            elif isinstance(effect, RemoveExactRules):
                gone = {r.slot for r in effect.rules}
                self.rules = [r for r in self.rules if r.slot not in gone]
            elif isinstance(effect, InstallGroup):
                group_id = effect.group.group_id
                if effect.replace and group_id not in self.groups:
                    raise Refused(
                        f"OFPGMFC_UNKNOWN_GROUP: new buckets for group {group_id}, which the switch does not hold"
                    )
                if not effect.replace and group_id in self.groups:
                    raise Refused(f"OFPGMFC_GROUP_EXISTS: group {group_id} added again")
                self.groups[group_id] = effect.group
            elif isinstance(effect, RemoveGroup):
                # OpenFlow 1.3: deleting a group deletes the rules that name it too.
                self.groups.pop(effect.group_id, None)
                self.rules = [r for r in self.rules if effect.group_id not in _groups_of(r)]
            elif isinstance(effect, InstallMeter):
                if effect.band.meter_id in self.meters:
                    raise Refused(f"OFPMMFC_METER_EXISTS: meter {effect.band.meter_id} added again")
                self.meters[effect.band.meter_id] = MeterBucket(effect.band, effect.band.burst, self.clock())
            elif isinstance(effect, RemoveMeter):
                # OpenFlow 1.3: deleting a meter deletes the rules that use it too.
                self.meters.pop(effect.meter_id, None)
                self.rules = [r for r in self.rules if _meter_of(r) != effect.meter_id]

    def _check_meter(self, r: flows.FlowRule) -> None:
        meter_id = _meter_of(r)
        if meter_id is not None and meter_id not in self.meters:
            raise Refused(f"OFPMMFC_INVALID_METER: a rule names meter {meter_id}, which the switch does not hold: {r}")
        for group_id in _groups_of(r):
            if group_id not in self.groups:
                raise Refused(f"OFPBAC_BAD_OUT_GROUP: a rule names group {group_id}, which the switch does not hold")

    def _add(self, new: flows.FlowRule) -> None:
        # OpenFlow: a rule with the same table, priority and match replaces the old one.
        self.rules = [r for r in self.rules if (r.table, r.priority, r.match) != (new.table, new.priority, new.match)]
        self.rules.append(new)

    def _modify(self, new: flows.FlowRule) -> None:
        """OFPFC_MODIFY_STRICT: new actions for the rule of the same table, priority and match, if there is one."""
        self.rules = [
            new if (r.table, r.priority, r.match) == (new.table, new.priority, new.match) else r for r in self.rules
        ]

    def table(self, table: int) -> list[flows.FlowRule]:
        return [r for r in self.rules if r.table == table]

    def send(self, packet: dict) -> list[Delivery]:
        """Run one packet (a dict of os-ken match field names, plus `ip_ttl`) from table 0."""
        deliveries: list[Delivery] = []
        self._run_table(0, dict(packet), deliveries)
        return deliveries

    def _lookup(self, table: int, packet: dict) -> flows.FlowRule | None:
        matching = [r for r in self.table(table) if _matches(r, packet)]
        if not matching:
            return None
        best = max(r.priority for r in matching)
        winners = [r for r in matching if r.priority == best]
        assert len(winners) == 1, f"ambiguous: {len(winners)} rules of priority {best} in table {table} match"
        return winners[0]

    def _run_table(self, table: int, packet: dict, deliveries) -> None:
        r = self._lookup(table, packet)
        if r is None:
            return  # OpenFlow 1.3 table miss: drop
        self.hits[r] = self.hits.get(r, 0) + 1
        meter_id = _meter_of(r)
        if meter_id is not None and not self.meters[meter_id].admits(self.clock()):
            return  # over the meter's rate: dropped before any action
        goto = self._apply(r.actions, packet, deliveries)
        if goto is not None:
            self._run_table(goto, packet, deliveries)

    def _apply(self, actions: tuple, packet: dict, deliveries: list[Delivery]) -> int | None:
        """Apply-actions in order, on `packet`; the table to go to next, if any."""
        goto = None
        for action in actions:
            if isinstance(action, flows.Output):
                port = packet["in_port"] if action.port == flows.IN_PORT else action.port
                deliveries.append(Delivery(port, dict(packet)))
            elif isinstance(action, flows.SetField):
                packet[action.field] = action.value
            elif isinstance(action, flows.SetQueue):
                packet["queue"] = action.queue_id
            elif isinstance(action, flows.DecTtl):
                packet["ip_ttl"] = packet.get("ip_ttl", 64) - 1
            elif isinstance(action, flows.Group):
                for bucket in self.groups[action.group_id].buckets:
                    self._apply(bucket, dict(packet), deliveries)
            elif isinstance(action, flows.GotoTable):
                goto = action.table
        return goto


def _groups_of(r: flows.FlowRule) -> set[int]:
    return {a.group_id for a in r.actions if isinstance(a, flows.Group)}


def _meter_of(r: flows.FlowRule) -> int | None:
    meters = [a.meter_id for a in r.actions if isinstance(a, flows.Meter)]
    assert len(meters) <= 1, f"a rule has one meter instruction at most: {r}"
    return meters[0] if meters else None


def _matches(r: flows.FlowRule, packet: dict) -> bool:
    for name, want in r.match:
        have = packet.get(name)
        if have is None:
            return False
        if isinstance(want, tuple):  # (address, mask): IPv4, or a MAC
            value, mask, seen = (_as_int(x) for x in (*want, have))
            if seen & mask != value & mask:
                return False
        elif have != want:
            return False
    return True


def _as_int(address) -> int:
    if isinstance(address, int):
        return address
    if _MAC.match(address):
        return int(address.replace(":", ""), 16)
    return int(ipaddress.ip_address(address))


_MAC = re.compile(r"^[0-9a-f]{2}(:[0-9a-f]{2}){5}$")


def ipv4(in_port, eth_src, eth_dst, src, dst, proto=flows.PROTO_TCP, sport=40000, dport=80, ttl=64) -> dict:
    """A packet as the switch sees it."""
    packet = {
        "in_port": in_port,
        "eth_src": eth_src,
        "eth_dst": eth_dst,
        "eth_type": flows.ETH_IPV4,
        "ipv4_src": src,
        "ipv4_dst": dst,
        "ip_proto": proto,
        "ip_ttl": ttl,
    }
    prefix = {flows.PROTO_TCP: "tcp", flows.PROTO_UDP: "udp"}.get(proto)
    if prefix:
        packet.update({f"{prefix}_src": sport, f"{prefix}_dst": dport})
    return packet
