"""The router's policy core: state in, effects out.

`HomeRouter` answers each event (a DHCP or ARP packet, a DNS query, a household
decision, the clock) with a list of effects for the I/O edge to carry out: rules
to install or remove, frames to send, gateway addresses to add, events to tell
the household. It never talks to a switch, a socket or the kernel itself, so unit
tests drive it directly.

It is a composition, as Faucet's `Valve`: its state lives in the concerns (one module
each: the device registry, the switch mirror, newcomers, accounting, app priorities,
agent reports, DNS gating, clone watching, port binding, passphrases, the portal, the
household's controls, IPv6), and the events that involve several of them are sequenced
by four parts, each given the concerns it needs: the reconciler (a device's rules from
every concern's word), joining (DHCP, ARP, the radio's joins), flow events (records,
counters, agents) and the household's decisions (ws.v1's changes).
"""

from __future__ import annotations

import ipaddress
import time
from collections.abc import Callable, Iterable

from .. import flows
from ..concerns import port_binding, portal
from ..concerns.accounting import Accounting, rule_counters
from ..concerns.agent_reports import AgentReportBook
from ..concerns.app_priorities import AppPriorities
from ..concerns.clone_watch import CloneWatch
from ..concerns.dns_gating import DnsGating, Lookups
from ..concerns.household_controls import HouseholdControls
from ..concerns.ipv6 import Ipv6, Ipv6Addresses, Ipv6Off
from ..concerns.lookalikes import Lookalikes
from ..concerns.newcomers import Newcomers
from ..concerns.passphrases import Passphrases
from ..concerns.registry import DeviceRegistry
from ..concerns.switch_mirror import SwitchMirror
from ..effects import AuthenticatorDeny, DnsVerdict, Effect, TellHousehold
from ..errors import UnknownDevice
from ..lifecycle import Concern, Moves, Reports, SwitchFacts, SwitchReady, Ticks
from ..model import Device, State
from ..policy import apps, dhcp, dns_rules, qos, wifi_keys
from ..store import DeviceStore
from ..wire.nd import RouterAdvert, Solicitation
from ..wire.prefixes import PrefixPlan, ula_prefix
from .decisions import HouseholdDecisions
from .flow_events import FlowEvents
from .joining import Joining
from .reconciler import Reconciler

# What the router counts of what it dropped, refused or suspected (ws.v1 `counters`, beside the edge's).
COUNTERS = (
    "dhcp_malformed",
    "dhcp_spoofed_chaddr",
    "dns_malformed",
    "frames_malformed",
    "store_errors",
    "dns_refused",
    "dns_not_a_device",
    "pending_evicted",
    "agent_reports_ignored",
    "mac_clone_suspected",
    "dns_portal",
)

# The IPv6 prefixes of a router core made without its own (tests, tools): IPv6 is on wherever the router
# ships, and a shipped router has its ULA /48 and the /56 its ISP delegated (documentation prefixes here).
# A running router's plan is made from its data partition (config.Config.ipv6_plan); None: IPv6 off (`Ipv6Off`).
EXAMPLE_IPV6_PLAN = PrefixPlan(ula_prefix(0x12_3456_789A), ipaddress.IPv6Network("2001:db8:100::/56"))


