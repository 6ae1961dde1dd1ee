"""Start the Homework controller: python -m homework_controller --help."""
from __future__ import annotations

import argparse
import ipaddress
import logging
import sys

from . import dnsgate
from .config import CONFIG


def parse_args(argv):
    p = argparse.ArgumentParser(prog="homework_controller", description=__doc__)
    p.add_argument("--db", default=CONFIG.db, help="SQLite file for device decisions (default %(default)s)")
    p.add_argument("--wlan-port", default=CONFIG.wlan_port, help="OVS port name of the wireless interface")
    p.add_argument("--lan-iface", default=CONFIG.lan_iface, help="interface that holds the gateway addresses")
    p.add_argument("--upstream-dns", default=CONFIG.upstream_dns, help="resolver the router relays DNS to")
    p.add_argument("--api-port", type=int, default=CONFIG.api_port, help="ws.v1 port on loopback")
    p.add_argument("--of-port", type=int, default=CONFIG.of_port, help="OpenFlow listen port on loopback")
    p.add_argument("--pending-lease", type=int, default=CONFIG.pending_lease)
    p.add_argument("--permitted-lease", type=int, default=CONFIG.permitted_lease)
    p.add_argument("--hwdb", default=CONFIG.hwdb, help="hwdb address HOST:PORT to log to (default: none)")
    p.add_argument("--dns-port", type=int, default=CONFIG.dns_port, help="local port of the router's resolver")
    p.add_argument("--stats-interval", type=float, default=CONFIG.stats_interval,
                   help="seconds between flow statistics polls")
    p.add_argument("--flow-budget", type=int, default=CONFIG.flow_budget,
                   help="flows counted one by one per device before it is counted as a whole")
    p.add_argument("--max-pending", type=int, default=CONFIG.max_pending,
                   help="devices that may wait for a decision at once")
    p.add_argument("--stations", default=CONFIG.stations,
                   help="link quality source for Links: iw:wlan0 on a router, file:PATH from an emulated radio")
    p.add_argument("--hostapd-ctrl", default=CONFIG.hostapd_ctrl,
                   help="hostapd control socket, e.g. /run/hostapd/wlan0: blacklisted devices go on its deny list")
    p.add_argument("--rebind-allow", action="append", default=[], metavar="DOMAIN",
                   help="names under DOMAIN may answer with private addresses (a household's own local "
                        "names); any other name that does is refused (rebind protection); repeatable")
    p.add_argument("--log-level", default="INFO")
    args = p.parse_args(argv)
    try:
        ipaddress.IPv4Address(args.upstream_dns)
    except ValueError:
        p.error(f"--upstream-dns must be an IPv4 address, not {args.upstream_dns!r}")
    try:
        args.rebind_allow = tuple(dnsgate.normalize_domain(d) for d in args.rebind_allow)
    except dnsgate.BadDomain as exc:
        p.error(f"--rebind-allow: {exc}")
    if args.stats_interval < 0.5:
        p.error("--stats-interval below 0.5 s would keep the switch busy answering")
    for port in (args.api_port, args.of_port, args.dns_port):
        if not 0 < port < 65536:
            p.error(f"port {port} out of range")
    if min(args.pending_lease, args.permitted_lease) < 10:
        p.error("leases shorter than 10 seconds make clients renew constantly")
    return args


def main(argv=None):
    args = parse_args(sys.argv[1:] if argv is None else argv)
    logging.basicConfig(level=args.log_level.upper(), stream=sys.stderr,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    CONFIG.db, CONFIG.wlan_port, CONFIG.lan_iface = args.db, args.wlan_port, args.lan_iface
    CONFIG.upstream_dns, CONFIG.api_port, CONFIG.of_port = args.upstream_dns, args.api_port, args.of_port
    CONFIG.pending_lease, CONFIG.permitted_lease = args.pending_lease, args.permitted_lease
    CONFIG.hwdb, CONFIG.dns_port = args.hwdb, args.dns_port
    CONFIG.stats_interval, CONFIG.flow_budget = args.stats_interval, args.flow_budget
    CONFIG.stations, CONFIG.max_pending = args.stations, args.max_pending
    CONFIG.hostapd_ctrl = args.hostapd_ctrl
    CONFIG.rebind_allow = args.rebind_allow

    # The controller's threads hand packets to each other; the default 5 ms GIL switch
    # interval would let one busy thread hold a waiting DHCP answer for that long.
    sys.setswitchinterval(0.0005)

    # os-ken reads its own options from oslo.config; it ships no manager command any more.
    from os_ken import cfg
    from os_ken.base.app_manager import AppManager
    cfg.CONF(args=["--ofp-listen-host", CONFIG.of_host, "--ofp-tcp-listen-port", str(CONFIG.of_port)],
             project="os_ken")
    AppManager.run_apps(["homework_controller.ofapp"])


if __name__ == "__main__":
    main()
