"""The os-ken application: OpenFlow events in, policy calls, OpenFlow messages out.

Everything the router decides lives in `router.HomeRouter`; this module only
translates switch events into calls and the returned effects into FlowMods,
PacketOuts, netlink address changes, DNS relays and log lines.
"""

from __future__ import annotations

import functools
import gc
import logging
import sys
import threading
from collections.abc import Callable
from typing import assert_never

from os_ken.base import app_manager
from os_ken.controller import ofp_event
from os_ken.controller.controller import Datapath
from os_ken.controller.handler import CONFIG_DISPATCHER, DEAD_DISPATCHER, MAIN_DISPATCHER, set_ev_cls
from os_ken.ofproto import ofproto_v1_3

from .. import flows
from ..api import api
from ..api.server import TimedLock, api_server
from ..api.ws_service import Ws1Service
from ..concerns.accounting import rule_counters
from ..concerns.agent_reports import AgentReport
from ..config import CONFIG
from ..core.router import HomeRouter
from ..effects import (
    AnswerDhcp,
    AuthenticatorDeny,
    AuthenticatorKick,
    EffectSink,
    InstallMeter,
    InstallRules,
    LanAddressChange,
    LogRow,
    ModifyRules,
    RemoveMeter,
    RemoveRules,
    ResolveName,
    RuleChange,
    SendFrame,
    TellHousehold,
)
from ..flows import openflow
from ..radio import radio_settings
from ..store import DeviceStore
from ..wire import packets
from ..wire.nd import ETH_IPV6, MalformedNd, RouterAdvert
from ..wire.nd import parse as parse_neighbour_discovery
from . import dhcp_port, dns_server, edge_status, flow_export, hwdb_feed, lan_side, shaper, slice_link, startup
from .fair_serving import NEWCOMERS, FairServing
from .fairness import FairQueue
from .held import HeldChanges
from .hwdb_log import HwdbLog
from .lan_addresses import LanAddresses
from .outbox import Outbox, call
from .periodic import PeriodicJobs
from .station_events import StationEvents

LOG = logging.getLogger("homework.controller")


# Connection directions merged per hold of the lock: 500 take ~1.5 ms alone, but the lock's longest hold
# under the hostile bench was 2,000 of them (41-51 ms on the loaded 2-CPU machine): every other device waits.
EXPORT_MERGE_CHUNK = 500


