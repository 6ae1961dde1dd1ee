"""Application priorities, the concern: what each learnt flow is (its app, and where that came from),
the priority its rule carries, the household's choices (hwdb AppPriority), the names devices looked
up, and which devices have their High flows demoted for a while (over their share of High).

Marks are decided ahead of a connection's first packet where the router can (issue 26, `flows.marks`):
every device's connections on an app's service ports, and a device's connections with an address its
lookups named for an app (marked when the answer goes out). A connection whose app is known only
otherwise (an agent's report, its behaviour, judged from the switch's records) gets a rule of its own
when its priority differs from the mark it had ahead (`decide`).

It reads what else it needs through functions `HomeRouter` gives it (the device at an address, a
device by MAC, what an agent reported for a connection), so it imports no other concern.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass, field

from .. import flows
from ..effects import Effect, InstallRules, LogRow, ModifyRules, TellHousehold
from ..lifecycle import NOTHING_TICKED, SwitchFacts, Ticked
from ..model import Device
from ..policy import apps, qos
from .ahead_marks import AheadMarks

LOG = logging.getLogger(__name__)


@dataclass
class FlowApp:
    """What the router decided about one learnt flow: its app, where that came from, the
    priority its rule carries, and its rate at the last poll (for the behaviour heuristic)."""

    app: str
    source: str
    priority: str
    pps: float = 0.0


@dataclass
class AppPoll:
    """What one poll has summed so far (`AppPriorities.start_poll`). A poll is read in parts, each under a
    hold of the controller's lock of its own, and finished once every part is in: the sums span the parts."""

    interval: float  # since the last poll (0 at the first: nothing is judged by rate)
    moved: dict[flows.FiveTuple, tuple] = field(default_factory=dict)  # flow -> (packets, bytes), every part's
    per_app: dict[str, list[int]] = field(default_factory=dict)  # app -> [bytes, packets]
    classified: dict[tuple, str] = field(default_factory=dict)  # (device, the connection as it sees it) -> app
    high: dict[str, list[int]] = field(default_factory=dict)  # mac -> High-marked [bytes up, bytes down]
    rates: dict[flows.FiveTuple, float] = field(default_factory=dict)  # the switch's records: each one's rate
    ruled: set[flows.FiveTuple] = field(default_factory=set)  # given a rule of their own by this poll


