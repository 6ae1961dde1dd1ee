"""The LAN's IPv4 addresses: the home's /16, each device's /30 (`Subnet`), and the router's own address
where its resolver, its web UI and the captive portal answer. Pure arithmetic and constants."""

from __future__ import annotations

import functools
import ipaddress
import socket
from dataclasses import dataclass, field

LAN_NETWORK = ipaddress.IPv4Network("10.2.0.0/16")
# Subnet index 0 (10.2.0.0/30) is kept for the router itself: 10.2.0.1 is the
# source of DHCP NAKs sent to devices the router holds no lease for.
FIRST_DEVICE_SUBNET = 1
SUBNET_COUNT = LAN_NETWORK.num_addresses // 4
ROUTER_FALLBACK_IP = str(LAN_NETWORK.network_address + 1)
_LAN_BASE = int(LAN_NETWORK.network_address)

# The router's own LAN address (10.2.0.1: its /30 is kept for the router), where the web UI listens.
ROUTER_ADDRESS = ROUTER_FALLBACK_IP
# Plain HTTP on port 80: the probes are plain HTTP to port 80, and no publicly trusted certificate can
# name a home router's LAN address (docs/captive-portal.md says what each OS makes of it). Port 80 is
# sent on to the web UI's port by the router's own nftables rule (`redirect_port_80`).
PORTAL_URL = f"http://{ROUTER_ADDRESS}/captive-portal"
API_URL = f"{PORTAL_URL}/api"
HTTP_PORT = 80


@dataclass(frozen=True)
class Subnet:
    """One device's /30: .0 network, .1 router gateway, .2 device, .3 broadcast."""

    index: int
    # Its addresses, worked out once: every DHCP answer and every rule of the device names them.
    network: str = field(init=False, repr=False, compare=False)
    gateway: str = field(init=False, repr=False, compare=False)
    device_ip: str = field(init=False, repr=False, compare=False)
    broadcast: str = field(init=False, repr=False, compare=False)

    def __post_init__(self):
        if not FIRST_DEVICE_SUBNET <= self.index < SUBNET_COUNT:
            raise ValueError(f"subnet index {self.index} outside 10.2.0.0/16")
        first = _LAN_BASE + self.index * 4
        for host, name in enumerate(("network", "gateway", "device_ip", "broadcast")):
            object.__setattr__(self, name, socket.inet_ntoa((first + host).to_bytes(4, "big")))

    mask = "255.255.255.252"
    prefixlen = 30

    @staticmethod
    @functools.lru_cache(maxsize=8192)
    def device_index(ip: str) -> int | None:
        """The index of the /30 whose device address `ip` is; None if it is no device's address.
        Asked of both ends of every counted flow at each poll, for the same few addresses: kept."""
        try:
            addr = ipaddress.IPv4Address(ip)
        except ValueError:
            return None
        if addr not in LAN_NETWORK:
            return None
        index, host = divmod(int(addr) - _LAN_BASE, 4)
        if not FIRST_DEVICE_SUBNET <= index < SUBNET_COUNT or host != 2:
            return None
        return index
