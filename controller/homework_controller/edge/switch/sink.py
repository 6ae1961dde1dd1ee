"""Where the router's effects are carried out on the real switch and the kernel (`effects.EffectSink`): rule
changes and frames to the switch, DHCP answers into the LAN interface, the router's addresses by netlink, hostapd
told, names looked up upstream, rows for hwdb. Nothing here waits for I/O: each goes to a thread of its own."""

from __future__ import annotations

import functools
import logging
import threading

from ...effects import (
    AnswerDhcp,
    AuthenticatorForget,
    AuthenticatorKick,
    AuthenticatorWord,
    EffectSink,
    LanAddressChange,
    LogRow,
    ResolveName,
    RuleChange,
    SendFrame,
    TellHousehold,
)
from ...flows import openflow
from ...radio.hostapd_ctrl import Authenticator
from ..feeds.hwdb_log import HwdbLog
from ..lan.dhcp_port import DhcpPort
from ..lan.dns_server import DnsServer
from ..lan.lan_addresses import LanAddresses
from .switch_connection import SwitchConnection

LOG = logging.getLogger("homework.controller")


class EdgeSink(EffectSink):
    # The resolver, given once it is made: what it learns is decided by the router and carried out here, so it is
    # made after this sink (a name is looked up only for a decision, after start-up).
    resolver: DnsServer

    def __init__(
        self,
        switch: SwitchConnection,
        dhcp_port: DhcpPort,
        lan_addresses: LanAddresses,
        authenticator: Authenticator,
        hwdb: HwdbLog,
        *,
        ipv6: bool,
    ):
        self.switch, self.dhcp_port, self.lan_addresses = switch, dhcp_port, lan_addresses
        self.authenticator, self.hwdb, self.ipv6 = authenticator, hwdb, ipv6

    def change_rules(self, change: RuleChange) -> None:
        self.switch.send_encoded(self.switch.encode_rules(change))

    def send_frame(self, frame: SendFrame) -> None:
        dp = self.switch.datapath
        if dp is not None:  # a frame for a switch that is not there is lost, as on a wire
            self.switch.send(dp, openflow.packet_out(frame.port, frame.data))

    def answer_dhcp(self, answer: AnswerDhcp) -> None:
        to_switch = self.switch.to_switch
        if answer.after_rules and len(to_switch):  # its rules may be among those: it leaves after them
            to_switch.put(functools.partial(self.dhcp_port.send, answer.data))
        else:
            self.dhcp_port.send(answer.data)

    def change_lan_addresses(self, change: LanAddressChange) -> None:
        self.lan_addresses.change(change)  # netlink takes milliseconds: off the packet path, in order

    def tell_authenticator(self, told: AuthenticatorWord) -> None:
        routers_own = (None, self.switch.radio_port)
        if isinstance(told, AuthenticatorKick | AuthenticatorForget) and told.port not in routers_own:
            return  # a station of a satellite's: the satellite carries it out (told in its report's answer)
        self.authenticator.tell(told)

    def publish_wifi_keys(self) -> None:
        threading.Thread(target=self.authenticator.publish_keys, daemon=True).start()  # it takes the lock for the keys

    def resolve_name(self, name: ResolveName) -> None:
        threading.Thread(target=self._resolve, args=(name.domain,), daemon=True).start()

    def _resolve(self, domain: str) -> None:
        for qtype in ("A", "AAAA") if self.ipv6 else ("A",):  # its IPv6 addresses blocked too
            for part in self.resolver.resolve(domain, qtype).in_turns():
                self.resolver.learn(part)

    def tell_household(self, told: TellHousehold) -> None:
        LOG.info("event %s %s: %s", told.kind, told.mac, told.message)
        self.hwdb.write("Events", (told.kind, told.mac, told.message))

    def log_row(self, row: LogRow) -> None:
        self.hwdb.write(row.table, row.row)
