"""DNS gating, the concern: each device's DNS rules (block/allow by name), the address book of
what blocked names resolve to, each device's blocked addresses and which of them the switch holds,
and the verdict on each query the router's resolver gets (the captive portal's DNS included).

The rules themselves (suffixes, IDNA, the decision) are `dns_rules`' (policy), pure; this keeps the state.
`HomeRouter` asks it whether a device's rule set is gated (`gated`), for a device's drop rules
(`block_rules`), and tells it when a device's rules left the switch (`rules_dropped`) or the
device is forgotten (`forget`: its rules go from memory and the disk). Which device an address is,
and whether it is held back, it asks through the functions it is given (`Lookups`).
"""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Callable
from typing import NamedTuple

import idna

from .. import flows
from ..effects import DnsVerdict, Effect
from ..errors import ApiError
from ..flows import flows_v6
from ..lifecycle import NOTHING_TICKED, SwitchFacts, Ticked, move_key
from ..model import Device
from ..policy import dns_rules
from ..store import DeviceStore, StoreError

LOG = logging.getLogger(__name__)

BLOCK_CLEANUP_S = 60  # how late the switch may lift a DNS block whose addresses expired


class Lookups(NamedTuple):
    """What the verdict on a query needs to know of other concerns, as functions `HomeRouter` gives."""

    forwarding_at: Callable[[str], Device | None]  # the device forwarding now at an IPv4 or IPv6 address
    answerable_at: Callable[[str], Device | None]  # the device with a live lease, not refused, at an IPv4 address
    held: Callable[[str], bool]  # whether a gate holds the device's traffic now
    is_portal_probe: Callable[[str], bool]  # a name operating systems probe for a captive portal


