"""The captive portal, the concern: a device held back (waiting for the household, paused, out of
its allowance) is told why, the way phones and laptops look for a captive portal.

- DHCP option 114 (RFC 8910) in every answer names the portal's API (RFC 8908), `wire.lan.API_URL`;
- while held back, the device reaches the router's resolver and the portal and nothing else
  (`flows.portal_rules`); the resolver answers the names the operating systems probe
  (`dns_rules.PROBE_NAMES`) with the router's address, so their probe gets the portal, not 204/"Success";
- the portal itself (the API and the page) is the web UI's, on the LAN side; it asks ws.v1
  `portal/<ip>` about the device at the request's source address (`view`).

The per-device code ("K7-Q2") is what the person at the wall panel matches against the label on
the Guest Board. It is no secret (the board shows it), only an identifier, unique among the devices
the router knows. It is a keyed hash of the device's MAC (`keyed_codes`: the key is made once and
kept in the controller's database), so a restart gives a waiting device the code its page and its
label already show, and nothing is written per device (a storm of newcomers costs the disk nothing).
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
from collections.abc import Callable

from ..wire.lan import PORTAL_URL

# Four characters, shown as "K7-Q2": letters and digits no one confuses (no 0/O/D, 1/I/L, 2/Z, 5/S, 8/B,
# U/V): 22^4 = 234,256 codes.
CODE_ALPHABET = "ACEFGHJKMNPQRTWXY34679"


SECRET_SETTING = "portal_code_key"  # the key of the codes' hash, in the store's settings


def keyed_codes(key: bytes) -> Callable[[str, int], str]:
    """A device's code from its MAC: the same across restarts; `attempt` draws another when taken."""

    def code_of(mac: str, attempt: int) -> str:
        n = int.from_bytes(hmac.new(key, f"{mac}/{attempt}".encode(), hashlib.sha256).digest()[:8], "big")
        chars = ""
        for _ in range(4):
            n, i = divmod(n, len(CODE_ALPHABET))
            chars += CODE_ALPHABET[i]
        return f"{chars[:2]}-{chars[2:]}"

    return code_of


def codes_key(settings: dict[str, str], save: Callable[[str, str], None]) -> bytes:
    """The key of the codes' hash: the store's, made at the first start."""
    key = settings.get(SECRET_SETTING)
    if key is None:
        key = secrets.token_hex(16)
        save(SECRET_SETTING, key)
    return bytes.fromhex(key)


class Portal:
    def __init__(self, make_code: Callable[[str, int], str]):
        self._make_code = make_code
        self._codes: dict[str, str] = {}
        self._taken: set[str] = set()

    def knows(self, mac: str) -> bool:
        return mac in self._codes

    def forget(self, mac: str) -> None:
        code = self._codes.pop(mac, None)
        self._taken.discard(code or "")

    def code_of(self, mac: str) -> str:
        code = self._codes.get(mac)
        if code is None:
            attempt = 0
            code = self._make_code(mac, attempt)
            while code in self._taken:  # 234,256 codes for at most a few hundred devices: rarely twice
                attempt += 1
                code = self._make_code(mac, attempt)
            self._codes[mac] = code
            self._taken.add(code)
        return code

    def status_of(self, mac: str) -> dict:
        return {"portal_code": self.code_of(mac)}


def waiting_reason(status: dict) -> str | None:
    """Why the device may not go online now, from its status: "pending" (the household has not
    decided), "denied", "paused" / "bedtime" / "allowance" (the pause's why, `paused_why`); None if it may."""
    state = status.get("state")
    if state == "pending":
        return "pending"
    if state in ("denied", "blacklisted"):
        return "denied"
    if status.get("paused") or status.get("paused_why"):
        why = status.get("paused_why")
        return why if why in ("bedtime", "allowance") else "paused"
    return None


def view(status: dict) -> dict:
    """What the portal tells a device about itself (and nothing about any other): whether it is held
    back, why, until when, and its code. The web UI turns it into the API's and the page's answers."""
    reason = waiting_reason(status)
    paused = reason in ("paused", "bedtime", "allowance")
    return {
        "captive": reason is not None,
        "reason": reason,
        "code": status.get("portal_code"),
        "paused_until": status.get("paused_until") if paused else None,
        "allowance": _used_up(status) if reason == "allowance" else None,  # what was used up
        "user_portal_url": PORTAL_URL,
    }


def _used_up(status: dict) -> dict | None:
    """The allowance that holds the device: its own, else the one it shares (a person's)."""
    for allowance in (status.get("allowance"), status.get("shared_allowance")):
        if allowance and allowance.get("used_up"):
            return allowance
    return None
