"""The router's policy core: state in, effects out.

`HomeRouter` holds the device table and answers each event (a DHCP or ARP
packet, a DNS query, a household decision, the clock) with a list of effects
for the I/O edge to carry out: rules to install or remove, frames to send,
gateway addresses to add, events to tell the household. It never talks to a
switch, a socket or the kernel itself, so unit tests drive it directly.
"""
from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from typing import Callable

import idna

from . import apps, dhcp, dnsgate, flows, packets
from .model import FIRST_DEVICE_SUBNET, SUBNET_COUNT, Device, State, Subnet, normalize_mac
from .store import DeviceStore, StoreError

LOG = logging.getLogger(__name__)


# ---- effects ---------------------------------------------------------------

@dataclass(frozen=True)
class InstallRules:
    rules: tuple[flows.FlowRule, ...]


@dataclass(frozen=True)
class RemoveRules:
    cookie: int


@dataclass(frozen=True)
class InstallMeter:
    band: flows.MeterBand


@dataclass(frozen=True)
class RemoveMeter:
    meter_id: int


@dataclass(frozen=True)
class SendFrame:
    port: int | str
    data: bytes


@dataclass(frozen=True)
class AuthenticatorDeny:
    """Tell the authenticator (hostapd) to refuse, or accept again, a device's association.

    The switch already drops a blacklisted device's EAPOL; on a real radio hostapd gets
    EAPOL from the driver before the switch sees it, so it must be told as well.
    """

    mac: str
    deny: bool


@dataclass(frozen=True)
class AddGatewayAddress:
    subnet: Subnet


@dataclass(frozen=True)
class ResolveName:
    """Look a name up upstream and feed the answer to `HomeRouter.dns_answer`."""

    domain: str


@dataclass(frozen=True)
class DnsVerdict:
    """What to do with one query: "drop" it, "answer" it with `reply`, or "forward" it upstream."""

    action: str
    qname: str = ""
    reply: bytes = b""


@dataclass(frozen=True)
class TellHousehold:
    kind: str
    mac: str
    message: str


@dataclass(frozen=True)
class LogRow:
    """A row for one of hwdb's tables."""

    table: str
    row: tuple


class ApiError(Exception):
    status = 400


class UnknownDevice(ApiError):
    status = 404


class NoFreeSubnet(RuntimeError):
    pass


# ---- the core --------------------------------------------------------------