class HomeRouter:
    def __init__(
        self,
        store: DeviceStore,
        lease_policy: dhcp.LeasePolicy = dhcp.LeasePolicy(),
        clock: Callable[[], float] = time.time,
        flow_budget: int = 200,
        budget_cooldown_s: float = 120.0,
        max_pending: int = 256,
        app_table: apps.AppTable | None = None,
        qos_settings: qos.QosSettings = qos.QosSettings(),
        wifi_ssid: str = "",
        new_passphrase: Callable[[], str] = wifi_keys.new_passphrase,
        agent_reports: AgentReportBook | None = None,
        ipv6_plan: PrefixPlan | None = EXAMPLE_IPV6_PLAN,
    ):
        """The defaults are what a router runs as shipped (deploy/services.toml's command line: IPv6 on;
        test_shipped_config keeps them so)."""
        self.store = store
        self.clock = clock
        self.counters = dict.fromkeys(COUNTERS, 0)
        # IPv6 (a /64 per device), or its stand-in that does nothing when the router does not run it.
        self.ipv6: Ipv6 = Ipv6Addresses(ipv6_plan, clock, store) if ipv6_plan is not None else Ipv6Off()
        self.registry = DeviceRegistry(store, clock, self.counters, self.ipv6.owner_of)
        self.devices = self.registry.devices  # by MAC; changed only through the registry
        self.switch = SwitchMirror(ipv6=self.ipv6.enabled)
        self.newcomers = Newcomers(clock, max_pending, self.devices.get)
        self.accounting = Accounting(clock, flow_budget, budget_cooldown_s)
        self.agent_reports = agent_reports if agent_reports is not None else AgentReportBook()
        self.priorities = AppPriorities(
            clock,
            app_table if app_table is not None else apps.load_table(),
            qos_settings,
            device_at=self.registry.device_at,
            device_of=self.devices.__getitem__,
            process_of=self.agent_reports.process_of,
            prefixes_of=self.ipv6.current_prefixes,
            ipv6=self.ipv6.enabled,
        )
        self.dns_gating = DnsGating(
            store,
            clock,
            self.counters,
            Lookups(
                forwarding_at=lambda ip: self.registry.forwarding_at(ip) or self.registry.forwarding_at_v6(ip),
                answerable_at=self.registry.answerable_at,
                held=lambda mac: not self.controls.may_forward(mac),
                is_portal_probe=dns_rules.is_probe,
            ),
        )
        self.clone_watch = CloneWatch(store, clock, self.counters)
        self.port_binding = port_binding.PortBinding()
        self.portal = portal.Portal(portal.keyed_codes(portal.codes_key(store.load_settings(), store.save_setting)))
        self.passphrases = Passphrases(store, clock, self.counters, wifi_ssid, new_passphrase)
        self.controls = HouseholdControls(store, clock)  # pauses, bedtimes, allowances: may hold a device
        # Forgetting a device reaches every concern: each owns its memory of it.
        self.concerns: tuple[Concern, ...] = (
            self.registry,
            self.switch,
            self.newcomers,
            self.accounting,
            self.priorities,
            self.agent_reports,
            self.dns_gating,
            self.clone_watch,
            self.port_binding,
            self.passphrases,
            self.portal,
            self.controls,
            self.ipv6,
        )
        # What the household said of a device follows it to a new MAC; the rest was of the old MAC.
        self.follow_the_device: tuple[Moves, ...] = (self.registry, self.dns_gating, self.passphrases, self.controls)
        # The phases that span every device, each over the concerns that take part, in this order. A switch
        # that (re)connected gets the newcomers' meter and the base rules before any rule that names them
        # (the switch mirror's before IPv6's, app priorities' marks last); the devices' rules follow.
        self.on_switch_ready: tuple[SwitchReady, ...] = (
            self.port_binding,
            self.switch,
            self.ipv6,
            self.dns_gating,
            self.priorities,
        )
        # The clock: leases that ran out end (and their port bindings) and demotions end before any rules are
        # redone; the household's controls move their holds before the switch mirror has every device with
        # rules reconciled, which applies them; IPv6's expired routes and DNS gating's stale blocks are
        # reinstalled after that. A concern's devices are redone before its effects (IPv6's adverts tell the
        # other devices of routes gone once the offering device's rules are without them).
        self.ticking: tuple[Ticks, ...] = (
            self.registry,
            self.priorities,
            self.controls,
            self.switch,
            self.ipv6,
            self.dns_gating,
        )
        # A device's status: each concern's fields, in this order (ws.v1 `status`'s keys).
        self.reporting: tuple[Reports, ...] = (
            self.registry,
            self.clone_watch,
            self.passphrases,
            self.portal,
            self.port_binding,
            self.controls,
        )

        # The events that involve several concerns, each sequenced by one part given the concerns it needs.
        # ws.v1, the I/O edge and the tests call a part's methods on it: `router.decisions.permit(mac)`.
        self.reconciler = Reconciler(
            clock=clock,
            registry=self.registry,
            switch=self.switch,
            controls=self.controls,
            port_binding=self.port_binding,
            accounting=self.accounting,
            dns_gating=self.dns_gating,
            priorities=self.priorities,
            ipv6=self.ipv6,
            concerns=self.concerns,
        )
        self.joining = Joining(
            clock=clock,
            counters=self.counters,
            lease_policy=lease_policy,
            reconciler=self.reconciler,
            registry=self.registry,
            switch=self.switch,
            newcomers=self.newcomers,
            clone_watch=self.clone_watch,
            port_binding=self.port_binding,
            passphrases=self.passphrases,
            concerns=self.concerns,
            follow_the_device=self.follow_the_device,
        )
        self.flow_events = FlowEvents(
            counters=self.counters,
            reconciler=self.reconciler,
            registry=self.registry,
            accounting=self.accounting,
            priorities=self.priorities,
            agent_reports=self.agent_reports,
            controls=self.controls,
        )
        self.decisions = HouseholdDecisions(
            clock=clock,
            reconciler=self.reconciler,
            registry=self.registry,
            clone_watch=self.clone_watch,
            port_binding=self.port_binding,
            controls=self.controls,
            dns_gating=self.dns_gating,
            passphrases=self.passphrases,
        )

    # -- switch lifecycle

    def switch_ready(
        self, access_ports: int | tuple[int, ...], router_mac: str, without_link: frozenset[int] = frozenset()
    ) -> list[Effect]:
        """The switch (re)connected: it has no rules; give it the whole rule set. access_ports: where
        devices are (one port: the radio's); without_link: those of them whose link is down."""
        access_ports = (access_ports,) if isinstance(access_ports, int) else access_ports
        switch = SwitchFacts(access_ports, router_mac, frozenset(without_link))
        effects: list[Effect] = []
        for concern in self.on_switch_ready:
            effects += concern.switch_ready(switch)
        effects += self.reconciler.reconcile_each(self.devices.values())
        effects += [AuthenticatorDeny(d.mac, True) for d in self.devices.values() if d.state is State.BLACKLISTED]
        return effects

    # -- a device coming onto the network: DHCP, ARP and the radio's joins are `self.joining`'s

    def access_port_link(self, port: int, up: bool) -> list[Effect]:
        """An access port's link went up or down (a device on a port without link may move elsewhere)."""
        self.port_binding.link(port, up)
        return []

    # -- IPv6

    def on_solicitation(self, in_port, solicitation: Solicitation) -> list[Effect]:
        """IPv6 neighbour discovery (parsed off the lock): a device's router or neighbour solicitation, or
        the router's stack looking for an address in a device's /64 (in_port LOCAL)."""
        device = None if in_port == flows.LOCAL else self.devices.get(solicitation.eth_src)
        return self.ipv6.answer(in_port, solicitation, device)

    def on_router_advert(self, advert: RouterAdvert) -> list[Effect]:
        """A forwarding device's own router advert (parsed off the lock; the switch passes only those from
        its MAC on its own port): the routes it offers (a Thread border router's mesh, `border_routes`).
        When they change, its rules follow (reinstalled under its cookie) and the other devices hear of
        them in their next adverts, sent now."""
        device = self.devices.get(advert.eth_src)
        if device is None:
            return []
        change = self.ipv6.offered_routes(device.mac, advert, self.clock())
        effects: list[Effect] = [TellHousehold("route", device.mac, message) for message in change.told]
        if change.routes_changed:
            effects += self.reconciler.reconcile(device, reinstall=True)
            effects += self.ipv6.readvertise(self.clock())
        return effects

    def give_route(self, mac: str, prefix: str) -> list[Effect]:
        """The household gives a route's prefix (a Thread mesh's) a new owner, the device at `mac`: another
        device that offered it is refused from now on, and loses it if it holds it now (`border_routes`)."""
        device = self.decisions.known(mac)
        effects: list[Effect] = []
        effects += self.reconciler.reconcile_each(
            (self.devices[other] for other in sorted(self.ipv6.give_route(prefix, device.mac))), reinstall=True
        )
        told = f"{device.label} owns the route to {prefix.strip()} now: the household gave it"
        return [*effects, *self.ipv6.readvertise(self.clock()), TellHousehold("route", device.mac, told)]

    def renumber(self, delegated, until: tuple[float, float] | None = None) -> list[Effect]:
        """The ISP delegated another prefix (or none): each forwarding device's rules and advert are redone
        for its new /64s, its old global /64 advertised deprecated (ipv6.Ipv6Addresses.renumber). until: when
        the delegation stops being preferred and valid, which the adverts' lifetimes do not go beyond."""
        renumbered = [self.devices[mac] for mac in self.ipv6.renumber(delegated, self.clock(), until)]
        effects = self.reconciler.reconcile_each(renumbered, reinstall=True)
        for device in renumbered:
            if self.priorities.ahead.has_marks(device.mac):
                effects += self.priorities.ahead.marks_of(device)  # its IPv6 marks name its /64s
        return effects

    # -- connections: accounting and application priorities (records, counters, agents: `self.flow_events`)

    def on_flow_stats(self, entries: list[tuple[int, dict, int, int]]) -> list[Effect]:
        """The accounting table's counters, (priority, match, packets, bytes) per rule: what each rule forwarded
        counts against its device's allowance. The edge keys them before it takes the lock and calls
        `on_flow_counters`."""
        return self.flow_events.on_flow_counters(rule_counters(entries))

    def set_app_priorities(self, priorities: dict[str, str]) -> list[Effect]:
        """The household set apps' priorities (hwdb AppPriority, already checked): re-mark their flows now."""
        return self.priorities.set_priorities(priorities)

    def app_priorities(self) -> list[dict]:
        """Every app the table or the household names, with the priority its flows get and who chose it."""
        return self.priorities.listed()

    def learnt_connections(self) -> list[tuple[flows.FiveTuple, str]]:
        return self.priorities.learnt_connections()

    # -- DNS gating

    def dns_query(self, client_ip: str, query: dns_rules.Query | None) -> DnsVerdict:
        """A query that reached the router's resolver from client_ip, parsed (None: it was malformed)."""
        return self.dns_gating.query(client_ip, query)

    def dns_answer(self, learnt, client_ip: str | None = None) -> list[Effect]:
        """What an upstream answer taught ((name, address, ttl) each, read outside the lock by
        `dns_rules.inspect_answer`): block new addresses of blocked names at once, and mark the asking
        device's connections with an app's addresses. client_ip: the device that asked (None: the
        router's own lookup), whose connections the names will name.
        """
        effects: list[Effect] = []
        if client_ip is not None:
            asking = self.registry.device_at(client_ip)
            for name, ip, _ in learnt:
                self.priorities.names.learn(client_ip, name, ip)
                if asking is not None and asking.forwards:  # its connections with ip are marked before they open
                    effects += self.priorities.name_answered(asking, client_ip, ip)
        for mac, ips in self.dns_gating.learn(learnt).items():
            effects += self.reconciler.install_blocks(self.devices.get(mac), ips)
        return effects

    def portal_of(self, ip: str) -> dict:
        """What the captive portal tells the device at this address about itself (`portal.view`). The
        web UI asks with the address a request came from (the switch lets a device send only from its
        own), never with one the device names."""
        device = self.registry.by_ip(ip)
        if device is None:
            raise UnknownDevice(f"no device has the address {ip!r}")
        return portal.view(self._status_of(device))

    # -- the household's decisions: `self.decisions` (and the household's time: `self.controls`)

    def shared_allowances(self, name: str | None = None) -> list[dict] | dict:
        """Every shared allowance (or one) with its standing today and the devices sharing it."""
        return self.controls.shared_allowances() if name is None else self.controls.shared_allowance(name)

    # -- the clock

    def tick(self) -> list[Effect]:
        """Leases that ran out, demotions and pauses that ended, DNS-learnt addresses that expired."""
        now = self.clock()
        effects: list[Effect] = []
        for concern in self.ticking:
            ticked = concern.tick(now)
            for mac in ticked.leases_ended:
                self.port_binding.lease_ended(mac)
            for macs, reinstall in ((ticked.reconcile, False), (ticked.reinstall, True)):
                effects += self.reconciler.reconcile_each(
                    (self.devices[m] for m in macs if m in self.devices), reinstall
                )
            effects += ticked.effects
        return effects

    # -- queries

    def status(self, mac: str | None = None):
        if mac is not None:
            [status] = self._statuses([self.decisions.known(mac)])
            return status
        return self.statuses(sorted(self.devices))

    def statuses(self, macs: Iterable[str]) -> list[dict]:
        """The status of each device at `macs` that the router knows (ws.v1 `status` of every device is assembled
        a few devices per hold of the lock: `Ws1Service.call`)."""
        return self._statuses([self.devices[mac] for mac in macs if mac in self.devices])

    def _statuses(self, devices: list[Device]) -> list[dict]:
        # Only a newcomer may look like another device: a decided one's status (every decision's answer)
        # does not walk every device for it.
        lookalikes = (
            Lookalikes(self.devices.values(), self.clock(), self.clone_watch.fingerprint_of, self.passphrases.has_own)
            if any(d.state is State.PENDING for d in devices)
            else None
        )
        return [self._status_of(d, lookalikes) for d in devices]

    def _status_of(self, device: Device, lookalikes: Lookalikes | None = None) -> dict:
        status = {
            **device.to_json(self.clock()),
            **(lookalikes.status_of(device) if lookalikes is not None else {"looks_like": None, "resembles": None}),
        }
        for concern in self.reporting:
            status |= concern.status_of(device.mac)
        return status

    def dhcp_status(self) -> list[dict]:
        return self.registry.leases_status()

    def blacklist_status(self) -> list[str]:
        return self.registry.blacklisted()
