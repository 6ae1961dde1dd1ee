"""What the switch says of devices' connections, sequenced for `HomeRouter`: a flow's packets copied
while it has no rule of its own, the accounting table's counters, the switch's own records, a rule
that idled out, and end-host agents naming the programs behind connections.

Each involves several concerns: accounting counts (and keeps each device's flow budget), app
priorities classify and mark, the household's controls count allowances (a device whose allowance
runs out is held back at once), and the registry says whose address a flow is.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

from .. import flows
from ..concerns.accounting import Accounting, RuleCounters
from ..concerns.agent_reports import AgentReport, AgentReportBook
from ..concerns.app_priorities import AppPoll, AppPriorities
from ..concerns.household_controls import HouseholdControls
from ..concerns.registry import DeviceRegistry
from ..effects import Effect, InstallRules, LogRow
from ..policy import qos
from ..wire import packets
from .reconciler import Reconciler

# Connection directions one part of a poll reads under one hold of the lock: a poll of 6,000 (20 devices'
# records) held it 60 ms at once, about 10 µs a direction (issue 39).
POLL_PART = 250


@dataclass(frozen=True)
class FlowPoll:
    """One poll of the accounting table (`FlowEvents.start_poll`), read in parts (`parts`,
    `FlowEvents.poll_part`): the edge holds the lock for each part alone, so that other devices' DHCP
    and DNS are served between them, and finishes it (`FlowEvents.finish_poll`)."""

    apps: AppPoll
    records: bool  # the switch's records, else the rules' counters and the copies (Flows rows already)
    items: list  # the records' (flow, [packets, bytes]), or the Flows rows

    def parts(self) -> Iterator[list]:
        for at in range(0, len(self.items), POLL_PART):
            yield self.items[at : at + POLL_PART]


@dataclass(frozen=True)
class FlowEvents:
    counters: dict[str, int]
    reconciler: Reconciler
    registry: DeviceRegistry
    accounting: Accounting
    priorities: AppPriorities
    agent_reports: AgentReportBook
    controls: HouseholdControls

    def on_flow_copy(self, in_port, frame: packets.Frame) -> list[Effect]:
        """A packet of a flow with no counting rule yet, copied to the controller while it is
        forwarded: count it here (a connection may end before its rule is in place) and give
        the flow a rule of its own, within the device's budget."""
        outgoing = in_port != flows.LOCAL
        if frame.ip_src is None or frame.ip_dst is None:
            return []  # not IP: nothing the accounting table copies
        device = self.registry.device_at(frame.ip_src if outgoing else frame.ip_dst)  # by its /30, or its /64
        if device is None or not device.forwards or not self.accounting.learning(device.mac):
            return []  # copies still in flight after a change: the device's own rule counted them
        flow = flows.FiveTuple(frame.ip_proto, frame.ip_src, frame.sport, frame.ip_dst, frame.dport)
        verdict = self.accounting.count_copy(device.mac, flow, outgoing, frame.size)
        if verdict == "wait":
            return []  # its rule is on its way
        if verdict == "over":
            return self.reconciler.reconcile(device) + [self.accounting.over_budget(device.mac, device.label)]
        priority = self.priorities.learn_flow(device, flow)
        return [InstallRules((flows.learnt_flow_rule(device, flow, qos.mark_actions(priority)),))]

    def on_flow_counters(self, counted: list[RuleCounters]) -> list[Effect]:
        """The accounting table's counters at a poll (keyed off the lock: `accounting.rule_counters`) ->
        Flows rows with what each flow did since the last poll, the apps' rows and judgements, and what
        devices used of their allowances: the whole poll at once (the edge reads it in parts)."""
        poll, effects = self.start_poll(counted)
        for part in poll.parts():
            effects += self.poll_part(poll, part)
        return effects + self.finish_poll(poll)

    def start_poll(self, counted: list[RuleCounters]) -> tuple[FlowPoll, list[Effect]]:
        """A poll begins: what devices used of their allowances (the rules' own counters), the devices
        opening connections by the thousand, and the poll whose parts are read next."""
        told = []
        if self.accounting.from_export:  # the household hears of a device opening connections by the thousand
            for mac in self.accounting.crowded():
                if (device := self.registry.devices.get(mac)) is not None:
                    told.append(self.accounting.over_budget(mac, device.label))
            items: list = list(self.accounting.take_records().items())
        else:
            items = self.accounting.read_counters(counted)
        poll = FlowPoll(self.priorities.start_poll(), self.accounting.from_export, items)
        return poll, told + self._count_usage(self.accounting.usage(counted))

    def poll_part(self, poll: FlowPoll, part: list) -> list[Effect]:
        """Some of the poll's flows: their Flows rows, and the rules of their own the records call for."""
        if not poll.records:
            return part + self.priorities.poll_part(poll.apps, part)
        rows = [LogRow("Flows", (f.proto, f.saddr, f.sport, f.daddr, f.dport, p, b)) for f, (p, b) in part]
        return rows + self.priorities.poll_part(poll.apps, rows, self.accounting.may_rule)

    def finish_poll(self, poll: FlowPoll) -> list[Effect]:
        """Every part is in: the apps' rows, and flows judged over the whole poll."""
        return self.priorities.finish_poll(poll.apps)

    def on_flow_export(self, totals: dict[flows.FiveTuple, list[int]]) -> None:
        """The switch's own records of what it forwarded, summed per connection direction (off the
        lock): those of the router's devices are counted in the next poll's Flows rows."""
        for flow, (pkts, nbytes) in totals.items():
            if (device := self.registry.device_at(flow.saddr)) is not None:
                self.accounting.exported(device.mac, flow, True, pkts, nbytes)
            elif (device := self.registry.device_at(flow.daddr)) is not None:
                self.accounting.exported(device.mac, flow, False, pkts, nbytes)

    def on_flow_removed(self, priority: int, match: dict, pkts: int, nbytes: int) -> list[Effect]:
        """A learnt flow idled out (or was deleted): count what it saw since the last poll."""
        flow, rows = self.accounting.flow_removed(priority, match, pkts, nbytes)
        if flow is not None:
            self.priorities.flow_ended(flow)
        used = self.accounting.usage_at_removal(priority, match, pkts, nbytes)
        return rows + self.priorities.app_rows(rows) + self._count_usage(used)

    def agent_reported(self, reports: list[AgentReport]) -> list[Effect]:
        """End-host agents said which program owns connections (each of its own device's:
        `AgentReportBook.record_all`): the flows of the devices spoken for are marked again."""
        devices, ignored = self.agent_reports.record_all(reports, self.registry.forwarding_at)
        self.counters["agent_reports_ignored"] += ignored
        effects: list[Effect] = []
        for device in devices:
            effects += self.priorities.remark(device)
        if self.accounting.from_export:
            effects += self._decide_reported(reports)
        return effects

    def _decide_reported(self, reports: list[AgentReport]) -> list[Effect]:
        """With the switch's records (nothing copied to the controller): a connection an agent named gets a
        rule of its own now, both ways, if its app's priority is not the mark it has ahead; a socket with no
        far end (an unconnected UDP socket: a call's media) is marked, both ways, whatever it talks to."""
        effects: list[Effect] = []
        rules = []
        for report in reports:
            device = self.registry.forwarding_at(report.saddr)
            if device is None:
                continue
            if report.daddr == "*":
                app = self.priorities.app_table.app_of_process(report.process)
                effects += self.priorities.ahead.socket_named(device, report.proto, report.sport, app)
                continue
            out = flows.FiveTuple(report.proto, report.saddr, report.sport, report.daddr, report.dport)
            back = flows.FiveTuple(report.proto, report.daddr, report.dport, report.saddr, report.sport)
            for flow in (out, back):
                info = self.priorities.decide(device, flow)
                if info is not None and self.accounting.may_rule(device.mac, flow):
                    rules.append(self.priorities.ruled(device, flow, info))
        return effects + ([InstallRules(tuple(rules))] if rules else [])

    def _count_usage(self, forwarded: list[tuple[str, str, int]]) -> list[Effect]:
        """What the switch's counters say each device moved ((source, destination, bytes) per rule)
        counts against its allowance; one that runs out is paused now (its rules, not at the next tick)."""
        used: dict[str, int] = {}
        registry = self.registry
        for saddr, daddr, nbytes in forwarded:
            device = registry.by_ip(saddr) or registry.by_ip(daddr) or registry.forwarding_at_v6(saddr, daddr)
            if device is not None:
                used[device.mac] = used.get(device.mac, 0) + nbytes
        effects: list[Effect] = []
        changed = {}
        for mac in self.controls.count(used):
            device = self.registry.devices.get(mac)
            if device is not None:
                effects += self.reconciler.reconcile(device)
                changed[mac] = device.label
        return [*effects, *self.controls.used_up(changed)]
