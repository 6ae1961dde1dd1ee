"""The shared vocabulary: devices, their states and their per-device /30 subnets.

Pure data and arithmetic; no I/O.
"""

from __future__ import annotations

import enum
import functools
import ipaddress
import re
import socket
from dataclasses import dataclass, field, fields

LAN_NETWORK = ipaddress.IPv4Network("10.2.0.0/16")
# Subnet index 0 (10.2.0.0/30) is kept for the router itself: 10.2.0.1 is the
# source of DHCP NAKs sent to devices the router holds no lease for.
FIRST_DEVICE_SUBNET = 1
SUBNET_COUNT = LAN_NETWORK.num_addresses // 4
ROUTER_FALLBACK_IP = str(LAN_NETWORK.network_address + 1)
_LAN_BASE = int(LAN_NETWORK.network_address)

_MAC_RE = re.compile(r"^[0-9a-f]{2}(:[0-9a-f]{2}){5}$")


class State(str, enum.Enum):
    PENDING = "pending"
    PERMITTED = "permitted"
    DENIED = "denied"
    BLACKLISTED = "blacklisted"


class BadMac(ValueError):
    pass


def normalize_mac(text: str) -> str:
    """Lower-case colon form; accepts '-' separators. Raises BadMac otherwise."""
    mac = text.strip().lower().replace("-", ":")
    if not _MAC_RE.match(mac):
        raise BadMac(f"not a MAC address: {text!r} (expected six hex pairs like 02:00:00:00:00:01)")
    if int(mac[:2], 16) & 1:
        raise BadMac(f"{mac} is a multicast address, not a device")
    return mac


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


@dataclass(frozen=True)
class Device:
    mac: str
    state: State = State.PENDING
    subnet: Subnet | None = None
    hostname: str = ""
    vendor_class: str = ""
    name: str = ""  # what the household calls it
    first_seen: float = 0.0
    last_seen: float = 0.0
    lease_expires: float = 0.0  # epoch seconds; 0 = no active lease

    def with_(self, **changes) -> Device:
        # Its fields are all plain (no __post_init__, nothing to check), so the copy's are set in one go: the
        # frozen constructor sets each through object.__setattr__, and dataclasses.replace also looks up every
        # field's kind, which cost more than the rest of a DHCP message's bookkeeping (a few of these per message).
        if not changes.keys() <= _DEVICE_FIELDS:
            raise TypeError(f"Device has no field {', '.join(sorted(changes.keys() - _DEVICE_FIELDS))}")
        copy = object.__new__(Device)
        copy.__dict__.update(self.__dict__, **changes)
        return copy

    def lease_active(self, now: float) -> bool:
        return self.subnet is not None and self.lease_expires > now

    @property
    def label(self) -> str:
        """What the household's messages call it: its name, else the hostname it gave, else its MAC."""
        return self.name or self.hostname or self.mac

    @property
    def forwards(self) -> bool:
        """Whether the device's ordinary traffic is forwarded (given a live lease)."""
        return self.state is State.PERMITTED

    def to_json(self, now: float) -> dict:
        lease_left = max(0, int(self.lease_expires - now)) if self.lease_expires else 0
        return {
            "mac": self.mac,
            "state": self.state.value,
            "ip": self.subnet.device_ip if self.subnet else None,
            "gateway": self.subnet.gateway if self.subnet else None,
            "subnet": f"{self.subnet.network}/30" if self.subnet else None,
            "hostname": self.hostname,
            "vendor_class": self.vendor_class,
            "name": self.name,
            "first_seen": self.first_seen,
            "last_seen": self.last_seen,
            "lease_expires": self.lease_expires,
            "lease_seconds_left": lease_left,
        }


_DEVICE_FIELDS = frozenset(f.name for f in fields(Device))
