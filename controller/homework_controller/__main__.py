"""Start the Homework controller: python -m homework_controller --help."""

from __future__ import annotations

import argparse
import ipaddress
import sys

from .config import CONFIG, Config
from .edge import startup
from .edge.feeds import log_writer
from .policy import dns_rules


def _delegated_prefix(text: str) -> str:
    from .wire.prefixes import BadPrefix, parse_delegated

    try:
        parse_delegated(text)
    except BadPrefix as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None
    return text


def parse_args(argv):
    p = argparse.ArgumentParser(prog="homework_controller", description=__doc__)
    p.add_argument("--db", default=CONFIG.db, help="SQLite file for device decisions (default %(default)s)")
    p.add_argument("--wlan-port", default=CONFIG.wlan_port, help="OVS port name of the wireless interface")
    p.add_argument(
        "--access-ports",
        default="",
        metavar="PORT,PORT",
        help="OVS port names where devices are, comma-separated (the radio's, wired LAN ports): each "
        "behaves like the air, and a device is bound to the one it took its lease on "
        "(default: --wlan-port alone)",
    )
    p.add_argument("--lan-iface", default=CONFIG.lan_iface, help="interface that holds the gateway addresses")
    p.add_argument("--upstream-dns", default=CONFIG.upstream_dns, help="resolver the router relays DNS to")
    p.add_argument("--api-port", type=int, default=CONFIG.api_port, help="ws.v1 port on loopback")
    p.add_argument("--of-port", type=int, default=CONFIG.of_port, help="OpenFlow listen port on loopback")
    p.add_argument("--pending-lease", type=int, default=CONFIG.pending_lease)
    p.add_argument("--permitted-lease", type=int, default=CONFIG.permitted_lease)
    p.add_argument("--hwdb", default=CONFIG.hwdb, help="hwdb address HOST:PORT to log to (default: none)")
    p.add_argument("--dns-port", type=int, default=CONFIG.dns_port, help="local port of the router's resolver")
    p.add_argument(
        "--ipv6-prefix",
        type=_delegated_prefix,
        default=CONFIG.ipv6_prefix,
        help="the IPv6 prefix the ISP delegated (/48 to /64): devices get global /64s of it (default: none, ULA only)",
    )
    p.add_argument("--no-ipv6", action="store_true", help="no IPv6 for devices (no adverts, no /64s)")
    p.add_argument(
        "--stats-interval", type=float, default=CONFIG.stats_interval, help="seconds between flow statistics polls"
    )
    p.add_argument(
        "--flow-budget",
        type=int,
        default=CONFIG.flow_budget,
        help="flows counted one by one per device before it is counted as a whole",
    )
    p.add_argument(
        "--max-pending", type=int, default=CONFIG.max_pending, help="devices that may wait for a decision at once"
    )
    p.add_argument(
        "--stations",
        default=CONFIG.stations,
        help="link quality source for Links: nl80211:wlan0 on a router (iw:wlan0 runs iw instead), "
        "file:PATH from an emulated radio",
    )
    p.add_argument(
        "--hostapd-ctrl",
        default=CONFIG.hostapd_ctrl,
        help="hostapd control socket, e.g. /run/hostapd/wlan0: blacklisted devices go on its deny list",
    )
    p.add_argument(
        "--wifi-ssid",
        default=CONFIG.wifi_ssid,
        help="the Wi-Fi network's name (SSID), for the QR code of a device's own passphrase",
    )
    p.add_argument(
        "--wifi-psk-file",
        default=CONFIG.wifi_psk_file,
        help="hostapd's wpa_psk_file, where devices' own passphrases go (its other lines are kept); "
        "hostapd is told to reload it through --hostapd-ctrl",
    )
    p.add_argument(
        "--hostapd-conf",
        default=CONFIG.hostapd_conf,
        help="the configuration hostapd runs with: a WPA3 (SAE) join, for which hostapd names no key, "
        "used the device's own password when this binds the station's MAC to it",
    )
    p.add_argument(
        "--radio-settings",
        default=CONFIG.radio_settings,
        metavar="PATH",
        help="the router's own radio's settings (key=value lines: ssid, passphrase, country, band, channel), "
        "which ws.v1 reads and the household changes; whoever serves the radio follows the file (the image "
        "makes it when it first serves a radio; until then, and without this, ws.v1 answers 501)",
    )
    p.add_argument(
        "--rebind-allow",
        action="append",
        default=[],
        metavar="DOMAIN",
        help="names under DOMAIN may answer with private addresses (a household's own local "
        "names); any other name that does is refused (rebind protection); repeatable",
    )
    p.add_argument(
        "--apps",
        default=CONFIG.apps_file,
        metavar="FILE",
        help="the table of apps, their DNS names, ports and default priorities (apps.toml's form; "
        "default: the one shipped with the controller)",
    )
    p.add_argument(
        "--upstream-iface",
        default=CONFIG.upstream_iface,
        help="interface towards the internet to shape (with --uplink-kbit); default: no shaping",
    )
    p.add_argument("--uplink-kbit", type=int, default=CONFIG.uplink_kbit, help="the uplink's line rate, kbit/s")
    p.add_argument(
        "--downlink-iface",
        default=CONFIG.downlink_iface,
        help="interface towards the devices to shape (the wireless port; with --downlink-kbit)",
    )
    p.add_argument("--downlink-kbit", type=int, default=CONFIG.downlink_kbit, help="the downlink's line rate, kbit/s")
    p.add_argument(
        "--shaper-percent",
        type=float,
        default=CONFIG.shaper_percent,
        help="shape at this percentage of the line rate (default %(default)s; SQM advises 85-95)",
    )
    p.add_argument(
        "--high-share",
        type=float,
        default=CONFIG.high_share,
        help="the High class's cap, a share of the shaped rate (default %(default)s)",
    )
    p.add_argument(
        "--high-device-share",
        type=float,
        default=CONFIG.high_device_share,
        help="what one device's High traffic may use, a share of the shaped rate; beyond, its High "
        "flows are demoted to Medium for a minute (default %(default)s)",
    )
    p.add_argument(
        "--slice",
        default="",
        metavar="HOST:PORT",
        help="the ISP's slicer (isp-flowvisor): the downlink of High and Medium flows goes into the "
        "household's queues there (default: no slice)",
    )
    p.add_argument("--slice-cert", default=CONFIG.slice_cert, help="the household's client certificate (PEM)")
    p.add_argument("--slice-key", default=CONFIG.slice_key, help="its private key (PEM)")
    p.add_argument("--slice-ca", default=CONFIG.slice_ca, help="the ISP's CA, which signs the slicer's certificate")
    p.add_argument("--slice-plain-tcp", action="store_true", help="tests only: talk to the slicer without TLS")
    p.add_argument(
        "--public-address",
        action="append",
        default=[],
        metavar="IPV4",
        help="the household's public address, as the ISP sees it after the router's NAT (repeatable)",
    )
    p.add_argument(
        "--flow-export-port",
        type=int,
        default=CONFIG.flow_export_port,
        help="loopback UDP port where OVS's IPFIX export of the LAN bridge arrives: Flows rows come from the "
        "switch's own records (default %(default)s)",
    )
    p.add_argument("--log-level", default="INFO")
    args = p.parse_args(argv)
    try:
        ipaddress.IPv4Address(args.upstream_dns)
    except ValueError:
        p.error(f"--upstream-dns must be an IPv4 address, not {args.upstream_dns!r}")
    try:
        args.rebind_allow = tuple(dns_rules.normalize_domain(d) for d in args.rebind_allow)
    except dns_rules.BadDomain as exc:
        p.error(f"--rebind-allow: {exc}")
    if len(args.wifi_ssid.encode()) > 32 or "\n" in args.wifi_ssid:
        p.error("--wifi-ssid is at most 32 bytes on one line")
    args.access_ports = tuple(dict.fromkeys(n.strip() for n in args.access_ports.split(",") if n.strip()))
    if any(len(n) > 15 or not n.isprintable() or " " in n for n in args.access_ports):
        p.error(f"--access-ports takes interface names separated by commas, not {','.join(args.access_ports)!r}")
    if args.stats_interval < 0.5:
        p.error("--stats-interval below 0.5 s would keep the switch busy answering")
    if args.flow_export_port == 0:
        p.error(
            "--flow-export-port 0: the router counts connections from the switch's own records (IPFIX flow "
            "export), and a switch that exports none is not supported"
        )
    for port in (args.api_port, args.of_port, args.dns_port, args.flow_export_port):
        if not 0 < port < 65536:
            p.error(f"port {port} out of range")
    for iface, kbit, name in (
        (args.upstream_iface, args.uplink_kbit, "uplink"),
        (args.downlink_iface, args.downlink_kbit, "downlink"),
    ):
        if kbit and not iface:  # (an interface with rate 0 is not shaped: a deployment may always name it)
            p.error(f"--{name}-kbit needs the interface to shape")
        if kbit < 0:
            p.error(f"--{name}-kbit must be positive (0: not shaped)")
    if not 10 <= args.shaper_percent <= 100:
        p.error("--shaper-percent must be between 10 and 100")
    if not 0 < args.high_device_share <= args.high_share <= 0.9:
        p.error("need 0 < --high-device-share <= --high-share <= 0.9 (High must leave room for the rest)")
    if args.apps:
        from .policy import apps

        try:
            apps.load_table(args.apps)
        except (OSError, apps.BadAppTable) as exc:
            p.error(f"--apps {args.apps}: {exc}")
    # Empty values are "none" (deploy/services.toml fills every setting in, empty when unused).
    args.public_address = [a for a in args.public_address if a]
    if args.slice:
        _check_slice(p, args)
    elif args.public_address:
        p.error("--public-address is for --slice")
    if min(args.pending_lease, args.permitted_lease) < 10:
        p.error("leases shorter than 10 seconds make clients renew constantly")
    return args


