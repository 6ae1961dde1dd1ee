"""The captive portal, the concern: a device held back (waiting for the household, paused, out of
its allowance) is told why, the way phones and laptops look for a captive portal.

- DHCP option 114 (RFC 8910) in every answer names the portal's API (RFC 8908), `API_URL`;
- while held back, the device reaches the router's resolver and the portal and nothing else
  (`flows.portal_rules`); the resolver answers the names the operating systems probe
  (`PROBE_NAMES`) with the router's address, so their probe gets the portal, not 204/"Success";
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

import dnslib

from ..model import ROUTER_FALLBACK_IP

# The router's own LAN address (10.2.0.1: its /30 is kept for the router), where the web UI listens.
ROUTER_ADDRESS = ROUTER_FALLBACK_IP
# Plain HTTP on port 80: the probes are plain HTTP to port 80, and no publicly trusted certificate can
# name a home router's LAN address (docs/captive-portal.md says what each OS makes of it). Port 80 is
# sent on to the web UI's port by the router's own nftables rule (`redirect_port_80`).
PORTAL_URL = f"http://{ROUTER_ADDRESS}/captive-portal"
API_URL = f"{PORTAL_URL}/api"
HTTP_PORT = 80

# The names operating systems look up to tell whether they are behind a captive portal.
PROBE_NAMES = frozenset(
    {
        # Android (and ChromeOS): http://connectivitycheck.gstatic.com/generate_204 and older names.
        "connectivitycheck.gstatic.com",
        "connectivitycheck.android.com",
        "clients1.google.com",
        "clients3.google.com",
        "www.google.com",
        # iOS, iPadOS, macOS: http://captive.apple.com/hotspot-detect.html
        "captive.apple.com",
        "www.apple.com",
        "www.appleiphonecell.com",
        # Windows: http://www.msftconnecttest.com/connecttest.txt (and the older NCSI name).
        "www.msftconnecttest.com",
        "www.msftncsi.com",
        # Firefox's own check.
        "detectportal.firefox.com",
    }
)
# How long a device may keep the router's address for a probe name: once it may go online, its next
# probe must find the real one.
PROBE_TTL_S = 1

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


def is_probe(qname: str) -> bool:
    """Whether a (normalised, lower-case) question name is one an OS probes for a captive portal."""
    return qname.rstrip(".") in PROBE_NAMES


def probe_answer(record: dnslib.DNSRecord) -> bytes:
    """The resolver's answer to a held-back device's query for a probe name: the router's address
    (A), or no address of that type (NOERROR, empty: an NXDOMAIN would tell the device that the name
    does not exist at all), good for PROBE_TTL_S."""
    reply = record.reply()
    reply.header.aa = 0
    if record.q.qtype == dnslib.QTYPE.A:
        reply.add_answer(dnslib.RR(record.q.qname, dnslib.QTYPE.A, rdata=dnslib.A(ROUTER_ADDRESS), ttl=PROBE_TTL_S))
    return reply.pack()


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
