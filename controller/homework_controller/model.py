"""The shared vocabulary: devices, their states and their per-device /30 subnets.

Pure data and arithmetic; no I/O.
"""

from __future__ import annotations

import enum
import re
from dataclasses import dataclass, fields

from .wire.lan import Subnet

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