def _check_slice(p, args) -> None:
    host, _, port = args.slice.rpartition(":")
    if not host or not port.isdigit() or not 0 < int(port) < 65536:
        p.error(f"--slice takes HOST:PORT, not {args.slice!r}")
    args.slice_host, args.slice_port = host.strip("[]"), int(port)
    if not args.public_address:
        p.error("--slice needs the household's --public-address (the slice's rules match traffic to it)")
    try:
        args.public_address = tuple(str(ipaddress.IPv4Address(a)) for a in args.public_address)
    except ValueError as exc:
        p.error(f"--public-address: {exc}")
    if args.slice_plain_tcp:
        return
    if not (args.slice_cert and args.slice_key and args.slice_ca):
        p.error("--slice needs --slice-cert, --slice-key and --slice-ca (or --slice-plain-tcp, for tests)")
    from .edge.feeds import slice_link

    try:
        slice_link.tls_context(args.slice_cert, args.slice_key, args.slice_ca)
    except (OSError, ValueError) as exc:  # ssl.SSLError is an OSError
        p.error(f"--slice-cert/--slice-key/--slice-ca: {exc}")


def configure(args, config: Config = CONFIG) -> None:
    """The command line's settings into config (the app reads CONFIG; os-ken makes the app itself)."""
    config.db, config.wlan_port, config.lan_iface = args.db, args.wlan_port, args.lan_iface
    config.access_ports = args.access_ports
    config.upstream_dns, config.api_port, config.of_port = args.upstream_dns, args.api_port, args.of_port
    config.pending_lease, config.permitted_lease = args.pending_lease, args.permitted_lease
    config.hwdb, config.dns_port = args.hwdb, args.dns_port
    config.ipv6, config.ipv6_prefix = not args.no_ipv6, args.ipv6_prefix
    config.stats_interval, config.flow_budget = args.stats_interval, args.flow_budget
    config.stations, config.max_pending = args.stations, args.max_pending
    config.hostapd_ctrl = args.hostapd_ctrl
    config.wifi_ssid, config.wifi_psk_file = args.wifi_ssid, args.wifi_psk_file
    config.hostapd_conf, config.radio_settings = args.hostapd_conf, args.radio_settings
    config.rebind_allow = args.rebind_allow
    config.apps_file = args.apps
    config.upstream_iface, config.uplink_kbit = args.upstream_iface, args.uplink_kbit
    config.downlink_iface, config.downlink_kbit = args.downlink_iface, args.downlink_kbit
    config.shaper_percent, config.high_share = args.shaper_percent, args.high_share
    config.high_device_share = args.high_device_share
    config.flow_export_port = args.flow_export_port
    if args.slice:
        config.slice_host, config.slice_port = args.slice_host, args.slice_port
        config.slice_cert, config.slice_key, config.slice_ca = args.slice_cert, args.slice_key, args.slice_ca
        config.slice_plain_tcp, config.public_addresses = args.slice_plain_tcp, args.public_address


def main(argv=None):
    args = parse_args(sys.argv[1:] if argv is None else argv)
    log_writer.configure(args.log_level.upper(), sys.stderr)
    configure(args)

    # The controller's threads hand packets to each other; the default 5 ms GIL switch
    # interval would let one busy thread hold a waiting DHCP answer for that long.
    sys.setswitchinterval(0.0005)

    startup.phase("arguments read")
    # os-ken reads its own options from oslo.config; it ships no manager command any more.
    from os_ken import cfg
    from os_ken.base.app_manager import AppManager

    startup.phase("os-ken imported")

    cfg.CONF(args=["--ofp-listen-host", CONFIG.of_host, "--ofp-tcp-listen-port", str(CONFIG.of_port)], project="os_ken")
    AppManager.run_apps(["homework_controller.edge.ofapp"])


if __name__ == "__main__":
    main()
