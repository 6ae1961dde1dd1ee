"""The I/O edge's parts, made in the order each needs the others (`Edge`) and started in the order the controller
starts its services (`Edge.start`): the router and its lock, the switch's connection, the sink its effects go to,
fair serving, station events, periodic jobs, the sockets (DHCP, the resolver, ws.v1's), netlink, tc, hwdb, the
slicer's link and the flow collector. The os-ken app makes one and translates the switch's events into calls on it.
"""

from __future__ import annotations

import gc
import logging
import threading
from collections.abc import Callable

from ..api import api
from ..api.server import TimedLock, api_server
from ..config import CONFIG
from ..core.router import HomeRouter
from ..radio import radio_settings
from ..store import DeviceStore
from . import startup
from .feeds import flow_export, hwdb_feed, slice_link
from .feeds.hwdb_log import HwdbLog
from .lan import dhcp_port, dns_server, lan_side, shaper
from .lan.lan_addresses import LanAddresses
from .switch import station_events
from .switch.fair_serving import FairServer
from .switch.periodic import PeriodicJobs
from .switch.service_calls import ServiceCalls
from .switch.sink import EdgeSink
from .switch.station_events import StationEvents
from .switch.switch_connection import SwitchConnection

LOG = logging.getLogger("homework.controller")


def start_thread(target: Callable[[], object]) -> None:
    threading.Thread(target=target, daemon=True).start()


class Edge:
    def __init__(self) -> None:
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
        self.switch = SwitchConnection()
        self.radio_settings = radio_settings.RadioSettingsFile(CONFIG.radio_settings)
        self.lan_addresses = LanAddresses(CONFIG.lan_iface, ipv6=self.router.ipv6.enabled)
        # os-ken's default (native) hub runs its handlers on OS threads, so the controller
        # uses plain threads too (hub.Event can miss a wake-up between its check and
        # its wait); one lock serialises every call into the router core and its effects.
        self.lock = TimedLock()
        self.authenticator = station_events.authenticator(self.router, self.lock, CONFIG)
        self.dhcp_port = dhcp_port.DhcpPort(CONFIG.lan_iface)
        self.sink = EdgeSink(
            self.switch,
            self.dhcp_port,
            self.lan_addresses,
            self.authenticator,
            self.hwdb,
            ipv6=self.router.ipv6.enabled,
        )
        self.fair = FairServer(
            self.router, self.lock, self.switch, self.sink.carry_out, per_device_queue=CONFIG.per_device_queue
        )
        apply = self.fair.apply
        self.station_events = StationEvents(self.router, self.lock, apply, self.authenticator, self.switch, CONFIG)
        self.periodic = PeriodicJobs(self.router, self.lock, apply, self.switch, self.hwdb, self.shapers, CONFIG)
        calls = ServiceCalls(self.router, self.lock, apply)
        # The switch's own per-connection records (IPFIX), exported to the collector once it listens.
        self.flow_export = flow_export.Collector(
            calls.on_exported, port=CONFIG.flow_export_port, on_restart=self.periodic.export_flows
        )
        self.app_feed = (
            hwdb_feed.AppFeed(CONFIG.hwdb, calls.on_priorities, calls.on_agent_reports) if CONFIG.hwdb else None
        )
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
                calls.learnt_connections,
                CONFIG.public_addresses,
                tls,
                ahead=calls.slice_ahead,
                delegated=calls.delegated_prefix,
            )
        # On the LAN interface only (the redirect delivers there whatever address a device asked):
        # nothing from the WAN side reaches it.
        self.dns = dns_server.DnsServer(
            ("0.0.0.0", CONFIG.dns_port),
            (CONFIG.upstream_dns, 53),
            calls.dns_verdict,
            calls.dns_learn,
            interface=CONFIG.lan_iface,
            rebind_allowed=CONFIG.rebind_allow,
            # Over IPv6 on each device's /64's ::1 (its adverts name its ULA one), and whatever a query
            # was sent to: the redirect covers IPv6 too.
            listen6=("::", CONFIG.dns_port) if self.router.ipv6.enabled else None,
        )
        self.sink.resolver = self.dns

    def start(self, ws_v1: Callable) -> None:
        """Every service's threads, in order; ws_v1: what ws.v1's server calls (`Ws1Service.call`)."""
        self.station_events.start()  # before anything that may tell the authenticator of a device
        start_thread(self.fair.serve_from_devices)
        self.dhcp_port.start(self.fair.on_dhcp)
        self.flow_export.start()
        self.periodic.start()
        start_thread(self.lan_addresses.run_forever)
        if self.app_feed is not None:
            self.app_feed.start()
        if self.slice_link is not None:
            self.slice_link.start()
        start_thread(api_server(CONFIG.api_host, CONFIG.api_port, api.make_app(ws_v1)).serve_forever)
        LOG.info("ws.v1 API on http://%s:%d/ws.v1/", CONFIG.api_host, CONFIG.api_port)
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
