"""Controller settings, filled in by __main__ from the command line before the app starts.

os-ken instantiates apps itself, so the app reads this module-level object.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

from .edge.lan.ipv6_files import load_or_make_ula, read_delegated
from .policy import apps, dhcp, qos
from .wire.prefixes import PrefixPlan, parse_delegated


@dataclass
class Config:
    db: str = "/var/lib/homework/controller.sqlite"
    wlan_port: str = "wlan0"  # the OVS port of the wireless interface
    # Every OVS port where devices are (the radio's, wired LAN ports, an extra access point's); empty: wlan_port
    access_ports: tuple[str, ...] = ()
    lan_iface: str = "br-lan"  # the router's LAN interface, holding each /30's gateway
    upstream_dns: str = "127.0.0.53"
    api_host: str = "127.0.0.1"
    api_port: int = 8081
    of_host: str = "127.0.0.1"
    of_port: int = 6653
    pending_lease: int = 30
    permitted_lease: int = 3600
    per_device_queue: int = 64
    tick_seconds: float = 2.0
    hwdb: str = ""  # host:port of hwdb; empty: log nothing
    dns_port: int = 5354  # where the router's stack redirects the LAN's DNS
    stats_interval: float = 5.0  # seconds between flow statistics polls (Flows rows)
    flow_budget: int = 200  # learnt flows per device before it is counted as a whole
    max_pending: int = 256  # devices waiting for a decision; beyond, the silent longest makes way
    hostapd_ctrl: str = ""  # hostapd's control socket (DIR/IFACE): blacklisted MACs go on its deny list
    wifi_ssid: str = ""  # the radio's network name, for the QR code that joins with a device's passphrase
    wifi_psk_file: str = ""  # hostapd's wpa_psk_file: devices' own passphrases (written atomically)
    hostapd_conf: str = ""  # the configuration hostapd runs with: whose SAE password each MAC is bound to
    radio_settings: str = ""  # the router's own radio's settings file (ws.v1 radio-settings); empty: no radio
    stations: str = ""  # where link quality comes from: iw:wlan0 or file:PATH (emulated radio)
    rebind_allow: tuple[str, ...] = ()  # domains whose names may answer with private addresses (rebind protection)
    ipv6: bool = True  # a /64 per device (ULA always; global from ipv6_prefix), unicast router adverts
    ipv6_prefix: str = ""  # the prefix the ISP delegated (/48../64); empty: none known, devices are ULA-only
    apps_file: str = ""  # the app table (apps.toml form); empty: the one shipped with the package
    upstream_iface: str = ""  # shaped towards the internet (egress), with uplink_kbit; empty: not shaped
    uplink_kbit: int = 0
    downlink_iface: str = ""  # shaped towards the devices (egress of the wireless port), with downlink_kbit
    downlink_kbit: int = 0
    shaper_percent: float = 90.0  # the shaper's rate, in percent of the line rate
    high_share: float = 0.3  # the High class's cap, a share of the shaped rate
    high_device_share: float = 0.2  # one device's High traffic at most, a share of the shaped rate
    slice_host: str = ""  # the ISP's slicer (isp-flowvisor) for downlink priorities; empty: none
    slice_port: int = 0
    slice_cert: str = ""  # the household's client certificate and key, and the ISP's CA (TLS)
    slice_key: str = ""
    slice_ca: str = ""
    slice_plain_tcp: bool = False  # tests only: no TLS
    public_addresses: tuple[str, ...] = ()  # the household's address(es) as the ISP sees them (after NAT)
    # Loopback UDP port where the switch's IPFIX records arrive: Flows rows, and the apps judged by their
    # rates, come from them
    flow_export_port: int = 4739

    def access_port_names(self) -> tuple[str, ...]:
        return self.access_ports or (self.wlan_port,)

    def radio_port_name(self) -> str:
        """The interface hostapd serves, as its control socket is named ("" without one). On a router with a
        radio the socket the services use is a link under the bridge's name to the radio's (`wlan0`); in the
        emulated home hostapd serves the bridge itself (802.1X), which is no access port."""
        return os.path.basename(os.path.realpath(self.hostapd_ctrl)) if self.hostapd_ctrl else ""

    def qos_settings(self) -> qos.QosSettings:
        """The shaping options; a link without an interface and a rate is not shaped."""

        def link(iface: str, kbit: int) -> qos.LinkShape | None:
            return qos.LinkShape(iface, kbit, self.shaper_percent, self.high_share) if iface and kbit else None

        return qos.QosSettings(
            link(self.upstream_iface, self.uplink_kbit),
            link(self.downlink_iface, self.downlink_kbit),
            self.high_device_share,
        )

    def ipv6_plan(self) -> PrefixPlan | None:
        """The home's IPv6 prefixes: its ULA /48 (made once, beside the database) and what the ISP delegated
        (--ipv6-prefix, or the file its prefix-delegation client keeps beside the database)."""
        if not self.ipv6:
            return None
        data = os.path.dirname(os.path.abspath(self.db))
        ula = load_or_make_ula(data)
        if self.ipv6_prefix:
            return PrefixPlan(ula, parse_delegated(self.ipv6_prefix))
        delegation = read_delegated(data)
        return PrefixPlan(ula, delegation.prefix, delegation.until) if delegation else PrefixPlan(ula)

    def router_options(self) -> dict:
        """The router core's arguments (`HomeRouter`'s, beside its store) these settings give; the tests
        compare their fixtures' with those of deploy/services.toml's command line (test_shipped_config)."""
        return {
            "lease_policy": dhcp.LeasePolicy(self.pending_lease, self.permitted_lease),
            "flow_budget": self.flow_budget,
            "max_pending": self.max_pending,
            "app_table": apps.load_table(self.apps_file or None),
            "qos_settings": self.qos_settings(),
            "wifi_ssid": self.wifi_ssid,
            "ipv6_plan": self.ipv6_plan(),
        }


CONFIG = Config()
