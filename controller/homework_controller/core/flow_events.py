"""What the switch says of devices' connections, sequenced for `HomeRouter`: the switch's own records,
the accounting table's counters, a rule that idled out, and end-host agents naming the programs behind
connections.

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
    items: list[tuple[flows.FiveTuple, list[int]]]  # the records: (connection direction, [packets, bytes])

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

    def on_flow_counters(self, counted: list[RuleCounters]) -> list[Effect]:
        """A poll: the accounting table's counters (keyed off the lock: `accounting.rule_counters`), what
        devices used of their allowances; the switch's records since the last poll, Flows rows; the apps'
        rows and judgements: the whole poll at once (the edge reads it in parts)."""
        poll, effects = self.start_poll(counted)
        for part in poll.parts():
            effects += self.poll_part(poll, part)
        return effects + self.finish_poll(poll)

    def start_poll(self, counted: list[RuleCounters]) -> tuple[FlowPoll, list[Effect]]:
        """A poll begins: what devices used of their allowances (the rules' own counters), the devices
        opening connections by the thousand, and the poll whose parts are read next."""
        told = []  # the household hears of a device opening connections by the thousand
        for mac in self.accounting.crowded():
            if (device := self.registry.devices.get(mac)) is not None:
                told.append(self.accounting.over_budget(mac, device.label))
        poll = FlowPoll(self.priorities.start_poll(), list(self.accounting.take_records().items()))
        return poll, told + self._count_usage(self.accounting.usage(counted))

    def poll_part(self, poll: FlowPoll, part: list) -> list[Effect]:
        """Some of the poll's flows: their Flows rows, and the rules of their own the records call for."""
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
        """A rule of the accounting table idled out (or was deleted): what it forwarded since the last poll
        counts against its device's allowance (the records count its Flows rows)."""
        flow = self.accounting.flow_removed(priority, match)
        if flow is not None:
            self.priorities.flow_ended(flow)
        return self._count_usage(self.accounting.usage_at_removal(priority, match, pkts, nbytes))

    def agent_reported(self, reports: list[AgentReport]) -> list[Effect]:
        """End-host agents said which program owns connections (each of its own device's:
        `AgentReportBook.record_all`): the flows of the devices spoken for are marked again."""
        devices, ignored = self.agent_reports.record_all(reports, self.registry.forwarding_at)
        self.counters["agent_reports_ignored"] += ignored
        effects: list[Effect] = []
        for device in devices:
            effects += self.priorities.remark(device)
        return effects + self._decide_reported(reports)

    def _decide_reported(self, reports: list[AgentReport]) -> list[Effect]:
        """A connection an agent named gets a rule of its own now, both ways, if its app's priority is not the
        mark it has ahead; a socket with no far end (an unconnected UDP socket: a call's media) is marked,
        both ways, whatever it talks to."""
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