class HomeRouter:
    def __init__(self, store: DeviceStore, lease_policy: dhcp.LeasePolicy = dhcp.LeasePolicy(),
                 clock: Callable[[], float] = time.time, flow_budget: int = 200,
                 budget_cooldown_s: float = 120.0, max_pending: int = 256):
        self.store = store
        self.lease_policy = lease_policy
        self.clock = clock
        self.devices: dict[str, Device] = store.load()
        self.used_subnets = {d.subnet.index for d in self.devices.values() if d.subnet}
        self.mac_by_subnet = {d.subnet.index: d.mac for d in self.devices.values() if d.subnet}
        self.leased = {d.mac for d in self.devices.values() if d.lease_active(clock())}
        self.installed: dict[str, frozenset[flows.FlowRule]] = {}
        self.meters: set[int] = set()
        self.gateways: set[int] = set()  # subnets whose gateway address the router's stack holds
        self.max_pending = max_pending
        self.wlan_port: int | None = None
        self.router_mac: str | None = None
        self.dns_rules: dict[str, dict[str, str]] = store.load_dns_rules()
        self.addresses = dnsgate.AddressBook(clock=clock)
        self.flow_budget, self.budget_cooldown_s = flow_budget, budget_cooldown_s
        self.learnt: dict[str, set[flows.FiveTuple]] = {}
        self.copied: dict[tuple, tuple[int, int]] = {}  # counter key -> (packets, bytes) the controller saw
        self.over_budget: dict[str, float] = {}  # mac -> when per-flow learning resumes
        self.flow_counters: dict[tuple, tuple[int, int]] = {}  # rule key -> (packets, bytes) at last poll
        self.counters = {"dhcp_malformed": 0, "dhcp_spoofed_chaddr": 0, "dns_malformed": 0,
                         "frames_malformed": 0, "store_errors": 0, "dns_overload_dropped": 0,
                         "dns_refused": 0, "dns_not_a_device": 0, "pending_evicted": 0}

    # -- switch lifecycle

    def switch_ready(self, wlan_port: int, router_mac: str) -> list:
        """The switch (re)connected: it has no rules; give it the whole rule set."""
        self.wlan_port, self.router_mac = wlan_port, router_mac
        self.installed, self.meters, self.gateways = {}, {flows.NEWCOMERS_METER.meter_id}, set()
        effects: list = [InstallMeter(flows.NEWCOMERS_METER), InstallRules(tuple(flows.base_rules(wlan_port)))]
        for device in self.devices.values():
            effects += self._reconcile(device)
        effects += [AuthenticatorDeny(d.mac, True) for d in self.devices.values() if d.state is State.BLACKLISTED]
        return effects

    # -- packets

    def on_dhcp(self, frame: packets.Frame) -> list:
        try:
            req = dhcp.decode_request(frame.payload)
        except dhcp.MalformedDhcp as exc:
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
        if before is None and req.msg_type == dhcp.DISCOVER:
            effects += self._make_room_for_a_newcomer()
        outcome = dhcp.serve(req, before, now, self.lease_policy, self._allocate_subnet)
        LOG.debug("DHCP %s from %s (%s): %s", req.name, req.chaddr, req.hostname or "-", outcome.log)
        if outcome.device is not None and outcome.device != before:
            effects += self._update(outcome.device)
        effects += [TellHousehold(kind, req.chaddr, msg) for kind, msg in outcome.events]
        if outcome.lease_action:
            effects.append(self._lease_row(outcome.device, outcome.lease_action))
        if outcome.reply is not None:
            reply = outcome.reply
            effects.append(SendFrame(self.wlan_port, packets.udp_frame(
                self.router_mac, reply.dst_mac, reply.server_ip, reply.dst_ip, 67, 68,
                dhcp.encode_reply(reply))))
        return effects

    def on_arp(self, in_port, frame: packets.Frame) -> list:
        """Proxy ARP: the router answers for gateways (to devices) and for devices (to its own stack)."""
        req = frame.arp
        if req.opcode != packets.ARP_REQUEST:  # replies and gratuitous ARP get no answer
            return []
        if in_port == flows.LOCAL:
            target = self._device_by_ip(req.dst_ip)
            if target and target.forwards and target.lease_active(self.clock()):
                return [SendFrame(flows.LOCAL, packets.arp_reply(target.mac, req.dst_ip, req.src_mac, req.src_ip))]
            return []
        device = self.devices.get(frame.eth_src)
        if (device is None or device.subnet is None or req.src_mac != frame.eth_src
                or device.state not in (State.PENDING, State.PERMITTED)
                or req.src_ip not in (device.subnet.device_ip, dhcp.ZERO_IP)
                or req.dst_ip != device.subnet.gateway):
            return []
        return [SendFrame(self.wlan_port, packets.arp_reply(self.router_mac, req.dst_ip,
                                                             req.src_mac, req.src_ip))]

    def on_flow_copy(self, in_port, frame: packets.Frame) -> list:
        """A packet of a flow with no counting rule yet, copied to the controller while it is
        forwarded: count it here (a connection may end before its rule is in place) and give
        the flow a rule of its own, within the device's budget."""
        outgoing = in_port != flows.LOCAL
        device = self._device_by_ip(frame.ip_src if outgoing else frame.ip_dst)
        if device is None or not device.forwards or device.mac in self.over_budget:
            return []  # copies still in flight after a change: the device's own rule counted them
        flow = flows.FiveTuple(frame.ip_proto, frame.ip_src, frame.sport, frame.ip_dst, frame.dport)
        # The device's learning rule counted this packet too: it is the flow's, not the device's.
        device_key = ("device", frame.ip_src, "0.0.0.0") if outgoing else ("device", "0.0.0.0", frame.ip_dst)
        for key in (("flow", flow), device_key):
            pkts, nbytes = self.copied.get(key, (0, 0))
            self.copied[key] = (pkts + 1, nbytes + frame.size)
        learnt = self.learnt.setdefault(device.mac, set())
        if flow in learnt:
            return []  # its rule is on its way
        if len(learnt) >= self.flow_budget:
            self.over_budget[device.mac] = self.clock() + self.budget_cooldown_s
            label = device.name or device.hostname or device.mac
            return self._reconcile(device) + [TellHousehold(
                "flow-budget", device.mac,
                f"{label} opened more than {self.flow_budget} connections at once; its traffic is counted "
                f"as a whole for the next {int(self.budget_cooldown_s // 60)} minutes")]
        learnt.add(flow)
        return [InstallRules((flows.learnt_flow_rule(device, flow),))]

    def on_flow_stats(self, entries: list[tuple[int, dict, int, int]]) -> list:
        """Counters of the accounting table -> Flows rows with what each flow did since last time.

        entries: (priority, match, packets, bytes) per rule. A learnt flow is its 5-tuple: what
        its rule counted plus what the controller saw of it before the rule was in place. A
        device's learning rule (traffic not counted per flow) is a row with protocol 0 and the
        far side 0.0.0.0.
        """
        rows = []
        seen = set()
        for priority, match, pkts, nbytes in entries:
            key = self._counter_key(priority, match)
            if key is None:
                continue
            seen.add(key)
            row = self._count(key, pkts, nbytes)
            if row is not None:
                rows.append(row)
        for key in set(self.flow_counters) - seen:  # rules that are gone, counted at removal
            del self.flow_counters[key]
        # Flows that ended before their rule was in place: what the controller saw is all there is.
        for key in [k for k in self.copied if k not in seen]:
            row = self._count(key, 0, 0, keep=False)
            if row is not None and key[0] == "flow":
                rows.append(row)
        return rows + self._app_rows(rows)

    def on_flow_removed(self, priority: int, match: dict, pkts: int, nbytes: int) -> list:
        """A learnt flow idled out (or was deleted): count what it saw since the last poll."""
        key = self._counter_key(priority, match)
        if key is None:
            return []
        for learnt in self.learnt.values():
            learnt.discard(key[1])
        row = self._count(key, pkts, nbytes, keep=False)
        rows = [row] if row is not None else []
        return rows + self._app_rows(rows)

    def _count(self, key, pkts: int, nbytes: int, keep: bool = True) -> LogRow | None:
        """The row for what a counter saw since it was last read, if it saw anything."""
        before_p, before_b = self.flow_counters.pop(key, (0, 0))
        if pkts < before_p:  # the rule was replaced since the last poll: it counts afresh
            before_p, before_b = 0, 0
        if keep:
            self.flow_counters[key] = (pkts, nbytes)
        copied_p, copied_b = self.copied.pop(key, (0, 0))
        if key[0] == "flow":
            delta_p, delta_b = pkts - before_p + copied_p, nbytes - before_b + copied_b
        else:  # a device's rule also counted the copies that were then counted as flows
            delta_p, delta_b = max(0, pkts - before_p - copied_p), max(0, nbytes - before_b - copied_b)
        if delta_p <= 0:
            return None
        return LogRow("Flows", self._flow_row(key, delta_p, delta_b))

    @staticmethod
    def _app_rows(flow_rows: list[LogRow]) -> list[LogRow]:
        """AppTimeseries: this interval's learnt-flow traffic summed per application."""
        per_app: dict[str, list[int]] = {}
        for r in flow_rows:
            proto, saddr, sport, daddr, dport, pkts, nbytes = r.row
            if proto:  # device totals (proto 0) are not attributable to an application
                totals = per_app.setdefault(apps.infer(flows.FiveTuple(proto, saddr, sport, daddr, dport)), [0, 0])
                totals[0] += nbytes
                totals[1] += pkts
        return [LogRow("AppTimeseries", (app, b, p)) for app, (b, p) in sorted(per_app.items())]

    @staticmethod
    def _counter_key(priority: int, match: dict):
        if priority == flows.Accounting.LEARNT_FLOW:
            return ("flow", flows.FiveTuple.from_match(match))
        if priority in (flows.Accounting.DEVICE_SOURCE, flows.Accounting.DEVICE_DEST):
            return ("device", match.get("ipv4_src", "0.0.0.0"), match.get("ipv4_dst", "0.0.0.0"))
        return None

    @staticmethod
    def _flow_row(key, pkts: int, nbytes: int) -> tuple:
        if key[0] == "flow":
            f = key[1]
            return (f.proto, f.saddr, f.sport, f.daddr, f.dport, pkts, nbytes)
        return (0, key[1], 0, key[2], 0, pkts, nbytes)

    # -- DNS gating

    def dns_query(self, client_ip: str, wire: bytes) -> DnsVerdict:
        """A query that reached the router's resolver from client_ip."""
        device = self._device_by_ip(client_ip)
        if device is None or not (device.forwards and device.lease_active(self.clock())):
            # Only permitted devices get here through the switch; anyone else (the WAN side,
            # a stale address) gets no answer at all.
            self.counters["dns_not_a_device"] += 1
            return DnsVerdict("drop")
        try:
            query, qname = dnsgate.parse_query(wire)
        except dnsgate.MalformedQuery:
            self.counters["dns_malformed"] += 1
            return DnsVerdict("drop")
        if dnsgate.decide(self.dns_rules.get(device.mac, {}), qname) == dnsgate.DENY:
            self.counters["dns_refused"] += 1
            return DnsVerdict("answer", qname, dnsgate.refusal(query))
        return DnsVerdict("forward", qname)

    def dns_answer(self, qname: str, answer: bytes) -> list:
        """An upstream answer the router relayed (or looked up itself): learn its addresses."""
        learnt_new = False
        for names, ip, ttl in dnsgate.learnable(answer, qname):
            learnt_new |= self.addresses.learn(names, ip, ttl)
        if not learnt_new:
            return []
        return self._reconcile_dns_gated()

    def deny_dns(self, mac: str, domain: str) -> list:
        return self._set_dns_rule(mac, domain, dnsgate.DENY)

    def permit_dns(self, mac: str, domain: str) -> list:
        return self._set_dns_rule(mac, domain, dnsgate.ALLOW)

    def dns_rules_of(self, mac: str) -> list[dict]:
        device = self._known(mac)
        return [{"domain": domain, "display": _display_domain(domain), "action": action}
                for domain, action in sorted(self.dns_rules.get(device.mac, {}).items())]

    def _set_dns_rule(self, mac: str, domain: str, action: str) -> list:
        device = self._known(mac)
        try:
            domain = dnsgate.normalize_domain(domain)
        except dnsgate.BadDomain as exc:
            raise ApiError(str(exc)) from None
        rules = self.dns_rules.setdefault(device.mac, {})
        if action == dnsgate.ALLOW and rules.get(domain) == dnsgate.DENY:
            new = None  # lifting a block: remove it rather than pile an exception on it
        elif action == dnsgate.ALLOW and dnsgate.decide(rules, domain) == dnsgate.ALLOW:
            new = None  # already allowed: nothing to remember
        else:
            new = action
        if new is None:
            rules.pop(domain, None)
        else:
            rules[domain] = new
        changes = {domain: new}
        # Exceptions that no block covers any more are dropped, so lifting a block lifts it all.
        for other, act in list(rules.items()):
            if act == dnsgate.ALLOW and dnsgate.decide({d: a for d, a in rules.items() if d != other},
                                                       other) == dnsgate.ALLOW:
                del rules[other]
                changes[other] = None
        try:
            for changed, act in changes.items():
                self.store.save_dns_rule(device.mac, changed, act)
        except StoreError as exc:
            self.counters["store_errors"] += 1
            LOG.error("%s", exc)
        LOG.info("household: DNS %s %s for %s", action, domain, device.mac)
        effects = self._reconcile(device)
        if new == dnsgate.DENY:
            effects.append(ResolveName(domain))  # learn its addresses now, not when someone asks
        return effects

    def _blocked_addresses(self, mac: str) -> frozenset[str]:
        rules = self.dns_rules.get(mac)
        if not rules or dnsgate.DENY not in rules.values():
            return frozenset()
        return frozenset(self.addresses.blocked_for(lambda name: dnsgate.decide(rules, name) == dnsgate.DENY))

    def _reconcile_dns_gated(self) -> list:
        effects = []
        for mac, rules in self.dns_rules.items():
            if dnsgate.DENY in rules.values() and mac in self.devices:
                effects += self._reconcile(self.devices[mac])
        return effects

    # -- the household's decisions

    def _known(self, mac: str) -> Device:
        mac = normalize_mac(mac)
        device = self.devices.get(mac)
        if device is None:
            raise UnknownDevice(f"no device {mac} has asked to join")
        return device

    def permit(self, mac: str) -> list:
        return self._decide(self._known(mac), State.PERMITTED)

    def deny(self, mac: str) -> list:
        return self._decide(self._known(mac), State.DENIED)

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

    def _decide(self, device: Device, state: State) -> list:
        LOG.info("household: %s %s -> %s", device.mac, device.state.value, state.value)
        effects = self._update(device.with_(state=state))
        if (device.state is State.BLACKLISTED) != (state is State.BLACKLISTED):
            effects.append(AuthenticatorDeny(device.mac, state is State.BLACKLISTED))
        return effects

    # -- the clock

    def tick(self) -> list:
        """Leases that ran out, flow budgets that cooled down, DNS-learnt addresses that expired."""
        now = self.clock()
        effects = [self._lease_row(self.devices[mac], "expired")
                   for mac in list(self.leased) if not self.devices[mac].lease_active(now)]
        for mac in [m for m, until in self.over_budget.items() if until <= now]:
            del self.over_budget[mac]
        for mac in list(self.installed):
            effects += self._reconcile(self.devices[mac])
        if self.addresses.expire():
            effects += self._reconcile_dns_gated()
        return effects

    # -- queries

    def status(self, mac: str | None = None):
        now = self.clock()
        if mac is not None:
            return self._known(mac).to_json(now)
        return [d.to_json(now) for d in sorted(self.devices.values(), key=lambda d: d.mac)]

    def dhcp_status(self) -> list:
        now = self.clock()
        return [{"mac": d.mac, "ip": d.subnet.device_ip, "state": d.state.value, "hostname": d.hostname,
                 "lease_expires": d.lease_expires, "lease_seconds_left": max(0, int(d.lease_expires - now))}
                for d in sorted(self.devices.values(), key=lambda d: d.subnet.index)
                if d.lease_active(now)]

    def blacklist_status(self) -> list:
        return sorted(d.mac for d in self.devices.values() if d.state is State.BLACKLISTED)

    # -- internals

    def _lease_row(self, device: Device, action: str) -> LogRow:
        if action in ("released", "expired"):
            self.leased.discard(device.mac)
        else:
            self.leased.add(device.mac)
        return LogRow("Leases", (device.mac, device.subnet.device_ip, device.hostname, action, device.state.value))

    def _update(self, device: Device) -> list:
        self.devices[device.mac] = device
        if device.subnet:
            self.mac_by_subnet[device.subnet.index] = device.mac
        try:
            self.store.save(device)
        except StoreError as exc:
            # Keep serving from memory: a full disk must not take the network down.
            self.counters["store_errors"] += 1
            LOG.error("%s", exc)
        return self._reconcile(device)

    def _reconcile(self, device: Device) -> list:
        """Bring the switch's rules for one device in line with its state."""
        if self.wlan_port is None:
            return []
        wanted = flows.device_rules(device, self.clock(), self.wlan_port, self.router_mac,
                                    learning=device.mac not in self.over_budget,
                                    blocked=self._blocked_addresses(device.mac))
        have = self.installed.get(device.mac, frozenset())
        if wanted == have:
            return []
        effects: list = []
        if device.forwards and device.lease_active(self.clock()) and device.subnet.index not in self.gateways:
            # Only a permitted device talks to the router's own stack; a pending one gets DHCP
            # and ARP from the controller, so a storm of newcomers costs no netlink work.
            self.gateways.add(device.subnet.index)
            effects.append(AddGatewayAddress(device.subnet))
        if any(isinstance(a, flows.Meter) for r in wanted for a in r.actions):
            band = flows.device_meter(device)
            if band.meter_id not in self.meters:
                self.meters.add(band.meter_id)
                effects.append(InstallMeter(band))
        if have:
            # Deleting by cookie also ends flows in progress (a denied device is cut off at
            # once) and takes its learnt flows with it: they are learnt again as they pass.
            effects.append(RemoveRules(flows.device_cookie(device)))
            self.learnt.pop(device.mac, None)
        if wanted:
            effects.append(InstallRules(tuple(sorted(wanted, key=repr))))
            self.installed[device.mac] = wanted
        else:
            self.installed.pop(device.mac, None)
        return effects

    def _make_room_for_a_newcomer(self) -> list:
        """At most max_pending devices wait for a decision; the one silent longest makes way.

        A DHCP storm of forged MACs would otherwise take a /30, a meter and two rules per
        MAC. Devices the household has decided about are never evicted.
        """
        pending = [d for d in self.devices.values() if d.state is State.PENDING]
        if len(pending) < self.max_pending:
            return []
        oldest = min(pending, key=lambda d: d.last_seen)
        LOG.info("pending devices at their cap (%d): forgetting %s, silent since %.0f", self.max_pending,
                 oldest.mac, oldest.last_seen)
        self.counters["pending_evicted"] += 1
        del self.devices[oldest.mac]
        try:
            self.store.delete(oldest.mac)
        except StoreError as exc:
            self.counters["store_errors"] += 1
            LOG.error("%s", exc)
        self.leased.discard(oldest.mac)
        effects = []
        if oldest.subnet:
            self.used_subnets.discard(oldest.subnet.index)
            self.mac_by_subnet.pop(oldest.subnet.index, None)
            meter = flows.device_meter(oldest).meter_id
            if self.installed.pop(oldest.mac, None) is not None:
                effects.append(RemoveRules(flows.device_cookie(oldest)))
            if meter in self.meters:
                self.meters.discard(meter)
                effects.append(RemoveMeter(meter))
        return effects

    def _allocate_subnet(self) -> Subnet:
        for index in range(FIRST_DEVICE_SUBNET, SUBNET_COUNT):
            if index not in self.used_subnets:
                self.used_subnets.add(index)
                return Subnet(index)
        raise NoFreeSubnet("all /30s in 10.2.0.0/16 are taken")

    def _device_by_ip(self, ip: str) -> Device | None:
        subnet = Subnet.containing(ip)
        if subnet is None or ip != subnet.device_ip:
            return None
        return self.devices.get(self.mac_by_subnet.get(subnet.index))


def _display_domain(domain: str) -> str:
    try:
        return idna.decode(domain)
    except idna.IDNAError:
        return domain
