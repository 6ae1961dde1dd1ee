"""The os-ken application: the switch's events in, calls on the I/O edge's parts (`assembly.Edge`) out.

Everything the router decides lives in `router.HomeRouter`; this module only translates the switch's events
(its connection, ports, frames, counters) into calls on the router and on fair serving, which hands the effects
to the edge's sink (`switch.sink.EdgeSink`: FlowMods, PacketOuts, netlink address changes, DNS lookups, log lines).
"""

from __future__ import annotations

import functools
import logging

from os_ken.base import app_manager
from os_ken.controller import ofp_event
from os_ken.controller.handler import CONFIG_DISPATCHER, DEAD_DISPATCHER, MAIN_DISPATCHER, set_ev_cls
from os_ken.ofproto import ofproto_v1_3

from .. import flows
from ..api.ws_service import Ws1Service
from ..concerns.accounting import rule_counters
from ..config import CONFIG
from ..flows import openflow
from ..wire import packets
from ..wire.nd import ETH_IPV6, MalformedNd, RouterAdvert
from ..wire.nd import parse as parse_neighbour_discovery
from . import edge_status, startup
from .assembly import Edge

LOG = logging.getLogger("homework.controller")


class HomeworkController(Ws1Service, app_manager.OSKenApp):
    OFP_VERSIONS = [ofproto_v1_3.OFP_VERSION]
    health = edge_status.health  # ws.v1's, of the edge's switch, sockets and threads
    counters = edge_status.counters

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.edge = edge = Edge()
        self.router, self.lock, self.switch, self.fair = edge.router, edge.lock, edge.switch, edge.fair
        self.radio_settings, self.authenticator = edge.radio_settings, edge.authenticator  # ws.v1's (`Ws1Service`)
        self._apply = self.fair.apply  # how ws.v1's decisions are carried out, in the order decided
        self.switch_ready = False  # the switch connected now holds this controller's rules
        self.packet_ins = 0  # received: DHCP, ARP, neighbour discovery, EAPOL, a newcomer's first frames
        self.stats_parts: list = []  # a flow counters reply's parts so far
        edge.start(self.call)

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
        radio_name = CONFIG.radio_port_name()  # a path lookup: once per (re)connection
        radio = ports.get(radio_name) if radio_name in names else None
        with self.lock:
            self.switch.datapath, self.switch_ready = dp, False
            self.switch.radio_port = radio.port_no if radio is not None else None
            self.fair.held_rules.clear()  # the whole rule set, from the router's state, follows
            for msg in openflow.delete_everything():
                self.switch.send(dp, msg)
            self.fair.apply(self.router.switch_ready(access, local.hw_addr, without_link))
            # Ready once the switch has acted on all of that, not when it is merely queued.
            self.switch.send(dp, dp.ofproto_parser.OFPBarrierRequest(dp))
        LOG.info(
            "switch %016x connected: access ports %s (the radio's: %s), router MAC %s",
            dp.id,
            ", ".join(f"{p.name.decode()} = {p.port_no}" for p in present),
            self.switch.radio_port,
            local.hw_addr,
        )

    @set_ev_cls(ofp_event.EventOFPBarrierReply, MAIN_DISPATCHER)
    def _on_barrier(self, ev):
        if ev.msg.datapath is self.switch.datapath and not self.switch_ready:
            self.switch_ready = True
            LOG.info("switch ready: rules installed")
            startup.ready("switch ready (serving DHCP)")

    @set_ev_cls(ofp_event.EventOFPStateChange, DEAD_DISPATCHER)
    def _on_disconnect(self, ev):
        if ev.datapath is self.switch.datapath:
            LOG.warning("switch disconnected; its rules stay in place (fail-mode secure)")
            self.switch.datapath, self.switch_ready = None, False

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
            self.fair.apply(self.router.access_port_link(desc.port_no, up))

    # ---- packet-ins: parsed outside the lock, queued per device, served round-robin (`fair_serving.py`)

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
                self.fair.queue(frame, lambda _: self.router.on_router_advert(discovery))
            elif discovery is not None:
                self.fair.queue(
                    frame,
                    lambda _: self.router.on_solicitation(in_port, discovery),
                    from_router=in_port == flows.LOCAL,
                    asked=discovery.target,
                )
            return
        self.fair.queue(
            frame, functools.partial(self.router.joining.on_admission_copy, in_port), from_router=in_port == flows.LOCAL
        )

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
            self.fair.apply(effects)
        for part in poll.parts():  # a few hundred connections a hold: DHCP and DNS are served in between
            with self.lock:
                self.fair.apply(events.poll_part(poll, part))
        with self.lock:
            self.fair.apply(events.finish_poll(poll))

    @set_ev_cls(ofp_event.EventOFPFlowRemoved, MAIN_DISPATCHER)
    def _on_flow_removed(self, ev):
        msg = ev.msg
        with self.lock:
            self.fair.apply(
                self.router.flow_events.on_flow_removed(
                    msg.priority, dict(msg.match.items()), msg.packet_count, msg.byte_count
                )
            )
