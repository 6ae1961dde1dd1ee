"""What the router's core answers an event with: effects for the I/O edge (`edge.switch.sink`) to carry out.

Plain values, so the core and its concerns are tested without a switch, a socket or the kernel.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import assert_never

from . import flows
from .wire.lan import Subnet


@dataclass(frozen=True)
class InstallRules:
    """Rules to add: given, or a device's rule set (`flows.DeviceRules`), built when it is sent."""

    rules: tuple[flows.FlowRule, ...] | flows.DeviceRules


@dataclass(frozen=True)
class ModifyRules:
    """New actions for rules the switch may hold (same table, match and rule priority); counters carry on.
    A rule the switch no longer holds (it idled out) is not brought back."""

    rules: tuple[flows.FlowRule, ...]


@dataclass(frozen=True)
class RemoveRules:
    cookie: int


@dataclass(frozen=True)
class RemoveExactRules:
    """These rules (each by its table, rule priority and match), not the others under their cookie."""

    rules: tuple[flows.FlowRule, ...]


@dataclass(frozen=True)
class InstallGroup:
    """A group the switch does not hold yet (replace: new buckets for one it holds)."""

    group: flows.CopyGroup
    replace: bool = False


@dataclass(frozen=True)
class RemoveGroup:
    group_id: int


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
class AnswerDhcp:
    """A DHCP answer, sent by the router's LAN interface into the switch (which passes it to the
    wireless port): DHCP arrives there too, so it is answered without an OpenFlow round trip.

    after_rules: the answer lets a device use its address (an ACK), so the rules that let its traffic
    through must be on the switch first: a device's first DNS query follows its ACK within
    milliseconds, and a lost one costs it five seconds (held back, its captive-portal probe). Any
    other answer goes before the rule changes it brings (`held.py`).
    held_back: the device is held back (pending; its rules are the captive portal's): its ACK follows
    its own rules only while the router is not busy (no frames waiting, no changes held): in a storm,
    encoding each newcomer's rules before its answer would slow every answer (`fair_serving._waits_for_rules`)."""

    data: bytes
    after_rules: bool = False
    held_back: bool = False


@dataclass(frozen=True)
class AuthenticatorDeny:
    """Tell the authenticator (hostapd) to refuse, or accept again, a device's association.

    The switch already drops a blacklisted device's EAPOL; on a real radio hostapd gets
    EAPOL from the driver before the switch sees it, so it must be told as well.
    """

    mac: str
    deny: bool


@dataclass(frozen=True)
class AuthenticatorKick:
    """Tell the authenticator (hostapd) to take a station off the air now; it may join again. port: the
    access port of the access point that authenticated it (None: the router's own); a satellite's is the
    satellite's to carry out (told in the answer to its report), never the router's radio's, where the
    device this is a copy of may be."""

    mac: str
    port: int | None = None


@dataclass(frozen=True)
class AuthenticatorForget:
    """Tell the access point on `port` to drop a station's association without a word to it (hostapd's
    `DEAUTHENTICATE <mac> tx=0`): the station roamed to another access point without telling this one, which
    would otherwise hold the stale protected association until its inactivity timeout and, when the station
    came back, question it (SA Query) and refuse it for a while. The router's own radio is told at once; a
    satellite is told in the answer to its next links report (`satellites.links_answer`)."""

    mac: str
    port: int


# What the authenticator (hostapd) is told of a station.
AuthenticatorWord = AuthenticatorDeny | AuthenticatorKick | AuthenticatorForget


@dataclass(frozen=True)
class PublishWifiKeys:
    """Write hostapd's key file again from the devices' passphrases, and have hostapd read it."""


@dataclass(frozen=True)
class AddGatewayAddress:
    subnet: Subnet


@dataclass(frozen=True)
class ForgetNeighbours:
    """A device's addresses now have another MAC behind them (its /30 freed for the next newcomer, or the
    device itself back under a new MAC): the router's stack forgets the MAC it had for its address and
    for any in its /64s, so its next packet asks again and proxy ARP (or neighbour discovery) answers
    with the MAC there now. Until then the stack would send to the old MAC, which the switch drops:
    a newcomer given a freed /30 saw no DNS answers for seconds. Also one IPv6 address of a device
    alone (no prefixes): the least recently asked beyond its bound (`ipv6.MAX_NEIGHBOURS_PER_DEVICE`).
    mac: the MAC to forget; an entry the stack has learnt since for the address's next holder stays (the
    thread that forgets runs later than the decision, and deleting it would make the stack ask again)."""

    address: str
    mac: str
    prefixes: tuple[str, ...] = ()