class AppPriorities:
    def __init__(
        self,
        clock: Callable[[], float],
        app_table: apps.AppTable,
        qos_settings: qos.QosSettings,
        device_at: Callable[[str], Device | None],
        device_of: Callable[[str], Device],
        process_of: Callable[[str, tuple], str | None],
        prefixes_of: Callable[[str], tuple[str, ...]],
        ipv6: bool,
    ):
        self.clock, self.app_table, self.qos = clock, app_table, qos_settings
        self._device_at, self._device_of, self._process_of = device_at, device_of, process_of
        self.chosen: dict[str, str] = {}  # the household's choices (hwdb AppPriority), app -> priority
        self.names = apps.NameMemory(app_table.app_of_names, owner_of=self._owner_of)
        self.flows_of: dict[str, dict[flows.FiveTuple, FlowApp]] = {}  # mac -> its learnt flows
        self.demoted: dict[str, float] = {}  # mac -> when its High flows may be High again
        # The marks the switch gives connections before their first packet (by port, by name).
        self.ahead = AheadMarks(
            app_table, self._household_priority, self._priority, self.demoted.__contains__, prefixes_of, ipv6
        )
        # From the switch's records (flow export): each connection direction's rate at the last poll.
        self._rates: dict[flows.FiveTuple, float] = {}
        self.last_poll_at: float | None = None

    # -- the lifecycle

    def knows(self, mac: str) -> bool:
        return mac in self.flows_of or mac in self.demoted or self.ahead.knows(mac)

    def forget(self, mac: str) -> None:
        self.flows_of.pop(mac, None)
        self.demoted.pop(mac, None)
        self.ahead.forget(mac)

    def switch_ready(self, switch: SwitchFacts) -> list[Effect]:
        """The switch holds nothing: the marks decided ahead, all of them."""
        marked = self.ahead.named.keys() | self.ahead.sockets.keys() | self.demoted.keys()
        return self.ahead.switch_ready([self._device_of(mac) for mac in sorted(marked)])

    def name_answered(self, device: Device, client_ip: str, address: str) -> list[Effect]:
        """The resolver told the device (asking from client_ip) an address for a name: if its names are
        an app's, the device's connections with it are marked now, before the first one is opened."""
        app = self.names.app_of(client_ip, address)
        return [] if app is None else self.ahead.name_answered(device, address, app)

    def rules_dropped(self, mac: str) -> None:
        """The device's rules left the switch: its learnt flows with them."""
        self.flows_of.pop(mac, None)

    def tick(self, now: float) -> Ticked:
        """Devices whose demotion ended: their High flows are High again."""
        effects: list[Effect] = []
        for mac in [m for m, until in self.demoted.items() if until <= now]:
            del self.demoted[mac]
            device = self._device_of(mac)
            effects += self.remark(device) + self.ahead.marks_of(device)
        return Ticked(effects=tuple(effects)) if effects else NOTHING_TICKED

    def decide(
        self,
        device: Device,
        flow: flows.FiveTuple,
        rates: apps.FlowRates | None = None,
        conn: flows.FiveTuple | None = None,
    ) -> FlowApp | None:
        """A connection direction of the device that the switch forwards without a rule of its own (seen in
        its records, or named by its agent): what it is, if its priority differs from the mark it has ahead
        (by name, by port), so that it needs a rule of its own (`ruled`); None if that mark is right.
        conn: the connection as the device sees it, if known. Per exported direction at every poll, under
        the lock: only an agent's report or a connection nothing names ahead is classified further."""
        if flow in self.flows_of.get(device.mac, ()):
            return None
        conn = conn or self._device_side(device, flow)
        process = self._process_of(device.mac, tuple(conn))
        ahead_app, ahead_source = apps.classify(self.app_table, conn, None, self.names.app_of(conn.saddr, conn.daddr))
        if process:
            app, source = self.app_table.app_of_process(process), apps.AGENT
        elif ahead_source != apps.UNKNOWN:
            return None  # the switch marks it as the router would have
        else:
            app, source = apps.classify(self.app_table, conn, None, None, rates)  # its behaviour, else "other"
        priority = self._priority(device, app)
        ahead = qos.DEFAULT if ahead_source == apps.UNKNOWN else self._priority(device, ahead_app)
        return None if priority == ahead else FlowApp(app, source, priority, rates.pps if rates else 0.0)

    def ruled(self, device: Device, flow: flows.FiveTuple, info: FlowApp) -> flows.FlowRule:
        """The connection direction has a rule of its own now, with its mark."""
        self.flows_of.setdefault(device.mac, {})[flow] = info
        return flows.learnt_flow_rule(device, flow, qos.mark_actions(info.priority))

    def decide_from_records(
        self, moved: dict[flows.FiveTuple, tuple], placed: dict, poll: AppPoll, may_rule
    ) -> list[Effect]:
        """The connections in the switch's records this poll that need a rule of their own: named by an
        agent, or judged by their rate (over this poll and the last), where that differs from their mark
        ahead. may_rule(mac, flow): whether the device may have one more (its flow budget)."""
        rules = []
        for flow, (pkts, nbytes) in moved.items():
            device, conn = placed[flow]
            if device is None or not device.forwards:
                continue
            poll.rates[flow] = pps = pkts / poll.interval
            rates = apps.FlowRates(pps, self._rates.get(flow, 0.0), nbytes / pkts if pkts else 0.0)
            info = self.decide(device, flow, rates, conn)
            if info is not None and may_rule(device.mac, flow):
                rules.append(self.ruled(device, flow, info))
                poll.ruled.add(flow)
        return [InstallRules(tuple(rules))] if rules else []

    # -- events

    def flow_ended(self, flow: flows.FiveTuple) -> None:
        for known in self.flows_of.values():
            known.pop(flow, None)

    def start_poll(self) -> AppPoll:
        """A poll of the accounting table begins: its parts follow (`poll_part`), then `finish_poll`."""
        now = self.clock()
        interval = now - self.last_poll_at if self.last_poll_at is not None else 0.0
        self.last_poll_at = now
        return AppPoll(interval)

    def poll_part(self, poll: AppPoll, rows: list[LogRow], may_rule) -> list[Effect]:
        """Some of a poll's Flows rows (the switch's records): summed per app and per device's High traffic,
        and a connection in them may get a rule of its own (`decide_from_records`) if may_rule(mac, flow)
        says the device's budget allows. Each flow is placed (whose, the connection as it sees it) once."""
        moved = {flows.FiveTuple(*r.row[:5]): r.row[5:] for r in rows if r.table == "Flows" and r.row[0]}
        placed = {flow: self._device_and_side(flow) for flow in moved}
        self._sum_apps(rows, placed, poll)
        if poll.interval <= 0:
            return []
        poll.moved.update(moved)
        self._sum_high(moved, placed, poll)  # by the marks before this part's own rules
        return self.decide_from_records(moved, placed, poll, may_rule)

    def finish_poll(self, poll: AppPoll) -> list[Effect]:
        """Every part is in: AppTimeseries rows, learnt flows judged by their rate, High over a device's share."""
        effects: list[Effect] = [*self._app_timeseries(poll)]
        if poll.interval > 0:
            effects += self._judge_behaviour(poll) + self._cap_high_per_device(poll)
            self._rates = poll.rates
        return effects

    def _sum_apps(self, flow_rows: list[LogRow], placed: dict, poll: AppPoll) -> None:
        """The rows' learnt-flow traffic summed per application; each connection classified once a poll,
        for both its directions. placed: whose each flow is, where known."""
        for r in flow_rows:
            proto, saddr, sport, daddr, dport, pkts, nbytes = r.row
            if proto:  # device totals (proto 0) are not attributable to an application
                flow = flows.FiveTuple(proto, saddr, sport, daddr, dport)
                totals = poll.per_app.setdefault(self._app_of(flow, poll.classified, placed), [0, 0])
                totals[0] += nbytes
                totals[1] += pkts

    @staticmethod
    def _app_timeseries(poll: AppPoll) -> list[LogRow]:
        return [LogRow("AppTimeseries", (app, b, p)) for app, (b, p) in sorted(poll.per_app.items())]

    def _device_and_side(self, flow: flows.FiveTuple) -> tuple[Device | None, flows.FiveTuple]:
        """The device a flow belongs to (the sender, else the receiver: what the accounting table does)
        and the connection as it sees it (its address first: both directions name it alike)."""
        sender = self._device_at(flow.saddr)
        if sender is not None:
            return sender, flow
        return self._device_at(flow.daddr), flows.FiveTuple(flow.proto, flow.daddr, flow.dport, flow.saddr, flow.sport)

    def _device_side(self, device: Device, flow: flows.FiveTuple) -> flows.FiveTuple:
        """The connection as the device sees it (its address first): both directions name it alike."""
        sender = self._device_at(flow.saddr)
        if sender is not None and sender.mac == device.mac:
            return flow
        return flows.FiveTuple(flow.proto, flow.daddr, flow.dport, flow.saddr, flow.sport)

    def _classify(
        self,
        device: Device,
        flow: flows.FiveTuple,
        rates: apps.FlowRates | None = None,
        conn: flows.FiveTuple | None = None,
    ) -> tuple[str, str]:
        """(app, source) of one of the device's flows; conn: the connection as the device sees it, if known."""
        conn = conn or self._device_side(device, flow)
        connection = (conn.proto, conn.saddr, conn.sport, conn.daddr, conn.dport)
        process = self._process_of(device.mac, connection)
        return apps.classify(self.app_table, conn, process, self.names.app_of(conn.saddr, conn.daddr), rates)

    def _owner_of(self, address: str) -> str:
        """Whose an address the resolver was asked from is (the device's MAC; an address no device has is
        its own owner), so that the name memory bounds a device, however many addresses it asks from."""
        device = self._device_at(address)
        return address if device is None else device.mac

    def _device_still_here(self, mac: str) -> Device | None:
        """The device, unless it was forgotten (between the parts of a poll, which other calls run between)."""
        try:
            return self._device_of(mac)
        except KeyError:
            return None

    def _household_priority(self, app: str) -> str:
        """The household's priority for the app, else the table's."""
        return self.chosen.get(app) or self.app_table.default_priority(app)

    def _priority(self, device: Device, app: str) -> str:
        """The household's priority for the app, else the table's; High only within the device's share."""
        priority = self._household_priority(app)
        if priority == qos.HIGH and device.mac in self.demoted:
            return qos.MEDIUM
        return priority

    def _mark_of(self, device: Device, flow: flows.FiveTuple, conn: flows.FiveTuple) -> str:
        """The priority the switch marks a connection direction of the device with: its own rule's, else
        the mark it has ahead (by name, by port)."""
        known = self.flows_of.get(device.mac, {}).get(flow)
        if known is not None:
            return known.priority
        app, source = apps.classify(self.app_table, conn, None, self.names.app_of(conn.saddr, conn.daddr))
        return qos.DEFAULT if source == apps.UNKNOWN else self._priority(device, app)  # nothing ahead: a miss

    def _app_of(self, flow: flows.FiveTuple, classified: dict[tuple, str], placed: dict) -> str:
        """A counted flow's app: its learnt one, else as classified (once per connection, in `classified`)."""
        device, conn = placed.get(flow) or self._device_and_side(flow)
        if device is None:
            return self.app_table.app_of_ports(flow) or apps.OTHER
        known = self.flows_of.get(device.mac, {}).get(flow)
        if known is not None:
            return known.app
        key = (device.mac, conn)
        if key not in classified:
            classified[key] = self._classify(device, flow, conn=conn)[0]
        return classified[key]

    def remark(self, device: Device, flows_of_device=None) -> list[Effect]:
        """Reclassify the device's learnt flows (or those given) and re-mark those whose priority changed.

        The switch keeps each rule's counters (OFPFC_MODIFY_STRICT), so accounting carries on."""
        known = self.flows_of.get(device.mac, {})
        changed = []
        for flow in list(flows_of_device if flows_of_device is not None else known):
            info = known.get(flow)
            if info is None:
                continue
            app, source = self._classify(device, flow)
            if not (source == apps.UNKNOWN and info.source == apps.BEHAVIOUR):  # that verdict waits for a poll
                info.app, info.source = app, source
            priority = self._priority(device, info.app)
            if priority != info.priority:
                info.priority = priority
                changed.append(flows.learnt_flow_rule(device, flow, qos.mark_actions(priority)))
        return [ModifyRules(tuple(changed))] if changed else []

    def set_priorities(self, priorities: dict[str, str]) -> list[Effect]:
        """The household set apps' priorities (hwdb AppPriority, already checked): re-mark their flows now."""
        changed = {app for app, priority in priorities.items() if self.chosen.get(app) != priority}
        ports_before = self.ahead.port_marks()
        self.chosen.update(priorities)
        if not changed:
            return []
        LOG.info("household: app priorities %s", {app: priorities[app] for app in sorted(changed)})
        effects = self.ahead.priorities_changed(changed, ports_before, self._device_of)
        for mac, known in self.flows_of.items():
            affected = [flow for flow, info in known.items() if info.app in changed]
            if affected:
                effects += self.remark(self._device_of(mac), affected)
        return effects

    def listed(self) -> list[dict]:
        """Every app the table or the household names, with the priority its flows get and who chose it."""
        names = set(self.app_table.priorities) | set(self.chosen)
        return [
            {
                "app": app,
                "priority": self.chosen.get(app) or self.app_table.default_priority(app),
                "set_by": "household" if app in self.chosen else "table",
            }
            for app in sorted(names)
        ]

    def learnt_connections(self) -> list[tuple[flows.FiveTuple, str]]:
        """Every learnt flow as its device sees it (its address first), with the priority its rule
        carries: what the household's ISP slice rules are made from (`downlink.py`), with what the slice
        marks ahead (`ahead.slice_ahead`)."""
        return [
            (self._device_side(self._device_of(mac), flow), info.priority)
            for mac, known in self.flows_of.items()
            for flow, info in known.items()
        ]

    def _judge_behaviour(self, poll: AppPoll) -> list[Effect]:
        """Learnt flows nothing else names are judged by their rate over the last two polls (those this poll
        gave a rule of their own were judged as it did)."""
        effects: list[Effect] = []
        for mac, known in self.flows_of.items():
            device = self._device_of(mac)
            changed = []
            for flow, info in known.items():
                if info.source not in (apps.UNKNOWN, apps.BEHAVIOUR) or flow in poll.ruled:
                    continue
                pkts, nbytes = poll.moved.get(flow, (0, 0))
                rates = apps.FlowRates(pkts / poll.interval, info.pps, nbytes / pkts if pkts else 0.0)
                info.pps = rates.pps
                app, source = self._classify(device, flow, rates)
                if (app, source) != (info.app, info.source):
                    info.app, info.source = app, source
                    changed.append(flow)
            if changed:
                effects += self.remark(device, changed)
        return effects

    def _sum_high(self, moved: dict[flows.FiveTuple, tuple], placed: dict, poll: AppPoll) -> None:
        """Each device's High-marked traffic (by its own rule's mark, else the mark ahead), up and down."""
        for flow, (_, nbytes) in moved.items():
            device, conn = placed[flow]
            if device is None or self._mark_of(device, flow, conn) != qos.HIGH:
                continue
            poll.high.setdefault(device.mac, [0, 0])[0 if conn is flow else 1] += nbytes

    def _cap_high_per_device(self, poll: AppPoll) -> list[Effect]:
        """A device whose High-marked traffic exceeded its share has its High flows demoted to Medium
        (those with rules of their own and those marked ahead)."""
        effects: list[Effect] = []
        for mac, (up, down) in poll.high.items():
            why = qos.over_device_share(self.qos, up, down, poll.interval)
            device = self._device_still_here(mac)
            if why is None or mac in self.demoted or device is None:  # None: forgotten while the poll was read
                continue
            self.demoted[mac] = self.clock() + self.qos.demotion_s
            effects += (
                self.remark(device)
                + self.ahead.marks_of(device)
                + [
                    TellHousehold(
                        "qos-overload",
                        mac,
                        f"{device.label} sent {why}: its high-priority traffic is medium for the next "
                        f"{int(self.qos.demotion_s)} seconds",
                    )
                ]
            )
        return effects