class DnsGating:
    def __init__(self, store: DeviceStore, clock: Callable[[], float], counters: dict[str, int], lookups: Lookups):
        self.store, self.clock, self.counters, self.lookups = store, clock, counters, lookups
        self.rules: dict[str, dict[str, str]] = store.load_dns_rules()
        self.addresses = dns_rules.AddressBook(clock=clock)
        # Per device, the addresses blocked for it (address -> live (name, address) pairs that block
        # it), kept up to date as answers teach and TTLs run out, and which of them the switch holds.
        self.blocked: dict[str, Counter[str]] = {}
        self.on_switch: dict[str, set[str]] = {}
        self.stale: set[str] = set()  # devices whose switch holds blocks no longer wanted
        self.next_cleanup = clock() + BLOCK_CLEANUP_S

    # -- the lifecycle

    def switch_ready(self, switch: SwitchFacts) -> list[Effect]:
        """The blocks on the switch went with its rules (each device's reconcile puts back those wanted)."""
        self.on_switch, self.stale = {}, set()
        return []

    def rules_dropped(self, mac: str) -> None:
        """The device's rules left the switch (its cookie deleted): its drop rules with them."""
        self.on_switch.pop(mac, None)

    def knows(self, mac: str) -> bool:
        return mac in self.rules or mac in self.blocked or mac in self.on_switch or mac in self.stale

    def forget(self, mac: str) -> None:
        """The device is gone: its rules, in memory and on the disk, and what they blocked."""
        for domain in self.rules.pop(mac, {}):
            self._save(mac, domain, None)
        self.blocked.pop(mac, None)
        self.on_switch.pop(mac, None)
        self.stale.discard(mac)

    def move(self, old_mac: str, new_mac: str) -> None:
        """Its rules follow it; what they blocked on the switch went with its old MAC's rules."""
        move_key(old_mac, new_mac, self.rules, self.blocked)
        self.on_switch.pop(old_mac, None)
        self.stale.discard(old_mac)

    def tick(self, now: float) -> Ticked:
        """Addresses whose TTL ran out are forgotten; the devices whose switch should lose drop rules
        no longer wanted (at most every BLOCK_CLEANUP_S) have their rules reinstalled."""
        self._forget_addresses(self.addresses.expire())
        if not self.stale or now < self.next_cleanup:
            return NOTHING_TICKED
        stale, self.stale = self.stale, set()
        self.next_cleanup = now + BLOCK_CLEANUP_S
        return Ticked(reinstall=stale)

    # -- what the device's rules are made of

    def gated(self, mac: str) -> bool:
        return dns_rules.DENY in self.rules.get(mac, {}).values()

    def block_rules(self, device: Device, ips=None, ipv6_prefixes: tuple[str, ...] = ()) -> list[flows.FlowRule]:
        """Drop rules from the device to those of ips (default: all it has blocked) the switch does
        not hold yet; they are taken as held. The caller knows the device forwards now. An IPv6
        address (learnt from AAAA) is dropped from each of the device's /64s (`ipv6_prefixes`)."""
        wanted = self.blocked.get(device.mac, ()) if ips is None else ips
        on_switch = self.on_switch.setdefault(device.mac, set())
        new = [addr for addr in wanted if addr not in on_switch]
        on_switch.update(new)
        rules = []
        for addr in sorted(new):
            if ":" in addr:
                rules += flows_v6.dns_block_rules(device, addr, ipv6_prefixes)
            else:
                rules.append(flows.dns_block_rule(device, addr))
        return rules

    # -- events

    def query(self, client_ip: str, query: dns_rules.Query | None) -> DnsVerdict:
        """A query that reached the router's resolver from client_ip, parsed (None: it was malformed).

        Runs under the controller's lock: a lookup and the device's rules, nothing more.
        """
        device = self.lookups.forwarding_at(client_ip)
        if device is None or self.lookups.held(device.mac):
            return self._portal_query(client_ip, query)
        if query is None:
            self.counters["dns_malformed"] += 1
            return DnsVerdict("malformed")
        if dns_rules.decide(self.rules.get(device.mac, {}), query.qname) == dns_rules.DENY:
            self.counters["dns_refused"] += 1
            return DnsVerdict("block")
        return DnsVerdict("allow")

    def _portal_query(self, client_ip: str, query: dns_rules.Query | None) -> DnsVerdict:
        """A query from a device held back, whose rules let only DNS and the portal through: the names
        operating systems probe for a captive portal get the router's address (the OS then shows its
        sign-in sheet with the portal), every other name a refusal (a paused device's apps say so at
        once instead of waiting out a timeout)."""
        if self.lookups.answerable_at(client_ip) is None:
            # Only devices with a live lease get here through the switch; anyone else (the WAN side,
            # a stale address) gets no answer at all.
            self.counters["dns_not_a_device"] += 1
            return DnsVerdict("drop")
        if query is None:
            self.counters["dns_malformed"] += 1
            return DnsVerdict("malformed")
        if self.lookups.is_portal_probe(query.qname):
            self.counters["dns_portal"] += 1
            return DnsVerdict("portal")
        self.counters["dns_refused"] += 1
        return DnsVerdict("block")

    def learn(self, learnt) -> dict[str, list[str]]:
        """What an upstream answer taught ((name, address, ttl) each): the addresses newly blocked, per device.

        Costs time in what the answer taught, times the devices with rules, not in what the
        router has learnt before."""
        newly_blocked: dict[str, list[str]] = {}
        for name, ip, ttl in learnt:
            blocking = self._blocking(name)
            new, forgotten = self.addresses.learn(name, ip, ttl, keep=bool(blocking))
            if new:
                for mac in blocking:
                    blocked = self.blocked.setdefault(mac, Counter())
                    blocked[ip] += 1
                    if blocked[ip] == 1:
                        newly_blocked.setdefault(mac, []).append(ip)
            self._forget_addresses(forgotten)
        return newly_blocked

    def set_rule(self, mac: str, domain: str, action: str) -> tuple[str, str | None]:
        """The household blocks or allows a name for a device: (the name normalised, the rule it now
        has: None if none). Raises ApiError for what is not a domain name."""
        try:
            domain = dns_rules.normalize_domain(domain)
        except dns_rules.BadDomain as exc:
            raise ApiError(str(exc)) from None
        rules = self.rules.setdefault(mac, {})
        new: str | None
        if action == dns_rules.ALLOW and rules.get(domain) == dns_rules.DENY:
            new = None  # lifting a block: remove it rather than pile an exception on it
        elif action == dns_rules.ALLOW and dns_rules.decide(rules, domain) == dns_rules.ALLOW:
            new = None  # already allowed: nothing to remember
        else:
            new = action
        if new is None:
            rules.pop(domain, None)
        else:
            rules[domain] = new
        changes: dict[str, str | None] = {domain: new}
        # Exceptions that no block covers any more are dropped, so lifting a block lifts it all.
        for other, act in list(rules.items()):
            if (
                act == dns_rules.ALLOW
                and dns_rules.decide({d: a for d, a in rules.items() if d != other}, other) == dns_rules.ALLOW
            ):
                del rules[other]
                changes[other] = None
        for changed, change in changes.items():
            self._save(mac, changed, change)
        LOG.info("household: DNS %s %s for %s", action, domain, mac)
        return domain, new

    def recompute(self, mac: str) -> bool:
        """The device's rules changed: its blocked set afresh from the book. Whether a block the switch
        holds was lifted (then the device's rules are reinstalled without it).

        Costs time in the pairs learnt under the device's blocked domains, not in the book."""
        rules = self.rules.get(mac, {})
        blocking = {
            entry
            for domain, action in rules.items()
            if action == dns_rules.DENY
            for entry in self.addresses.under(domain)
            if dns_rules.decide(rules, entry[0]) == dns_rules.DENY
        }
        for entry in blocking:
            self.addresses.keep(entry)
        blocked = Counter(ip for _, ip in blocking)
        self.blocked[mac] = blocked
        return bool(self.on_switch.get(mac, set()) - set(blocked))

    # -- queries

    def rules_of(self, mac: str) -> list[dict]:
        return [
            {"domain": domain, "display": _display_domain(domain), "action": action}
            for domain, action in sorted(self.rules.get(mac, {}).items())
        ]

    # -- internals

    def _blocking(self, name: str) -> list[str]:
        """The devices for which name is blocked."""
        return [mac for mac, rules in self.rules.items() if dns_rules.decide(rules, name) == dns_rules.DENY]

    def _forget_addresses(self, entries) -> None:
        """(name, address) pairs the book forgot (expired, or made room): unblock what they alone blocked.

        The switch keeps the drop rule until the next clean-up (`tick`): lifting a block a
        minute late costs nothing, reinstalling a device's rules on every expiry would.
        """
        for name, ip in entries:
            for mac in self._blocking(name):
                blocked = self.blocked.get(mac)
                if blocked is None or ip not in blocked:
                    continue
                blocked[ip] -= 1
                if not blocked[ip]:
                    del blocked[ip]
                    if ip in self.on_switch.get(mac, ()):
                        self.stale.add(mac)

    def _save(self, mac: str, domain: str, action: str | None) -> None:
        try:
            self.store.save_dns_rule(mac, domain, action)
        except StoreError as exc:
            self.counters["store_errors"] += 1
            LOG.error("%s", exc)


def _display_domain(domain: str) -> str:
    try:
        return idna.decode(domain)
    except idna.IDNAError:
        return domain
