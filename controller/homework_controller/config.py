"""Controller settings, filled in by __main__ from the command line before the app starts.

os-ken instantiates apps itself, so the app reads this module-level object.
"""
from __future__ import annotations

from dataclasses import dataclass


@dataclass
class Config:
    db: str = "/var/lib/homework/controller.sqlite"
    wlan_port: str = "wlan0"         # the OVS port of the wireless interface
    lan_iface: str = "br-lan"        # the router's LAN interface, holding each /30's gateway
    upstream_dns: str = "127.0.0.53"
    api_host: str = "127.0.0.1"
    api_port: int = 8081
    of_host: str = "127.0.0.1"
    of_port: int = 6653
    pending_lease: int = 30
    permitted_lease: int = 3600
    per_device_queue: int = 64
    tick_seconds: float = 2.0
    hwdb: str = ""                   # host:port of hwdb; empty: log nothing
    dns_port: int = 5354             # where the router's stack redirects the LAN's DNS
    stats_interval: float = 5.0      # seconds between flow statistics polls (Flows rows)
    flow_budget: int = 200           # learnt flows per device before it is counted as a whole
    max_pending: int = 256           # devices waiting for a decision; beyond, the silent longest makes way
    hostapd_ctrl: str = ""           # hostapd's control socket (DIR/IFACE): blacklisted MACs go on its deny list
    stations: str = ""               # where link quality comes from: iw:wlan0 or file:PATH (emulated radio)
    rebind_allow: tuple[str, ...] = ()  # domains whose names may answer with private addresses (rebind protection)


CONFIG = Config()