@dataclass(frozen=True)
class ResolveName:
    """Look a name up upstream and feed what it teaches to `HomeRouter.dns_answer`."""

    domain: str


@dataclass(frozen=True)
class DnsVerdict:
    """What the resolver does with one query: "drop" it (not from a device: no answer at all),
    answer FORMERR ("malformed"), refuse it ("block"), relay it upstream ("allow"), or answer a held-back
    device's captive-portal probe with the router's address ("portal")."""

    action: str


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


@dataclass(frozen=True)
class AddIpv6Gateway:
    """The router's address in a device's /64 (its ::1) on the LAN interface, so its stack routes the /64 there."""

    prefix: str


@dataclass(frozen=True)
class RemoveIpv6Gateway:
    """A /64 from before a renumbering that no device may use any more (past the valid lifetime its
    adverts gave it): the router's ::1 in it leaves the LAN interface, and the kernel's route with it."""

    prefix: str


@dataclass(frozen=True)
class AddIpv6Route:
    """A route a device offers (a Thread border router's mesh, `border_routes`) on the LAN interface, so
    the router's own stack reaches the prefix there too."""

    prefix: str


@dataclass(frozen=True)
class RemoveIpv6Route:
    """A device's route withdrawn, run out, or gone with the device's forwarding: off the LAN interface."""

    prefix: str


# A change to the switch's rules and meters, in the order decided (`held.py` may hold them behind DHCP answers).
RuleChange = (
    InstallRules
    | ModifyRules
    | RemoveRules
    | RemoveExactRules
    | InstallMeter
    | RemoveMeter
    | InstallGroup
    | RemoveGroup
)
# A change to the router's own addresses and routes on the LAN interface (`lan_addresses.py`'s thread).
LanAddressChange = (
    AddGatewayAddress | AddIpv6Gateway | RemoveIpv6Gateway | AddIpv6Route | RemoveIpv6Route | ForgetNeighbours
)
# Every effect the core answers with (`DnsVerdict` is an answer to the resolver, not an effect).
Effect = (
    RuleChange
    | SendFrame
    | AnswerDhcp
    | LanAddressChange
    | AuthenticatorWord
    | PublishWifiKeys
    | ResolveName
    | TellHousehold
    | LogRow
)


class EffectSink(ABC):
    """Where effects are carried out: the I/O edge (`edge.switch.sink`), over the real switch and the kernel, and the
    web UI's test stack, over the fake switch. `carry_out` says once which method each kind of effect goes
    to; mypy proves every kind has one (`assert_never`), and each sink defines every method (an effect it
    has nowhere to carry is a no-op there that says why)."""

    def carry_out(self, effect: Effect) -> None:
        match effect:  # a DHCP storm's effects first: they are carried out for every message of it
            case AnswerDhcp():
                self.answer_dhcp(effect)
            case LogRow():
                self.log_row(effect)
            case TellHousehold():
                self.tell_household(effect)
            case (
                InstallRules()
                | ModifyRules()
                | RemoveRules()
                | RemoveExactRules()
                | InstallMeter()
                | RemoveMeter()
                | InstallGroup()
                | RemoveGroup()
            ):
                self.change_rules(effect)
            case SendFrame():
                self.send_frame(effect)
            case AuthenticatorDeny() | AuthenticatorKick() | AuthenticatorForget():
                self.tell_authenticator(effect)
            case (
                AddGatewayAddress()
                | AddIpv6Gateway()
                | RemoveIpv6Gateway()
                | AddIpv6Route()
                | RemoveIpv6Route()
                | ForgetNeighbours()
            ):
                self.change_lan_addresses(effect)
            case ResolveName():
                self.resolve_name(effect)
            case PublishWifiKeys():
                self.publish_wifi_keys()
            case _:
                assert_never(effect)

    @abstractmethod
    def change_rules(self, change: RuleChange) -> None: ...

    @abstractmethod
    def send_frame(self, frame: SendFrame) -> None: ...

    @abstractmethod
    def answer_dhcp(self, answer: AnswerDhcp) -> None: ...

    @abstractmethod
    def change_lan_addresses(self, change: LanAddressChange) -> None: ...

    @abstractmethod
    def tell_authenticator(self, told: AuthenticatorWord) -> None: ...

    @abstractmethod
    def publish_wifi_keys(self) -> None: ...

    @abstractmethod
    def resolve_name(self, name: ResolveName) -> None: ...

    @abstractmethod
    def tell_household(self, told: TellHousehold) -> None: ...

    @abstractmethod
    def log_row(self, row: LogRow) -> None: ...
