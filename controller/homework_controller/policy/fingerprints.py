"""Is a device's MAC in use by a second sender? Pure functions of what the router knows and what it sees.

A copied MAC passes the switch's MAC + IP check, so the router looks at what a copier does
not copy by accident: its DHCP client. The sender that took a device's current lease left a
fingerprint (host name, client identifier, the options it asks for and in which order, vendor
class); a DHCP message from the same MAC while that lease runs, whose fingerprint differs in a
field both carry, comes from another client. On a radio hostapd also says which passphrase
a station joined with: a device that has its own passphrase joining with another one (the
shared guest passphrase) is not the device. What this misses: a copier that copies the
fingerprint too, or that never asks for an address (docs/SECURITY.md).
"""

from __future__ import annotations

from dataclasses import dataclass

from .dhcp import DhcpRequest

CLONE_EVENT_INTERVAL_S = 300  # at most one mac-clone Event per device this often

# Field, and how the household reads it.
FIELDS = (
    ("hostname", "host name"),
    ("client_id", "client identifier"),
    ("parameter_list", "requested options"),
    ("vendor_class", "vendor class"),
)


@dataclass(frozen=True)
class Fingerprint:
    hostname: str = ""
    client_id: str = ""
    parameter_list: str = ""
    vendor_class: str = ""

    @classmethod
    def of(cls, req: DhcpRequest) -> Fingerprint:
        return cls(req.hostname, req.client_id, req.parameter_list, req.vendor_class)


def differences(known: Fingerprint, seen: Fingerprint) -> list[str]:
    """What `seen` shows that the lease holder's `known` does not, in words: only fields both carry
    (clients leave options out of some messages) and that differ."""
    found = []
    for field, label in FIELDS:
        was, now = getattr(known, field), getattr(seen, field)
        if was and now and was != now:
            found.append(f"{label} {was!r} -> {now!r}" if field in ("hostname", "vendor_class") else f"{label} differ")
    return found


def compared(known: Fingerprint, seen: Fingerprint) -> tuple[list[str], list[str]]:
    """What two DHCP clients share and how they differ, field by field, in words (a look-alike's proof):
    matched, the fields both carry alike; differs, those that differ or that only one carries."""
    matched, differs = [], []
    for field, label in FIELDS:
        was, now = getattr(known, field), getattr(seen, field)
        if was == now:
            if was:
                matched.append(label)
        elif was and now:
            differs.append(
                f"{label} {was!r} -> {now!r}" if field in ("hostname", "vendor_class") else f"{label} differ"
            )
        else:
            differs.append(f"{label} {'left out' if was else 'sent'} this time")
    return matched, differs


def wrong_key(own_keyid: str | None, joined_keyid: str) -> list[str]:
    """A station joined the radio with `joined_keyid` (hostapd's AP-STA-CONNECTED); the device
    whose MAC it uses has its own passphrase `own_keyid` (None: it has none, anything goes)."""
    if own_keyid is None or joined_keyid == own_keyid:
        return []
    used = f"passphrase {joined_keyid!r}" if joined_keyid else "a passphrase without a key id"
    return [f"joined the Wi-Fi with {used}, not its own"]


@dataclass(frozen=True)
class Suspicion:
    at: float
    differs: tuple[str, ...]

    def to_json(self) -> dict:
        return {"at": self.at, "differs": list(self.differs)}