class HomeworkController(FairServing, PeriodicJobs, StationEvents, Ws1Service, EffectSink, app_manager.OSKenApp):
    OFP_VERSIONS = [ofproto_v1_3.OFP_VERSION]
    health = edge_status.health  # ws.v1's, of this app's switch, sockets and threads
    counters = edge_status.counters

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        settings = CONFIG.qos_settings()
        self.router = HomeRouter(DeviceStore(CONFIG.db), **CONFIG.router_options())
        self.shapers = {
            way: shaper.Shaper(link)
            for way, link in (("uplink", settings.uplink), ("downlink", settings.downlink))
            if link
        }
        self.hwdb = HwdbLog(CONFIG.hwdb)
        if self.router.store.recovered:
            self.hwdb.write("Events", ("device-database", "", self.router.store.recovered))
        self.datapath: Datapath | None = None
        self.switch_ready = False
        # What devices send the controller (packet-ins, and DHCP from its socket), queued per device.
        # Newcomers share one queue, as long as their meter's burst: what the switch lets through
        # for a household arriving at once is not dropped here.
        self.from_devices = FairQueue(
            per_key_limit=CONFIG.per_device_queue, limits={NEWCOMERS: flows.NEWCOMERS_METER.burst}
        )
        self.from_devices_ready = threading.Event()
        self.dhcp_before_switch = 0
        self.packet_ins = 0  # received: DHCP, ARP, neighbour discovery, EAPOL, a newcomer's first frames
        self.held_rules = HeldChanges()  # rule and meter changes waiting behind DHCP answers
        # What goes to the switch, handed to os-ken in the order decided by a thread of its own (`outbox.py`);
        # an answer that must follow its rules is handed to the DHCP socket from there (`answer_dhcp`).
        self.to_switch: Outbox[Callable[[], object]] = Outbox(call, "to-switch")
        self.radio_settings = radio_settings.RadioSettingsFile(CONFIG.radio_settings)
        self.lan_addresses = LanAddresses(CONFIG.lan_iface, ipv6=self.router.ipv6.enabled)
        self.stats_parts: list = []
        # os-ken's default (native) hub runs its handlers on OS threads, so this app
        # uses plain threads too (hub.Event can miss a wake-up between its check and
        # its wait); one lock serialises every call into the router core and its effects.
        self.lock = TimedLock()
        self.authenticator = self.start_station_events()  # before anything that may tell it of a device
        self._start_thread(self._serve_from_devices)
        self.dhcp_port = dhcp_port.DhcpPort(CONFIG.lan_iface)
        self.dhcp_port.start(self._on_dhcp)
        # The switch's own per-connection records (IPFIX), exported to the collector once it listens.
        self.flow_export = flow_export.Collector(
            self._on_exported, port=CONFIG.flow_export_port, on_restart=self._export_flows
        ).start()
        self.start_periodic_jobs()
        self._start_thread(self.lan_addresses.run_forever)
        self.app_feed = (
            hwdb_feed.AppFeed(CONFIG.hwdb, self._on_priorities, self._on_agent_reports) if CONFIG.hwdb else None
        )
        if self.app_feed is not None:
            self.app_feed.start()
        self.slice_link = None
        if CONFIG.slice_host:
            tls = (
                None
                if CONFIG.slice_plain_tcp
                else slice_link.tls_context(CONFIG.slice_cert, CONFIG.slice_key, CONFIG.slice_ca)
            )
            self.slice_link = slice_link.SliceLink(
                CONFIG.slice_host,
                CONFIG.slice_port,
                self._learnt_connections,
                CONFIG.public_addresses,
                tls,
                ahead=self._slice_ahead,
                delegated=self._delegated_prefix,
            ).start()
        self.api_server = api_server(CONFIG.api_host, CONFIG.api_port, api.make_app(self.call))
        self._start_thread(self.api_server.serve_forever)
        LOG.info("ws.v1 API on http://%s:%d/ws.v1/", CONFIG.api_host, CONFIG.api_port)
        # On the LAN interface only (the redirect delivers there whatever address a device asked):
        # nothing from the WAN side reaches it.
        self.dns = dns_server.DnsServer(
            ("0.0.0.0", CONFIG.dns_port),
            (CONFIG.upstream_dns, 53),
            self._dns_verdict,
            self._dns_learn,
            interface=CONFIG.lan_iface,
            rebind_allowed=CONFIG.rebind_allow,
            # Over IPv6 on each device's /64's ::1 (its adverts name its ULA one), and whatever a query
            # was sent to: the redirect covers IPv6 too.
            listen6=("::", CONFIG.dns_port) if self.router.ipv6.enabled else None,
        )
        lan_side.redirect_lan_dns(CONFIG.lan_iface, CONFIG.dns_port)
        lan_side.open_lan_side(CONFIG.lan_iface)
        self.dns.start()
        LOG.info(
            "resolver on %s port %d (LAN DNS redirected here), upstream %s",
            CONFIG.lan_iface,
            CONFIG.dns_port,
            CONFIG.upstream_dns,
        )
        # What start-up made (os-ken, the app table, the devices on the disk) lives as long as the controller:
        # out of the cyclic collector's sight, a full collection (which may come at any allocation, under the
        # lock too) scans only what came since. A poll of 3,000 flows' longest hold: 64 -> 12 ms.
        gc.collect()
        gc.freeze()
        startup.phase("services started")

    @staticmethod
    def _start_thread(target, *args):
        threading.Thread(target=target, args=args, daemon=True).start()

    # ---- switch lifecycle

    @set_ev_cls(ofp_event.EventOFPSwitchFeatures, CONFIG_DISPATCHER)
    def _on_features(self, ev):
        dp = ev.msg.datapath
        parser, ofp = dp.ofproto_parser, dp.ofproto
        dp.send_msg(parser.OFPSetConfig(dp, ofp.OFPC_FRAG_NORMAL, ofp.OFPCML_NO_BUFFER))
        dp.send_msg(parser.OFPPortDescStatsRequest(dp, 0))

    @set_ev_cls(ofp_event.EventOFPPortDescStatsReply, MAIN_DISPATCHER)
    def _on_port_desc(self, ev):
        dp = ev.msg.datapath
        ports = {p.name.decode(): p for p in ev.msg.body}
        names = CONFIG.access_port_names()
        present = [ports[n] for n in names if n in ports]
        if len(present) < len(names):
            # One not there yet (a radio still coming up, a cable not plugged in) is added when the
            # bridge says so (port status); none at all is an error.
            (LOG.warning if present else LOG.error)(
                "bridge has no port %s (ports: %s)", [n for n in names if n not in ports], sorted(ports)
            )
        if not present:
            return
        access = tuple(p.port_no for p in present)
        without_link = frozenset(p.port_no for p in present if p.state & dp.ofproto.OFPPS_LINK_DOWN)
        local = next(p for p in ev.msg.body if p.port_no == dp.ofproto.OFPP_LOCAL)
        with self.lock:
            self.datapath, self.switch_ready = dp, False
            self.held_rules.clear()  # the whole rule set, from the router's state, follows
            for msg in openflow.delete_everything():
                self._send(dp, msg)
            self._apply(self.router.switch_ready(access, local.hw_addr, without_link))
            # Ready once the switch has acted on all of that, not when it is merely queued.
            self._send(dp, dp.ofproto_parser.OFPBarrierRequest(dp))
        LOG.info(
            "switch %016x connected: access ports %s, router MAC %s",
            dp.id,
            ", ".join(f"{p.name.decode()} = {p.port_no}" for p in present),
            local.hw_addr,
        )

    @set_ev_cls(ofp_event.EventOFPBarrierReply, MAIN_DISPATCHER)
    def _on_barrier(self, ev):
        if ev.msg.datapath is self.datapath and not self.switch_ready:
            self.switch_ready = True
            LOG.info("switch ready: rules installed")
            startup.ready("switch ready (serving DHCP)")

    @set_ev_cls(ofp_event.EventOFPStateChange, DEAD_DISPATCHER)
    def _on_disconnect(self, ev):
        if ev.datapath is self.datapath:
            LOG.warning("switch disconnected; its rules stay in place (fail-mode secure)")
            self.datapath, self.switch_ready = None, False

    @set_ev_cls(ofp_event.EventOFPPortStatus, MAIN_DISPATCHER)
    def _on_port_status(self, ev):
        desc, dp = ev.msg.desc, ev.msg.datapath
        if desc.name.decode() not in CONFIG.access_port_names():
            return
        if ev.msg.reason == dp.ofproto.OFPPR_ADD:
            # An access port coming (back) may have a new number: rebuild everything.
            dp.send_msg(dp.ofproto_parser.OFPPortDescStatsRequest(dp, 0))
            return
        up = ev.msg.reason != dp.ofproto.OFPPR_DELETE and not desc.state & dp.ofproto.OFPPS_LINK_DOWN
        with self.lock:
            self._apply(self.router.access_port_link(desc.port_no, up))

    # ---- packet-ins and DHCP: parsed outside the lock, queued per device, served round-robin

    @set_ev_cls(ofp_event.EventOFPPacketIn, MAIN_DISPATCHER)
    def _on_packet_in(self, ev):
        msg = ev.msg
        self.packet_ins += 1
        try:
            frame = packets.parse(msg.data)
        except packets.MalformedFrame as exc:
            self.router.counters["frames_malformed"] += 1
            LOG.debug("dropped malformed frame: %s", exc)
            return
        in_port = msg.match["in_port"]
        if in_port == msg.datapath.ofproto.OFPP_LOCAL:
            in_port = flows.LOCAL
        if frame.ethertype == ETH_IPV6:
            try:
                discovery = parse_neighbour_discovery(msg.data)
            except MalformedNd as exc:
                self.router.counters["frames_malformed"] += 1
                LOG.debug("dropped malformed neighbour discovery: %s", exc)
                return
            if isinstance(discovery, RouterAdvert):
                self._queue(frame, lambda _: self.router.on_router_advert(discovery))
            elif discovery is not None:
                self._queue(
                    frame,
                    lambda _: self.router.on_solicitation(in_port, discovery),
                    from_router=in_port == flows.LOCAL,
                    asked=discovery.target,
                )
            return
        self._queue(
            frame, functools.partial(self.router.joining.on_admission_copy, in_port), from_router=in_port == flows.LOCAL
        )

    def _on_dhcp(self, frame: packets.Frame) -> None:
        """A client's DHCP frame from the LAN interface (dhcp_port)."""
        if self.datapath is None:
            # Rules a restarted controller finds in the switch still send DHCP here; answers wait
            # until it knows the switch (and the router's MAC), which the client's retry finds.
            self.dhcp_before_switch += 1
            return
        self._queue(frame, self.router.joining.on_dhcp, answers_first=True)

    # ---- flow accounting

    @set_ev_cls(ofp_event.EventOFPFlowStatsReply, MAIN_DISPATCHER)
    def _on_flow_stats(self, ev):
        # Replies come in parts; the router compares each part with the last poll.
        self.stats_parts.extend((s.priority, dict(s.match.items()), s.packet_count, s.byte_count) for s in ev.msg.body)
        if ev.msg.flags & ev.msg.datapath.ofproto.OFPMPF_REPLY_MORE:
            return
        counted = rule_counters(self.stats_parts)  # thousands of matches parsed before the lock is taken
        self.stats_parts = []
        events = self.router.flow_events
        with self.lock:
            poll, effects = events.start_poll(counted)
            self._apply(effects)
        for part in poll.parts():  # a few hundred connections a hold: DHCP and DNS are served in between
            with self.lock:
                self._apply(events.poll_part(poll, part))
        with self.lock:
            self._apply(events.finish_poll(poll))

    def _on_exported(self, totals: dict[flows.FiveTuple, list[int]]) -> None:
        """The collector's thread: a second's records, summed per connection direction in the collector's
        process, merged under the lock a few thousand at a time (a flood's second is about 6,000)."""
        items = list(totals.items())
        for start in range(0, len(items), EXPORT_MERGE_CHUNK):
            with self.lock:
                self.router.flow_events.on_flow_export(dict(items[start : start + EXPORT_MERGE_CHUNK]))

    @set_ev_cls(ofp_event.EventOFPFlowRemoved, MAIN_DISPATCHER)
    def _on_flow_removed(self, ev):
        msg = ev.msg
        with self.lock:
            self._apply(
                self.router.flow_events.on_flow_removed(
                    msg.priority, dict(msg.match.items()), msg.packet_count, msg.byte_count
                )
            )

    # ---- DNS (the resolver's threads call in here)

    # The resolver parses queries and answers before calling in: only decisions run under the lock.

    def _dns_verdict(self, client_ip: str, query):
        with self.lock:
            return self.router.dns_query(client_ip, query)

    def _dns_learn(self, learnt, client_ip: str | None = None):
        with self.lock:
            self._apply(self.router.dns_answer(learnt, client_ip), at_once=True)

    def _resolve(self, domain: str):
        for qtype in ("A", "AAAA") if self.router.ipv6.enabled else ("A",):  # its IPv6 addresses blocked too
            for part in self.dns.resolve(domain, qtype).in_turns():
                self._dns_learn(part)

    # ---- application priorities (the feed's thread parses; only the decision runs under the lock)

    def _on_priorities(self, priorities: dict[str, str]) -> None:
        with self.lock:
            self._apply(self.router.set_app_priorities(priorities))

    def _on_agent_reports(self, reports: list[AgentReport]) -> None:
        for part in hwdb_feed.in_turns(reports):
            with self.lock:
                self._apply(self.router.flow_events.agent_reported(part))

    def _learnt_connections(self) -> list:
        """The slice link's snapshot: taken under the lock, turned into rules and sent outside it."""
        with self.lock:
            return self.router.learnt_connections()

    def _slice_ahead(self) -> list:
        """What the slice marks ahead (ports, named addresses), taken under the lock like the snapshot."""
        with self.lock:
            return self.router.priorities.ahead.slice_ahead()

    def _delegated_prefix(self):
        """The prefix the ISP delegated now (the slice's IPv6 rules name it), or None (no IPv6, or none yet)."""
        with self.lock:
            prefix, _ = self.router.ipv6.delegation()
            return prefix

    # ---- effects (`EffectSink.carry_out` says which method each kind goes to)

    def change_rules(self, change: RuleChange) -> None:
        self.send_encoded(self.encode_rules(change))

    def encode_rules(self, change: RuleChange) -> tuple[Datapath | None, bytes]:
        """The change's OpenFlow messages for the switch connected now, serialised as `send_msg` would and joined
        (pure: `FairServing` runs it off the lock), and that switch (None: none is connected)."""
        dp = self.datapath
        if dp is None:
            return None, b""  # the switch gets the whole rule set from the router's state when it reconnects
        match change:
            case InstallRules():
                msgs = [openflow.flow_mod(r) for r in change.rules]
            case ModifyRules():
                msgs = [openflow.flow_mod(r, ofproto_v1_3.OFPFC_MODIFY_STRICT) for r in change.rules]
            case RemoveRules():
                msgs = [openflow.delete_cookie(change.cookie)]
            case InstallMeter():
                msgs = [openflow.add_meter(change.band)]
            case RemoveMeter():
                msgs = [openflow.delete_meter(change.meter_id)]
            case _:
                assert_never(change)
        for msg in msgs:
            msg.datapath = dp
            dp.set_xid(msg)
            msg.serialize()
        return dp, b"".join(msg.buf for msg in msgs)

    def send_encoded(self, encoded: tuple[Datapath | None, bytes]) -> None:
        """Send a change's encoded messages to their switch (`to_switch`), if it is still the one connected then
        (else its successor gets the whole rule set). One buffer for them all: os-ken's send queue holds 16 and
        a sender blocks on it until os-ken's thread has written the oldest out."""
        dp, data = encoded
        if dp is not None and data:
            self.to_switch.put(functools.partial(self._hand_to_os_ken, dp, data))

    def _hand_to_os_ken(self, dp: Datapath, data: bytes) -> None:
        if dp is self.datapath:
            dp.send(data)

    def switch_room(self) -> int:
        """How many buffers os-ken's send queue to the switch takes now before a sender waits for its thread to
        write (to a switch that reads them slowly), less those still on their way to it; none connected: any
        number (they are dropped)."""
        dp = self.datapath
        queue = dp.send_q if dp is not None else None
        return queue.maxsize - queue.qsize() - len(self.to_switch) if queue is not None else sys.maxsize

    def send_frame(self, frame: SendFrame) -> None:
        if self.datapath is not None:  # a frame for a switch that is not there is lost, as on a wire
            self._send(self.datapath, openflow.packet_out(frame.port, frame.data))

    def answer_dhcp(self, answer: AnswerDhcp) -> None:
        if answer.after_rules and len(self.to_switch):  # its rules may be among those: it leaves after them
            self.to_switch.put(functools.partial(self.dhcp_port.send, answer.data))
        else:
            self.dhcp_port.send(answer.data)

    def change_lan_addresses(self, change: LanAddressChange) -> None:
        self.lan_addresses.change(change)  # netlink takes milliseconds: off the packet path, in order

    def tell_authenticator(self, told: AuthenticatorDeny | AuthenticatorKick) -> None:
        self.authenticator.tell(told)

    def publish_wifi_keys(self) -> None:
        self._start_thread(self.authenticator.publish_keys)  # it takes the lock for the keys

    def resolve_name(self, name: ResolveName) -> None:
        self._start_thread(self._resolve, name.domain)

    def tell_household(self, told: TellHousehold) -> None:
        LOG.info("event %s %s: %s", told.kind, told.mac, told.message)
        self.hwdb.write("Events", (told.kind, told.mac, told.message))

    def log_row(self, row: LogRow) -> None:
        self.hwdb.write(row.table, row.row)

    def _send(self, dp, msg) -> None:
        """A message to the switch, serialised here (os-ken's `send_msg` without the send) and sent in order."""
        msg.datapath = dp
        if msg.xid is None:
            dp.set_xid(msg)
        msg.serialize()
        self.send_encoded((dp, msg.buf))
