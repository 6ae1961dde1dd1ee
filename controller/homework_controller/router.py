"""The router's policy core: state in, effects out.

`HomeRouter` answers each event (a DHCP or ARP packet, a DNS query, a household
decision, the clock) with a list of effects for the I/O edge to carry out: rules
to install or remove, frames to send, gateway addresses to add, events to tell
the household. It never talks to a switch, a socket or the kernel itself, so unit
tests drive it directly. Its state lives in the concerns it composes (one module
each: the device registry, the switch mirror, newcomers, accounting, app
priorities, agent reports, DNS gating, clone watching, passphrases, the household's
controls); it sequences
the events that involve several of them.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

from . import apps, clones, dhcp, dhcp_wire, dnsgate, flows, packets, port_binding, portal, qos, wifi_keys
from .accounting import Accounting
from .agent_reports import AgentReport, AgentReportBook
from .app_priorities import AppPriorities
from .clone_watch import CloneWatch
from .dns_gating import DnsGating, Lookups
from .effects import (
    AuthenticatorDeny,
    AuthenticatorKick,
    DnsVerdict,
    InstallRules,
    PublishWifiKeys,
    ResolveName,
    SendFrame,
    TellHousehold,
)
from .errors import ApiError, DeviceBlocked, UnknownDevice
from .household_controls import HouseholdControls
from .ipv6 import Ipv6Addresses, PrefixPlan
from .lifecycle import Concern, Moves
from .model import Device, State, normalize_mac
from .nd import Solicitation
from .newcomers import Newcomers
from .passphrases import Passphrases
from .registry import DeviceRegistry
from .store import DeviceStore
from .switch_mirror import SwitchMirror

LOG = logging.getLogger(__name__)


# ---- the core --------------------------------------------------------------


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
        ipv6_plan: PrefixPlan | None = None,
        flows_from_export: bool = False,
    ):
        self.store = store
        self.lease_policy = lease_policy
        self.clock = clock
        self.counters = {
            "dhcp_malformed": 0,
            "dhcp_spoofed_chaddr": 0,
            "dns_malformed": 0,
            "frames_malformed": 0,
            "store_errors": 0,
            "dns_refused": 0,
            "dns_not_a_device": 0,
            "pending_evicted": 0,
            "agent_reports_ignored": 0,
            "mac_clone_suspected": 0,
            "dns_portal": 0,
        }
        # IPv6 (a /64 per device), when the router runs it.
        self.ipv6 = Ipv6Addresses(ipv6_plan, clock) if ipv6_plan is not None else None
        self.registry = DeviceRegistry(store, clock, self.counters, self.ipv6.owner_of if self.ipv6 else None)
        self.devices = self.registry.devices  # by MAC; changed only through the registry
        self.switch = SwitchMirror()
        self.newcomers = Newcomers(clock, max_pending)
        self.accounting = Accounting(clock, flow_budget, budget_cooldown_s, from_export=flows_from_export)
        self.agent_reports = agent_reports if agent_reports is not None else AgentReportBook()
        self.priorities = AppPriorities(
            clock,
            app_table if app_table is not None else apps.load_table(),
            qos_settings,
            device_at=self.registry.device_at,
            device_of=self.devices.__getitem__,
            process_of=self.agent_reports.process_of,
        )
        self.dns_gating = DnsGating(
            store,
            clock,
            self.counters,
            Lookups(
                forwarding_at=lambda ip: self.registry.forwarding_at(ip) or self.registry.forwarding_at_v6(ip),
                answerable_at=self.registry.answerable_at,
                held=lambda mac: not self.controls.may_forward(mac),
                is_portal_probe=portal.is_probe,
            ),
        )
        self.clone_watch = CloneWatch(clock, self.counters)
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
        )
        if self.ipv6 is not None:
            self.concerns += (self.ipv6,)
        # What the household said of a device follows it to a new MAC; the rest was of the old MAC.
        self.follow_the_device: tuple[Moves, ...] = (self.registry, self.dns_gating, self.passphrases, self.controls)

    # -- switch lifecycle

    def switch_ready(
        self, access_ports: int | tuple[int, ...], router_mac: str, without_link: frozenset[int] = frozenset()
    ) -> list:
        """The switch (re)connected: it has no rules; give it the whole rule set. access_ports: where
        devices are (one port: the radio's); without_link: those of them whose link is down."""
        access_ports = (access_ports,) if isinstance(access_ports, int) else access_ports
        self.port_binding.switch_ready(access_ports, set(without_link))
        effects = self.switch.switch_ready(access_ports, router_mac)
        if self.ipv6 is not None:
            effects += self.ipv6.switch_ready(access_ports, router_mac)
        self.dns_gating.switch_ready()
        for device in self.devices.values():
            effects += self._reconcile(device)
        effects += [AuthenticatorDeny(d.mac, True) for d in self.devices.values() if d.state is State.BLACKLISTED]
        return effects

    # -- packets

    def on_dhcp(self, frame: packets.Frame) -> list:
        try:
            req = dhcp_wire.decode_request(frame.payload)
        except dhcp_wire.MalformedDhcp as exc:
            self.counters["dhcp_malformed"] += 1
            LOG.info("dropped malformed DHCP from %s: %s", frame.eth_src, exc)
            return []
        if req.chaddr != frame.eth_src:
            # A device asking on behalf of another MAC would take over that device's lease.
            self.counters["dhcp_spoofed_chaddr"] += 1
            LOG.warning("dropped DHCP %s from %s claiming to be %s", req.name, frame.eth_src, req.chaddr)
            return []
        now = self.clock()
        before = self.devices.get(req.chaddr)
        effects: list = []
        port = flows.port_of_mark(frame.eth_dst)  # the access port it asked on (None: the switch did not say)
        if port is not None and before is not None:
            rebound, moves = self._saw_on_port(before, port, now)
            if rebound is None:
                return moves  # its MAC on another port than its own: not served there
            effects += moves
        if before is None and req.msg_type == dhcp_wire.DISCOVER:
            effects += self._make_room_for_a_newcomer()
        outcome = dhcp.serve(req, before, now, self.lease_policy, self.registry.allocate_subnet)
        LOG.debug("DHCP %s from %s (%s): %s", req.name, req.chaddr, req.hostname or "-", outcome.log)
        effects += self.clone_watch.served(req, before, outcome, now)
        if port is not None and before is None and outcome.device is not None:
            self.port_binding.saw(req.chaddr, port)  # a newcomer: the port it first asks on is its own
        if outcome.device is not None and outcome.device != before:
            effects += self._update(outcome.device)
        for kind, msg in outcome.events:
            effects += (
                self.newcomers.announce(req.chaddr, msg)
                if kind == "new-device"
                else [TellHousehold(kind, req.chaddr, msg)]
            )
        if outcome.lease_action and outcome.device is not None:
            effects.append(self.registry.record_lease(outcome.device, outcome.lease_action))
            effects += self.newcomers.took_lease(req.chaddr)
        answer = dhcp.answer(outcome, self.switch.ports()[1]) if outcome.reply is not None else None
        if answer is not None:
            if answer.after_rules:
                effects.append(answer)
            else:
                effects.insert(0, answer)
        return effects

    def _suspect_clone(self, mac: str, differs: list[str]) -> list:
        device = self.devices.get(mac)
        return self.clone_watch.suspect(mac, differs, device.label if device else mac)

    def station_joined(self, mac: str, keyid: str) -> list:
        """hostapd: a station joined the radio with the passphrase `keyid` (AP-STA-CONNECTED)."""
        mac = normalize_mac(mac)
        owner = self.passphrases.device_with(keyid)
        if owner == mac:
            return []  # the device, with its own passphrase
        device = self.devices.get(owner) if owner is not None else None
        if device is not None:
            there = self.devices.get(mac)
            if there is None or there.state is State.PENDING:
                return self._moved(device, mac)
            # Another decided device's address with this device's passphrase: neither device.
            return [AuthenticatorKick(mac), *self._suspect_clone(mac, [f"joined with {device.label}'s passphrase"])]
        differs = clones.wrong_key(self.passphrases.keyid_of(mac), keyid)
        if not differs:
            return []
        # Not the device, whose passphrase is its own: off the air, and the household told.
        return [AuthenticatorKick(mac), *self._suspect_clone(mac, differs)]

    def _moved(self, device: Device, new_mac: str) -> list:
        """The device joined with its own passphrase under `new_mac` (a phone's private address): it is
        that device, so its record, decisions, name, rules, passphrase and controls follow it (a newcomer
        it was taken for under the new MAC goes); the old MAC's rules leave the switch."""
        old_mac = device.mac
        LOG.info("%s is back as %s (its own passphrase)", old_mac, new_mac)
        effects: list = []
        newcomer = self.devices.get(new_mac)
        if newcomer is not None:
            effects += self._forget(newcomer)
        if device.lease_active(self.clock()):
            effects.append(self.registry.record_lease(device, "released"))
        effects += self.switch.evict(device)
        effects += self.switch.set_forwarding(old_mac, False, None, self.devices.__getitem__)
        for concern in self.concerns:
            if concern not in self.follow_the_device:
                concern.forget(old_mac)
        for follower in self.follow_the_device:
            follower.move(old_mac, new_mac)
        if device.state is State.BLACKLISTED:
            effects += [AuthenticatorDeny(old_mac, False), AuthenticatorDeny(new_mac, True)]
        message = (
            f"{device.label} joined with its own passphrase from a new address, {new_mac}: it is still {device.label}"
        )
        return [
            *effects,
            PublishWifiKeys(),  # its key id names its new MAC
            TellHousehold("new-address", new_mac, message),
            *self._reconcile(self.devices[new_mac]),
        ]

    def on_admission_copy(self, in_port, frame: packets.Frame) -> list:
        """A frame the admission table sent the controller: a device's ARP, or a bound device's MAC on
        another access port (flows' ELSEWHERE)."""
        device = self.devices.get(frame.eth_src)
        effects: list = []
        if in_port != flows.LOCAL and device is not None:
            rebound, effects = self._saw_on_port(device, in_port, self.clock())
            if rebound is None:
                return effects
            # Moved here: its rules follow; what it sent (DHCP, say) is not served now, its retry is.
        return effects + (self.on_arp(in_port, frame) if frame.arp is not None else [])

    def _saw_on_port(self, device: Device, port: int, now: float) -> tuple[bool | None, list]:
        """A known device's frame came in on access port `port`: whether that bound it to a new port
        (None: not its port, and not a move: counted as a copied MAC, its frame is not served), and the
        effects (its rules on its new port; the household told of a copy)."""
        seen = self.port_binding.saw(device.mac, port, leased=device.lease_active(now))
        if seen == port_binding.OWN:
            return False, []
        if seen == port_binding.ELSEWHERE:
            return None, self._suspect_clone(device.mac, [self.port_binding.elsewhere(device.mac, port)])
        if seen == port_binding.MOVED:
            LOG.info("%s moved to access port %d (its own had no link)", device.mac, port)
        return True, self._reconcile(device)

    def access_port_link(self, port: int, up: bool) -> list:
        """An access port's link went up or down (a device on a port without link may move elsewhere)."""
        self.port_binding.link(port, up)
        return []

    def on_arp(self, in_port, frame: packets.Frame) -> list:
        """Proxy ARP: the router answers for gateways (to devices) and for devices (to its own stack)."""
        req = frame.arp
        if req is None or req.opcode != packets.ARP_REQUEST:  # replies and gratuitous ARP get no answer
            return []
        if in_port == flows.LOCAL:
            target = self.registry.arp_answered_for(req.dst_ip)
            if target:
                return [SendFrame(flows.LOCAL, packets.arp_reply(target.mac, req.dst_ip, req.src_mac, req.src_ip))]
            return []
        if not self.registry.asks_for_its_gateway(frame.eth_src, req.src_mac, req.src_ip, req.dst_ip):
            return []
        router_mac = self.switch.ports()[1]
        return [SendFrame(in_port, packets.arp_reply(router_mac, req.dst_ip, req.src_mac, req.src_ip))]

    def on_solicitation(self, in_port, solicitation: Solicitation) -> list:
        """IPv6 neighbour discovery (parsed off the lock): a device's router or neighbour solicitation, or
        the router's stack looking for an address in a device's /64 (in_port LOCAL)."""
        if self.ipv6 is None:
            return []
        device = None if in_port == flows.LOCAL else self.devices.get(solicitation.eth_src)
        return self.ipv6.answer(in_port, solicitation, device)

    def renumber(self, delegated) -> list:
        """The ISP delegated another prefix (or none): each forwarding device's rules and advert are redone
        for its new /64s, its old global /64 advertised deprecated (ipv6.Ipv6Addresses.renumber)."""
        if self.ipv6 is None:
            return []
        effects: list = []
        for mac in self.ipv6.renumber(delegated, self.clock()):
            effects += self._reconcile(self.devices[mac], reinstall=True)
        return effects

    def on_flow_copy(self, in_port, frame: packets.Frame) -> list:
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
            return self._reconcile(device) + [self.accounting.over_budget(device.mac, device.label)]
        priority = self.priorities.learn_flow(device, flow)
        return [InstallRules((flows.learnt_flow_rule(device, flow, qos.mark_actions(priority)),))]

    def on_flow_stats(self, entries: list[tuple[int, dict, int, int]]) -> list:
        """Counters of the accounting table -> Flows rows with what each flow did since last time.

        entries: (priority, match, packets, bytes) per rule. A learnt flow is its 5-tuple: what
        its rule counted plus what the controller saw of it before the rule was in place. A
        device's learning rule (traffic not counted per flow) is a row with protocol 0 and the
        far side 0.0.0.0.
        """
        rows = self.accounting.read_counters(entries)
        return rows + self.priorities.poll(rows) + self._count_usage(self.accounting.usage(entries))

    def on_flow_export(self, totals: dict[flows.FiveTuple, list[int]]) -> None:
        """The switch's own records of what it forwarded, summed per connection direction (off the
        lock): those of the router's devices are counted in the next poll's Flows rows."""
        for flow, (pkts, nbytes) in totals.items():
            if (device := self.registry.device_at(flow.saddr)) is not None:
                self.accounting.exported(device.mac, flow, True, pkts, nbytes)
            elif (device := self.registry.device_at(flow.daddr)) is not None:
                self.accounting.exported(device.mac, flow, False, pkts, nbytes)

    def on_flow_removed(self, priority: int, match: dict, pkts: int, nbytes: int) -> list:
        """A learnt flow idled out (or was deleted): count what it saw since the last poll."""
        flow, rows = self.accounting.flow_removed(priority, match, pkts, nbytes)
        if flow is not None:
            self.priorities.flow_ended(flow)
        used = self.accounting.usage_at_removal(priority, match, pkts, nbytes)
        return rows + self.priorities.app_rows(rows) + self._count_usage(used)

    # -- application priorities

    def set_app_priorities(self, priorities: dict[str, str]) -> list:
        """The household set apps' priorities (hwdb AppPriority, already checked): re-mark their flows now."""
        return self.priorities.set_priorities(priorities)

    def app_priorities(self) -> list[dict]:
        """Every app the table or the household names, with the priority its flows get and who chose it."""
        return self.priorities.listed()

    def learnt_connections(self) -> list[tuple[flows.FiveTuple, str]]:
        return self.priorities.learnt_connections()

    def agent_reported(self, reports: list[AgentReport]) -> list:
        """End-host agents said which program owns connections (each of its own device's:
        `AgentReportBook.record_all`): the flows of the devices spoken for are marked again."""
        devices, ignored = self.agent_reports.record_all(reports, self.registry.forwarding_at)
        self.counters["agent_reports_ignored"] += ignored
        effects: list = []
        for device in devices:
            effects += self.priorities.remark(device)
        return effects

    # -- DNS gating

    def dns_query(self, client_ip: str, query: dnsgate.Query | None) -> DnsVerdict:
        """A query that reached the router's resolver from client_ip, parsed (None: it was malformed)."""
        return self.dns_gating.query(client_ip, query)

    def portal_of(self, ip: str) -> dict:
        """What the captive portal tells the device at this address about itself (`portal.view`). The
        web UI asks with the address a request came from (the switch lets a device send only from its
        own), never with one the device names."""
        device = self.registry.by_ip(ip)
        if device is None:
            raise UnknownDevice(f"no device has the address {ip!r}")
        return portal.view(self._status_of(device))

    def dns_answer(self, learnt, client_ip: str | None = None) -> list:
        """What an upstream answer taught ((name, address, ttl) each, read outside the lock by
        `dnsgate.inspect_answer`): block new addresses of blocked names at once. client_ip: the
        device that asked (None: the router's own lookup), whose connections the names will name.
        """
        if client_ip is not None:
            for name, ip, _ in learnt:
                self.priorities.names.learn(client_ip, name, ip)
        effects: list = []
        for mac, ips in self.dns_gating.learn(learnt).items():
            effects += self._install_blocks(self.devices.get(mac), ips)
        return effects

    def deny_dns(self, mac: str, domain: str) -> list:
        return self._set_dns_rule(mac, domain, dnsgate.DENY)

    def permit_dns(self, mac: str, domain: str) -> list:
        return self._set_dns_rule(mac, domain, dnsgate.ALLOW)

    def dns_rules_of(self, mac: str) -> list[dict]:
        return self.dns_gating.rules_of(self._known(mac).mac)

    def _set_dns_rule(self, mac: str, domain: str, action: str) -> list:
        device = self._known(mac)
        domain, new = self.dns_gating.set_rule(device.mac, domain, action)
        lifted = self.dns_gating.recompute(device.mac)
        effects = self._reconcile(device, reinstall=lifted) + self._install_blocks(device)
        if new == dnsgate.DENY:
            effects.append(ResolveName(domain))  # learn its addresses now, not when someone asks
        return effects

    def _install_blocks(self, device: Device | None, ips=None) -> list:
        """Drop rules from the device to those of ips (default: all its blocked addresses) the switch
        does not hold yet, if it forwards."""
        if device is None or not self.switch.holds_rules_of(device.mac) or not self.registry.forwarding_now(device):
            return []
        prefixes = self.ipv6.current.get(device.mac, ()) if self.ipv6 is not None else ()
        rules = self.dns_gating.block_rules(device, ips, prefixes)
        return [InstallRules(tuple(rules))] if rules else []

    # -- the household's decisions

    def _known(self, mac: str) -> Device:
        mac = normalize_mac(mac)
        device = self.devices.get(mac)
        if device is None:
            raise UnknownDevice(f"no device {mac} has asked to join")
        return device

    def permit(self, mac: str) -> list:
        return self._decide(self._not_blocked(self._known(mac)), State.PERMITTED)

    def deny(self, mac: str) -> list:
        return self._decide(self._not_blocked(self._known(mac)), State.DENIED)

    @staticmethod
    def _not_blocked(device: Device) -> Device:
        """Permit and deny leave a blacklisted device as it is: the wall panel may do both, but only
        the owner lifts a block, with `whitelist`; deciding it here means no caller can skip it."""
        if device.state is State.BLACKLISTED:
            raise DeviceBlocked(
                f"{device.mac} is blocked; the owner must lift the block (whitelist) before it is permitted or denied"
            )
        return device

    def whitelist(self, mac: str) -> list:
        """Admit a device, seen or not yet, without asking; lifts a blacklisting."""
        mac = normalize_mac(mac)
        device = self.devices.get(mac) or Device(mac=mac, first_seen=self.clock())
        return self._decide(device, State.PERMITTED)

    def blacklist(self, mac: str) -> list:
        mac = normalize_mac(mac)
        device = self.devices.get(mac) or Device(mac=mac, first_seen=self.clock())
        return self._decide(device, State.BLACKLISTED)

    def rename(self, mac: str, name: str) -> list:
        """What the household calls the device ("Grandma's iPad"); empty clears it."""
        device = self._known(mac)
        name = "".join(ch for ch in name if ch.isprintable()).strip()
        if len(name) > 64:
            raise ApiError("a device name has at most 64 characters")
        return self._update(device.with_(name=name))

    def pause(self, mac: str) -> list:
        return self._change(mac, self.controls.pause)

    def pause_for(self, mac: str, duration: str) -> list:
        return self._change(mac, self.controls.pause_for, duration)

    def resume(self, mac: str) -> list:
        return self._change(mac, self.controls.resume)

    def set_schedule(self, mac: str, text: str) -> list:
        return self._change(mac, self.controls.set_schedule, text)

    def set_allowance(self, mac: str, amount: str) -> list:
        return self._change(mac, self.controls.set_allowance, amount)

    def grant_bonus(self, mac: str, amount: str) -> list:
        return self._change(mac, self.controls.grant_bonus, amount)

    def household_time(self) -> dict:
        return self.controls.household_time()

    def set_time_zone(self, name: str) -> dict:
        return self.controls.set_time_zone(name)

    def set_reset_time(self, at: str) -> dict:
        return self.controls.set_reset_time(at)

    def _change(self, mac: str, change: Callable[..., None], *args: str) -> list:
        """A household's change to one device's controls (a pause, a schedule, an allowance), then its rules."""
        device = self._known(mac)
        change(device.mac, *args)
        return self._reconcile(device)

    def _decide(self, device: Device, state: State) -> list:
        LOG.info("household: %s %s -> %s", device.mac, device.state.value, state.value)
        self.clone_watch.household_decided(device.mac)
        self.port_binding.household_decided(device.mac)  # where it was last seen is its own port now
        effects = self._update(device.with_(state=state))
        if (device.state is State.BLACKLISTED) != (state is State.BLACKLISTED):
            effects.append(AuthenticatorDeny(device.mac, state is State.BLACKLISTED))
        return effects

    # -- devices' own Wi-Fi passphrases

    def issue_wifi_key(self, mac: str) -> dict:
        """A new passphrase of the device's own (replacing one it had); the answer carries it and its QR code."""
        return self.passphrases.issue(self._known(mac))

    def revoke_wifi_key(self, mac: str) -> dict:
        """The device joins with the shared passphrase again (from its next association)."""
        return self.passphrases.revoke(normalize_mac(mac))

    def wifi_key_of(self, mac: str) -> dict:
        return self.passphrases.key_of(normalize_mac(mac))

    # -- the clock

    def tick(self) -> list:
        """Leases that ran out, flow budgets that cooled down, DNS-learnt addresses that expired."""
        now = self.clock()
        effects = []
        for device in self.registry.tick(now):
            self.port_binding.lease_ended(device.mac)
            effects.append(self.registry.record_lease(device, "expired"))
        self.accounting.tick(now)
        effects += self.priorities.tick(now)
        self.controls.tick(now)  # bedtimes that began or ended, pauses that ran out: the loop below applies them
        for mac in self.switch.devices_with_rules():
            effects += self._reconcile(self.devices[mac])
        if self.ipv6 is not None:
            effects += self.ipv6.tick(now)
        for mac in self.dns_gating.tick(now):
            if mac in self.devices:
                effects += self._reconcile(self.devices[mac], reinstall=True)
        return effects

    # -- queries

    def status(self, mac: str | None = None):
        if mac is not None:
            return self._status_of(self._known(mac))
        return [self._status_of(d) for d in sorted(self.devices.values(), key=lambda d: d.mac)]

    def _status_of(self, device: Device) -> dict:
        return {
            **device.to_json(self.clock()),
            **self.registry.status_of(device.mac),
            **self.clone_watch.status_of(device.mac),
            **self.passphrases.status_of(device.mac),
            **self.portal.status_of(device.mac),
            **self.port_binding.status_of(device.mac),
            **self.controls.status_of(device.mac),
        }

    def _count_usage(self, forwarded: list[tuple[str, str, int]]) -> list:
        """What the switch's counters say each device moved ((source, destination, bytes) per rule)
        counts against its allowance; one that runs out is paused now (its rules, not at the next tick)."""
        used: dict[str, int] = {}
        for saddr, daddr, nbytes in forwarded:
            registry = self.registry
            device = registry.by_ip(saddr) or registry.by_ip(daddr) or registry.forwarding_at_v6(saddr, daddr)
            if device is not None:
                used[device.mac] = used.get(device.mac, 0) + nbytes
        effects: list = []
        for mac in self.controls.count(used):
            device = self.devices[mac]
            effects += self._reconcile(device) + self.controls.used_up(mac, device.label)
        return effects

    def dhcp_status(self) -> list:
        return self.registry.leases_status()

    def blacklist_status(self) -> list:
        return self.registry.blacklisted()

    # -- internals

    def _update(self, device: Device) -> list:
        self.registry.record(device)
        return self._reconcile(device)

    def _reconcile(self, device: Device, reinstall: bool = False) -> list:
        """Bring the switch's rules for one device in line with its state (reinstall: even if they are)."""
        access_ports, router_mac = self.switch.access_ports, self.switch.router_mac
        if not access_ports or router_mac is None:
            return []  # no switch yet: it gets everything when it connects
        held = not self.controls.may_forward(device.mac)
        wanted = flows.device_rules(
            device,
            self.clock(),
            access_ports,
            router_mac,
            port=self.port_binding.port_of(device.mac),
            learning=self.accounting.learning(device.mac),
            dns_gated=self.dns_gating.gated(device.mac),
            held=held,
        )
        forwards = self.registry.forwarding_now(device) and not held
        effects, dropped = self.switch.reconcile(device, wanted, forwards, reinstall)
        if not effects:
            return []
        if dropped:
            for concern in (self.accounting, self.priorities, self.dns_gating):
                concern.rules_dropped(device.mac)
        if self.ipv6 is not None:
            effects += self.ipv6.changes(device, wanted)
        if wanted is not None:
            effects += self._install_blocks(device)
        return effects + self.switch.set_forwarding(device.mac, forwards, wanted, self.devices.__getitem__)

    def _make_room_for_a_newcomer(self) -> list:
        """The pending device that makes way for a newcomer (if the pending are at their cap) is forgotten
        by every concern, and its meter and rules leave the switch."""
        oldest = self.newcomers.evictee(len(self.devices), self.registry.pending)
        if oldest is None:
            return []
        self.counters["pending_evicted"] += 1
        return self._forget(oldest)

    def _forget(self, device: Device) -> list:
        """Every concern forgets the device; its meter and rules leave the switch."""
        effects = self.switch.evict(device)
        for concern in self.concerns:
            concern.forget(device.mac)
        return effects
