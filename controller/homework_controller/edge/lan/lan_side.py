"""The router's stack on the LAN side, set up once at start (nftables tables replaced atomically, a
route): every DNS packet from the LAN sent to the router's resolver (`dns_server`), and what the
captive portal needs for a held-back device (`portal`). The I/O edge: runs as root.
"""

from __future__ import annotations

import subprocess

from ...wire.lan import HTTP_PORT, LAN_NETWORK, ROUTER_ADDRESS

DNS_TABLE = "homework_dns"
PORTAL_TABLE = "homework_portal"
# Where the web UI listens on the router's LAN address (deploy/services.toml: `--listen ${LAN_ADDRESS}:8080`).
WEB_UI_PORT = 8080


def redirect_lan_dns(lan_iface: str, port: int) -> None:
    """Send every DNS packet from the LAN, IPv4 and IPv6, to the router's resolver (nftables, replaced atomically).

    `redirect` rewrites the destination to an address of the interface the packet came in on,
    so the resolver, bound to that interface, sees every redirected query: a device cannot get
    round its blocked names by asking another resolver, over either family.
    """
    ruleset = "".join(
        f"""
table {family} {DNS_TABLE}
flush table {family} {DNS_TABLE}
table {family} {DNS_TABLE} {{
  chain prerouting {{
    type nat hook prerouting priority dstnat; policy accept;
    iifname "{lan_iface}" udp dport 53 redirect to :{port}
    iifname "{lan_iface}" tcp dport 53 redirect to :{port}
  }}
}}
"""
        for family in ("ip", "ip6")
    )
    proc = subprocess.run(["nft", "-f", "-"], input=ruleset, capture_output=True, text=True)
    if proc.returncode != 0:
        raise RuntimeError(f"could not redirect LAN DNS to port {port}: {proc.stderr.strip()}")


def open_lan_side(lan_iface: str, web_port: int = WEB_UI_PORT) -> None:
    """Let the router's stack answer a held-back device (whose rules let through only its DNS and the
    portal): a route to the whole LAN on the LAN interface (a device gets its gateway address on the
    interface only once it is let in, so a storm of newcomers costs no netlink work), and the LAN's
    plain HTTP to the router's address sent on to the web UI (nftables, replaced atomically): the OS
    probes and the portal's URLs are port 80, which the unprivileged web UI cannot listen on."""
    ruleset = f"""
table ip {PORTAL_TABLE}
flush table ip {PORTAL_TABLE}
table ip {PORTAL_TABLE} {{
  chain prerouting {{
    type nat hook prerouting priority dstnat; policy accept;
    iifname "{lan_iface}" ip daddr {ROUTER_ADDRESS} tcp dport {HTTP_PORT} dnat to {ROUTER_ADDRESS}:{web_port}
  }}
}}
"""
    for command, given in (
        (["ip", "route", "replace", str(LAN_NETWORK), "dev", lan_iface, "scope", "link"], None),
        (["nft", "-f", "-"], ruleset),
    ):
        proc = subprocess.run(command, input=given, capture_output=True, text=True)
        if proc.returncode != 0:
            raise RuntimeError(f"could not open the portal ({' '.join(command[:2])}): {proc.stderr.strip()}")
